package faultproxy_test

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/soak/faultproxy"
)

const (
	// waitLimit bounds every wait for something that must happen.
	waitLimit = 10 * time.Second
	// silenceWindow is how long a read waits to show that nothing arrives.
	silenceWindow = 100 * time.Millisecond
	// pollEvery is the polling interval of bounded waits.
	pollEvery = time.Millisecond
)

// backend is the server behind the proxy. It echoes what it reads and, when a
// connection ends, reports the bytes it read and the first error it met
// (io.EOF after an orderly close by the client).
type backend struct {
	ln       net.Listener
	accepted atomic.Int64
	sessions chan session
	stop     chan struct{}
	wg       sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

type session struct {
	got []byte
	err error
}

func startBackend(t *testing.T) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &backend{
		ln:       ln,
		sessions: make(chan session, 64),
		stop:     make(chan struct{}),
		conns:    make(map[net.Conn]struct{}),
	}
	b.wg.Add(1)
	go b.serve()
	t.Cleanup(func() {
		close(b.stop)
		_ = ln.Close()
		b.mu.Lock()
		for c := range b.conns {
			_ = c.Close()
		}
		b.mu.Unlock()
		b.wg.Wait()
	})
	return b
}

func (b *backend) addr() string { return b.ln.Addr().String() }

func (b *backend) serve() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.accepted.Add(1)
		b.mu.Lock()
		b.conns[c] = struct{}{}
		b.mu.Unlock()
		b.wg.Add(1)
		go b.echo(c)
	}
}

func (b *backend) echo(c net.Conn) {
	defer b.wg.Done()
	var got []byte
	buf := make([]byte, 4096)
	var err error
	for err == nil {
		var n int
		n, err = c.Read(buf)
		got = append(got, buf[:n]...)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); err == nil {
				err = werr
			}
		}
	}
	b.mu.Lock()
	delete(b.conns, c)
	b.mu.Unlock()
	_ = c.Close()
	select {
	case b.sessions <- session{got: got, err: err}:
	case <-b.stop:
	}
}

// next returns the next connection that ended.
func (b *backend) next(t *testing.T) session {
	t.Helper()
	select {
	case s := <-b.sessions:
		return s
	case <-time.After(waitLimit):
		t.Fatal("no backend connection ended")
		return session{}
	}
}

// newProxy starts a proxy to target that the test's cleanup closes, checking
// that it leaves no goroutine behind.
func newProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(target, faultproxy.Options{})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, p.Close())
		requireNoProxyGoroutines(t)
	})
	return p
}

// requireNoProxyGoroutines fails unless every goroutine running the proxy's
// code is gone. The test's own code lives in faultproxy_test and does not match.
func requireNoProxyGoroutines(t *testing.T) {
	t.Helper()
	const pkg = "github.com/syncd-dev/syncd/soak/faultproxy."
	stacks := func() string {
		buf := make([]byte, 1<<20)
		return string(buf[:runtime.Stack(buf, true)])
	}
	if !assert.Eventually(t, func() bool { return !strings.Contains(stacks(), pkg) }, waitLimit, pollEvery) {
		t.Fatalf("proxy goroutines left behind:\n%s", stacks())
	}
}

// dial connects to addr and closes the connection at cleanup.
func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c.(*net.TCPConn)
}

// roundTrip sends msg and requires the echo back.
func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_, err := c.Write([]byte(msg))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(waitLimit)))
	got := make([]byte, len(msg))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, msg, string(got))
	require.NoError(t, c.SetReadDeadline(time.Time{}))
}

// readToEnd reads until the connection fails or ends and returns what arrived
// and the error that ended it.
func readToEnd(t *testing.T, c net.Conn) ([]byte, error) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(waitLimit)))
	var got []byte
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			require.NotErrorIs(t, err, os.ErrDeadlineExceeded, "the connection never ended")
			return got, err
		}
	}
}

// requireSilent requires that nothing arrives on c for silenceWindow and that
// c is still open.
func requireSilent(t *testing.T, c net.Conn) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(silenceWindow)))
	n, err := c.Read(make([]byte, 1))
	require.Zero(t, n, "bytes arrived through a silent connection")
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.NoError(t, c.SetReadDeadline(time.Time{}))
}

// requireReset requires that err reports a TCP reset.
func requireReset(t *testing.T, err error) {
	t.Helper()
	require.Truef(t, isReset(err), "want a connection reset, got %v", err)
}

func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// requireRefused requires that a connection to addr is reset without being
// forwarded: the dial itself or the first read fails with a reset.
func requireRefused(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		requireReset(t, err)
		return
	}
	defer func() { _ = c.Close() }()
	_, err = readToEnd(t, c)
	requireReset(t, err)
}

// eventuallyStats waits until the proxy's stats satisfy ok.
func eventuallyStats(t *testing.T, p *faultproxy.Proxy, ok func(faultproxy.Stats) bool) {
	t.Helper()
	if !assert.Eventually(t, func() bool { return ok(p.Stats()) }, waitLimit, pollEvery) {
		t.Fatalf("stats never matched: %+v", p.Stats())
	}
}
