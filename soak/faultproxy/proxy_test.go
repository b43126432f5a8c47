package faultproxy_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/soak/faultproxy"
)

func TestPassForwardsBothWays(t *testing.T) {
	be := startBackend(t)
	p := newProxy(t, be.addr())

	c := dial(t, p.Addr())
	roundTrip(t, c, "hello")
	roundTrip(t, c, "world")

	eventuallyStats(t, p, func(s faultproxy.Stats) bool { return s.BytesUp == 10 && s.BytesDown == 10 })
	st := p.Stats()
	require.Equal(t, int64(1), st.Accepted)
	require.Equal(t, 1, st.Live)
	require.Zero(t, st.Resets)
}

func TestHalfCloseIsForwarded(t *testing.T) {
	be := startBackend(t)
	p := newProxy(t, be.addr())

	c := dial(t, p.Addr())
	_, err := c.Write([]byte("last words"))
	require.NoError(t, err)
	require.NoError(t, c.CloseWrite())

	got, err := readToEnd(t, c)
	require.ErrorIs(t, err, io.EOF, "the server's orderly close must arrive as EOF")
	require.Equal(t, "last words", string(got))

	s := be.next(t)
	require.Equal(t, "last words", string(s.got))
	require.ErrorIs(t, s.err, io.EOF, "the client's half-close must reach the server as EOF")
	eventuallyStats(t, p, func(s faultproxy.Stats) bool { return s.Live == 0 })
}

func TestBlackhole(t *testing.T) {
	be := startBackend(t)
	p := newProxy(t, be.addr())

	busy := dial(t, p.Addr())
	roundTrip(t, busy, "ping")
	idle := dial(t, p.Addr())
	roundTrip(t, idle, "ping")
	require.Equal(t, int64(2), be.accepted.Load())

	p.SetMode(faultproxy.Blackhole)

	_, err := busy.Write([]byte("lost"))
	require.NoError(t, err, "a blackhole swallows writes without an error")
	requireSilent(t, busy)
	eventuallyStats(t, p, func(s faultproxy.Stats) bool { return s.DiscardedUp == 4 })

	dark := dial(t, p.Addr())
	_, err = dark.Write([]byte("void"))
	require.NoError(t, err)
	requireSilent(t, dark)
	eventuallyStats(t, p, func(s faultproxy.Stats) bool { return s.DiscardedUp == 8 })
	require.Equal(t, int64(2), be.accepted.Load(), "a connection accepted in a blackhole must not reach the server")

	p.SetMode(faultproxy.Pass)

	fresh := dial(t, p.Addr())
	roundTrip(t, fresh, "back")
	roundTrip(t, idle, "still here") // lost nothing, so it resumes

	_, err = busy.Write([]byte("again"))
	require.NoError(t, err)
	requireSilent(t, busy) // lost bytes, so it stays dead
	_, err = dark.Write([]byte("again"))
	require.NoError(t, err)
	requireSilent(t, dark)

	st := p.Stats()
	require.Equal(t, 4, st.Live, "blackholed connections stay open")
	require.Zero(t, st.Resets)
}

func TestRefuse(t *testing.T) {
	be := startBackend(t)
	p := newProxy(t, be.addr())

	live := dial(t, p.Addr())
	roundTrip(t, live, "before")

	p.SetMode(faultproxy.Refuse)
	requireRefused(t, p.Addr())
	roundTrip(t, live, "live connections keep flowing")
	require.Equal(t, int64(1), be.accepted.Load(), "a refused connection must not reach the server")
	require.Equal(t, int64(1), p.Stats().Refused)

	p.SetMode(faultproxy.Pass)
	roundTrip(t, dial(t, p.Addr()), "after")
}

func TestResetAll(t *testing.T) {
	be := startBackend(t)
	p := newProxy(t, be.addr())

	c := dial(t, p.Addr())
	roundTrip(t, c, "ping")

	require.Equal(t, 1, p.ResetAll())

	_, err := readToEnd(t, c)
	requireReset(t, err)
	s := be.next(t)
	requireReset(t, s.err)

	st := p.Stats()
	require.Equal(t, int64(1), st.Resets)
	require.Zero(t, st.Live)
	roundTrip(t, dial(t, p.Addr()), "new connections are unaffected")
}

func TestCut(t *testing.T) {
	// The last byte exists so that a budget of the whole payload still fires.
	sent := []byte("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!")
	tests := []struct {
		name string
		dir  faultproxy.Direction
		n    int64
		next bool // CutNextAfter before dialing; else CutAfter on a live connection
	}{
		{name: "next connection, down", dir: faultproxy.Down, n: 10, next: true},
		{name: "next connection, up", dir: faultproxy.Up, n: 10, next: true},
		{name: "next connection, down, ack lost", dir: faultproxy.Down, n: 0, next: true},
		{name: "next connection, up, nothing forwarded", dir: faultproxy.Up, n: 0, next: true},
		{name: "live connection, down", dir: faultproxy.Down, n: 10},
		{name: "live connection, up", dir: faultproxy.Up, n: 10},
		{name: "live connection, all but the last byte", dir: faultproxy.Down, n: int64(len(sent) - 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := startBackend(t)
			p := newProxy(t, be.addr())

			var before []byte // what crossed before the cut was armed
			if tt.next {
				p.CutNextAfter(tt.dir, tt.n)
				require.Equal(t, 1, p.Stats().PendingCuts)
			}
			c := dial(t, p.Addr())
			if !tt.next {
				roundTrip(t, c, "ping")
				before = []byte("ping")
				p.CutAfter(tt.dir, tt.n)
			}

			_, err := c.Write(sent)
			require.NoError(t, err)
			got, err := readToEnd(t, c)
			requireReset(t, err)
			s := be.next(t)
			requireReset(t, s.err)

			switch tt.dir {
			case faultproxy.Down:
				require.Equal(t, string(sent[:tt.n]), string(got), "the client must get exactly the budget")
			case faultproxy.Up:
				want := string(before) + string(sent[:tt.n])
				require.Equal(t, want, string(s.got), "the server must get exactly the budget")
			}
			st := p.Stats()
			require.Equal(t, int64(1), st.Cuts)
			require.Equal(t, int64(1), st.Resets)
			require.Zero(t, st.PendingCuts)
			require.Zero(t, st.Live)
		})
	}
}

func TestCutNextTakesOnePerConnection(t *testing.T) {
	be := startBackend(t)
	p := newProxy(t, be.addr())

	p.CutNextAfter(faultproxy.Down, 0)
	p.CutNextAfter(faultproxy.Down, 2)

	// Connections refused or blackholed at accept take no cut.
	p.SetMode(faultproxy.Refuse)
	requireRefused(t, p.Addr())
	p.SetMode(faultproxy.Blackhole)
	dial(t, p.Addr())
	eventuallyStats(t, p, func(s faultproxy.Stats) bool { return s.Accepted == 2 })
	require.Equal(t, 2, p.Stats().PendingCuts)
	p.SetMode(faultproxy.Pass)

	for _, want := range []string{"", "ab"} {
		c := dial(t, p.Addr())
		_, err := c.Write([]byte("abcdef"))
		require.NoError(t, err)
		got, err := readToEnd(t, c)
		requireReset(t, err)
		require.Equal(t, want, string(got))
	}
	roundTrip(t, dial(t, p.Addr()), "the third connection has no cut")
	require.Equal(t, int64(2), p.Stats().Cuts)
}

func TestClearCuts(t *testing.T) {
	be := startBackend(t)
	p := newProxy(t, be.addr())

	live := dial(t, p.Addr())
	roundTrip(t, live, "ping")
	p.CutAfter(faultproxy.Down, 0)
	p.CutNextAfter(faultproxy.Up, 0)
	p.ClearCuts()

	require.Zero(t, p.Stats().PendingCuts)
	roundTrip(t, live, "live cut disarmed")
	roundTrip(t, dial(t, p.Addr()), "next cut disarmed")
	require.Zero(t, p.Stats().Cuts)
}

func TestDelayKeepsOrder(t *testing.T) {
	be := startBackend(t)
	p := newProxy(t, be.addr())
	p.SetDelay(20*time.Millisecond, 5*time.Millisecond)

	c := dial(t, p.Addr())
	const count = 200
	want := make([]byte, 4*count)
	for i := range count {
		binary.BigEndian.PutUint32(want[4*i:], uint32(i))
	}
	writeErr := make(chan error, 1)
	go func() {
		for i := range count {
			if i == count/2 {
				// Later chunks are due before earlier ones; they must still wait their turn.
				p.SetDelay(0, 0)
			}
			if _, err := c.Write(want[4*i : 4*i+4]); err != nil {
				writeErr <- err
				return
			}
		}
		writeErr <- nil
	}()

	got := make([]byte, len(want))
	require.NoError(t, c.SetReadDeadline(time.Now().Add(waitLimit)))
	_, err := io.ReadFull(c, got)
	require.NoError(t, err)
	require.NoError(t, <-writeErr)
	require.Equal(t, want, got)
}

func TestDelayHoldsBytes(t *testing.T) {
	be := startBackend(t)
	p := newProxy(t, be.addr())
	p.SetDelay(time.Hour, 0)

	c := dial(t, p.Addr())
	_, err := c.Write([]byte("later"))
	require.NoError(t, err)
	requireSilent(t, c)
	require.Zero(t, p.Stats().BytesUp, "a delayed chunk must not be forwarded early")
}

func TestThrottle(t *testing.T) {
	be := startBackend(t)
	p := newProxy(t, be.addr())

	t.Run("holds bytes back", func(t *testing.T) {
		p.SetThrottle(1)
		c := dial(t, p.Addr())
		_, err := c.Write([]byte("0123456789"))
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(silenceWindow)))
		got := make([]byte, 10)
		n, err := io.ReadFull(c, got)
		require.Error(t, err, "ten bytes cannot pass at one byte per second so soon")
		require.Less(t, n, 10)

		p.SetThrottle(0)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(waitLimit)))
		_, err = io.ReadFull(c, got[n:])
		require.NoError(t, err)
		require.Equal(t, "0123456789", string(got))
	})

	t.Run("delivers everything", func(t *testing.T) {
		p.SetThrottle(200_000)
		rng := rand.New(rand.NewPCG(1, 2))
		payload := make([]byte, 20_000)
		for i := range payload {
			payload[i] = byte(rng.Uint32())
		}
		c := dial(t, p.Addr())
		_, err := c.Write(payload)
		require.NoError(t, err)
		got := make([]byte, len(payload))
		require.NoError(t, c.SetReadDeadline(time.Now().Add(waitLimit)))
		_, err = io.ReadFull(c, got)
		require.NoError(t, err)
		require.True(t, bytes.Equal(payload, got), "bytes changed on the way")
	})
}

func TestDialFailureResetsClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gone := ln.Addr().String()
	require.NoError(t, ln.Close())

	p := newProxy(t, gone)
	requireRefused(t, p.Addr())
	eventuallyStats(t, p, func(s faultproxy.Stats) bool { return s.DialFailures == 1 && s.Live == 0 })

	be := startBackend(t)
	require.NoError(t, p.SetTarget(be.addr()))
	roundTrip(t, dial(t, p.Addr()), "the new target answers")
}

func TestNewValidatesAddresses(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "10.1.2.3:0", "localhost:0", ":0"} {
		_, err := faultproxy.New("127.0.0.1:1", faultproxy.Options{ListenAddr: addr})
		require.ErrorIs(t, err, faultproxy.ErrNotLoopback, "listen address %q", addr)
	}
	for _, target := range []string{"", "127.0.0.1", "127.0.0.1:"} {
		_, err := faultproxy.New(target, faultproxy.Options{})
		require.Error(t, err, "target %q", target)
	}
	_, err := faultproxy.New("127.0.0.1:1", faultproxy.Options{DialTimeout: -time.Second})
	require.Error(t, err)

	p := newProxy(t, "127.0.0.1:1")
	require.Error(t, p.SetTarget("no port"))
}

func TestCloseWithLiveConnections(t *testing.T) {
	be := startBackend(t)
	stall := startStall(t)
	p := newProxy(t, be.addr())

	idle := dial(t, p.Addr())
	roundTrip(t, idle, "idle")

	// A connection whose server never reads: the proxy's writer blocks.
	require.NoError(t, p.SetTarget(stall.Addr().String()))
	stalled := dial(t, p.Addr())
	stalledErr := make(chan error, 1)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := stalled.Write(buf); err != nil {
				stalledErr <- err
				return
			}
		}
	}()
	eventuallyStats(t, p, func(s faultproxy.Stats) bool { return s.BytesUp > 4 })
	require.NoError(t, p.SetTarget(be.addr()))

	// A connection parked in the throttle.
	p.SetThrottle(1)
	throttled := dial(t, p.Addr())
	_, err := throttled.Write([]byte("0123456789"))
	require.NoError(t, err)
	eventuallyStats(t, p, func(s faultproxy.Stats) bool { return s.Live == 3 })

	// A connection with a chunk parked behind a long delay.
	p.SetDelay(time.Hour, time.Hour)
	delayed := dial(t, p.Addr())
	_, err = delayed.Write([]byte("late"))
	require.NoError(t, err)
	requireSilent(t, delayed)

	// A connection accepted in a blackhole.
	p.SetMode(faultproxy.Blackhole)
	dark := dial(t, p.Addr())
	_, err = dark.Write([]byte("void"))
	require.NoError(t, err)
	eventuallyStats(t, p, func(s faultproxy.Stats) bool { return s.DiscardedUp >= 4 && s.Live == 5 })

	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(waitLimit):
		t.Fatal("Close did not return")
	}
	requireNoProxyGoroutines(t)
	require.Zero(t, p.Stats().Live)

	for name, c := range map[string]net.Conn{"idle": idle, "throttled": throttled, "delayed": delayed, "dark": dark} {
		_, err := readToEnd(t, c)
		require.Truef(t, isReset(err), "%s: want a reset, got %v", name, err)
	}
	select {
	case err := <-stalledErr:
		require.Truef(t, isReset(err) || errors.Is(err, syscall.EPIPE), "stalled writer: want a reset or a broken pipe, got %v", err)
	case <-time.After(waitLimit):
		t.Fatal("the stalled writer never failed")
	}
	require.NoError(t, p.Close(), "Close is idempotent")
}

// startStall listens on loopback, accepts connections and never reads them.
func startStall(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln
}

// TestFaultsUnderLoad changes a fault, drawn from a seeded RNG, after every
// client exchange while clients keep connecting. It proves the proxy stays
// consistent (no race, deadlock or leak) and forwards again once the faults are
// cleared.
func TestFaultsUnderLoad(t *testing.T) {
	const seed = 20240601
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	be := startBackend(t)
	p := newProxy(t, be.addr())

	ticks := make(chan struct{})
	var clients sync.WaitGroup
	for range 4 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for range 25 {
				if c, err := net.Dial("tcp", p.Addr()); err == nil {
					_ = c.SetDeadline(time.Now().Add(20 * time.Millisecond))
					_, _ = c.Write([]byte("chatter"))
					_, _ = c.Read(make([]byte, 64))
					_ = c.Close()
				}
				ticks <- struct{}{}
			}
		}()
	}
	go func() {
		clients.Wait()
		close(ticks)
	}()

	modes := []faultproxy.Mode{faultproxy.Pass, faultproxy.Blackhole, faultproxy.Refuse}
	dirs := []faultproxy.Direction{faultproxy.Up, faultproxy.Down}
	for range ticks {
		switch rng.IntN(8) {
		case 0:
			p.SetMode(modes[rng.IntN(len(modes))])
		case 1:
			p.SetDelay(time.Duration(rng.IntN(3))*time.Millisecond, time.Duration(rng.IntN(3))*time.Millisecond)
		case 2:
			p.SetThrottle([]int{0, 1 << 20}[rng.IntN(2)])
		case 3:
			p.CutAfter(dirs[rng.IntN(2)], int64(rng.IntN(8)))
		case 4:
			p.CutNextAfter(dirs[rng.IntN(2)], int64(rng.IntN(8)))
		case 5:
			p.ClearCuts()
		case 6:
			p.ResetAll()
		case 7:
			_ = p.Stats()
		}
	}

	p.SetMode(faultproxy.Pass)
	p.SetDelay(0, 0)
	p.SetThrottle(0)
	p.ClearCuts()
	roundTrip(t, dial(t, p.Addr()), "healthy again")
	require.Equal(t, int64(101), p.Stats().Accepted)
}

func TestInvalidArgumentsPanic(t *testing.T) {
	p := newProxy(t, "127.0.0.1:1")
	for name, call := range map[string]func(){
		"unknown mode":      func() { p.SetMode(faultproxy.Mode(9)) },
		"negative delay":    func() { p.SetDelay(-time.Millisecond, 0) },
		"negative throttle": func() { p.SetThrottle(-1) },
		"unknown direction": func() { p.CutAfter(faultproxy.Direction(5), 0) },
		"negative cut":      func() { p.CutAfter(faultproxy.Up, -1) },
		"negative next cut": func() { p.CutNextAfter(faultproxy.Down, -1) },
	} {
		require.Panics(t, call, name)
	}
	require.Equal(t, faultproxy.Pass, p.Mode(), "a refused call changes nothing")
}

func TestNames(t *testing.T) {
	for want, v := range map[string]interface{ String() string }{
		"pass":         faultproxy.Pass,
		"blackhole":    faultproxy.Blackhole,
		"refuse":       faultproxy.Refuse,
		"Mode(7)":      faultproxy.Mode(7),
		"up":           faultproxy.Up,
		"down":         faultproxy.Down,
		"Direction(3)": faultproxy.Direction(3),
	} {
		require.Equal(t, want, v.String())
	}
}
