package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode says what the proxy does with traffic. The zero value is Pass.
type Mode int32

const (
	// Pass forwards bytes in both directions.
	Pass Mode = iota
	// Blackhole keeps connections open and forwards nothing: bytes are read and
	// discarded, so both peers see silence, never an error. A connection accepted
	// in Blackhole never gets an upstream connection. A live connection that loses
	// a byte (or a FIN) to the blackhole stays silent for the rest of its life,
	// because the proxy never delivers a stream with a hole in it; a live
	// connection that stayed idle through the blackhole resumes when Pass returns.
	Blackhole
	// Refuse resets every new connection as soon as it is accepted. Live
	// connections keep flowing; call ResetAll as well for a full outage.
	Refuse
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Blackhole:
		return "blackhole"
	case Refuse:
		return "refuse"
	default:
		return fmt.Sprintf("Mode(%d)", int32(m))
	}
}

func (m Mode) valid() bool { return m == Pass || m == Blackhole || m == Refuse }

// Direction names one half of a proxied connection.
type Direction int

const (
	// Up is client to server: bytes the proxy reads from an accepted connection
	// and writes to the target.
	Up Direction = iota
	// Down is server to client: bytes the proxy reads from the target and writes
	// to the accepted connection.
	Down
)

// String returns "up" or "down".
func (d Direction) String() string {
	switch d {
	case Up:
		return "up"
	case Down:
		return "down"
	default:
		return fmt.Sprintf("Direction(%d)", int(d))
	}
}

func (d Direction) mustBeValid() {
	if d != Up && d != Down {
		panic(fmt.Sprintf("faultproxy: invalid direction %d", int(d)))
	}
}

// ErrNotLoopback is returned by New when Options.ListenAddr is not a loopback
// IP literal. Nothing was opened; pass a 127.0.0.0/8 or ::1 address, or leave
// ListenAddr empty, and call New again.
var ErrNotLoopback = errors.New("listen address is not a loopback IP")

// Options configures New. The zero value is ready to use.
type Options struct {
	// ListenAddr is the host:port the proxy listens on. The host must be a
	// loopback IP literal ("127.0.0.1", "::1"); names such as "localhost" are
	// refused because they may resolve elsewhere. Empty means "127.0.0.1:0", a
	// free port; read it back with Addr.
	ListenAddr string
	// DialTimeout bounds each dial to the target. Zero means 5 seconds; a
	// negative value is refused. A failed dial resets the accepted connection.
	DialTimeout time.Duration
	// Logger receives one debug record per connection event (accepted, refused,
	// dial failed, reset, cut). Nil discards.
	Logger *slog.Logger
}

const (
	defaultListenAddr  = "127.0.0.1:0"
	defaultDialTimeout = 5 * time.Second
)

// Stats is a snapshot of a proxy's counters since New.
type Stats struct {
	Accepted      int64 // connections accepted, in any mode
	Live          int   // connections open now, including blackholed ones
	Refused       int64 // connections reset on accept in Refuse mode
	DialFailures  int64 // connections reset because the target could not be dialed
	BytesUp       int64 // bytes forwarded client to server
	BytesDown     int64 // bytes forwarded server to client
	DiscardedUp   int64 // bytes read from clients and dropped by Blackhole
	DiscardedDown int64 // bytes read from the target and dropped by Blackhole
	Resets        int64 // live connections aborted by ResetAll or by a cut
	Cuts          int64 // connections aborted by a cut (a subset of Resets)
	PendingCuts   int   // CutNextAfter cuts not yet taken by a new connection
}

// Proxy is an in-process TCP proxy on loopback that forwards every accepted
// connection to one target and injects faults on command. All methods are safe
// for concurrent use. Faults take effect immediately; what each one does to
// live and to new connections is stated on its method.
type Proxy struct {
	ln          *net.TCPListener
	dialTimeout time.Duration
	log         *slog.Logger

	ctx    context.Context // canceled by Close; bounds dials and accept backoff
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the proxy started

	mode    atomic.Int32    // a Mode
	delay   [2]atomic.Int64 // per Direction, a time.Duration
	buckets [2]bucket       // per Direction, shared by all connections
	nextID  atomic.Uint64
	counts  counters

	mu      sync.Mutex
	closed  bool
	target  string
	conns   map[*conn]struct{}
	pending []cutSpec // CutNextAfter queue, oldest first

	closeOnce sync.Once
	closeErr  error
}

type counters struct {
	accepted, refused, dialFailures, resets, cuts atomic.Int64
	bytes, discarded                              [2]atomic.Int64
}

type cutSpec struct {
	dir Direction
	n   int64
}

// New listens on loopback and starts forwarding each accepted connection to
// target (host:port, dialed anew for each connection). The proxy starts in Pass
// mode with no delay, throttle or cut. The caller must Close it.
func New(target string, opts Options) (*Proxy, error) {
	if err := checkTarget(target); err != nil {
		return nil, fmt.Errorf("new fault proxy: %w", err)
	}
	if opts.DialTimeout < 0 {
		return nil, fmt.Errorf("new fault proxy: negative dial timeout %v", opts.DialTimeout)
	}
	addr := opts.ListenAddr
	if addr == "" {
		addr = defaultListenAddr
	}
	if err := checkLoopback(addr); err != nil {
		return nil, fmt.Errorf("new fault proxy: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("new fault proxy: %w", err)
	}
	p := &Proxy{
		ln:          ln.(*net.TCPListener),
		dialTimeout: opts.DialTimeout,
		log:         opts.Logger,
		target:      target,
		conns:       make(map[*conn]struct{}),
	}
	if p.dialTimeout == 0 {
		p.dialTimeout = defaultDialTimeout
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

func checkTarget(target string) error {
	_, port, err := net.SplitHostPort(target)
	if err != nil {
		return fmt.Errorf("target %q: %w", target, err)
	}
	if port == "" {
		return fmt.Errorf("target %q: missing port", target)
	}
	return nil
}

func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("listen address %q: %w", addr, ErrNotLoopback)
	}
	return nil
}

// Addr returns the address clients dial, such as "127.0.0.1:41234".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting, aborts every live connection with a reset (to both
// peers), and returns once every goroutine the proxy started has stopped,
// including those parked behind a delay or a throttle. It is idempotent; later
// calls return the first call's result. Other methods stay safe to call after
// Close and have no effect on traffic.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		live := p.liveLocked()
		p.mu.Unlock()

		p.cancel()
		if err := p.ln.Close(); err != nil {
			p.closeErr = fmt.Errorf("close fault proxy: %w", err)
		}
		for _, c := range live {
			c.teardown(abort)
		}
		p.wg.Wait()
	})
	return p.closeErr
}

// SetMode switches the proxy to m. It panics if m is not Pass, Blackhole or
// Refuse. See each Mode for its effect on new and live connections.
func (p *Proxy) SetMode(m Mode) {
	if !m.valid() {
		panic(fmt.Sprintf("faultproxy: invalid mode %d", int32(m)))
	}
	p.mode.Store(int32(m))
}

// Mode returns the current mode.
func (p *Proxy) Mode() Mode { return Mode(p.mode.Load()) }

// SetTarget changes the address new connections are forwarded to; live
// connections keep their upstream. Use it when the server behind the proxy
// restarts on another port. An invalid address is refused and changes nothing.
func (p *Proxy) SetTarget(target string) error {
	if err := checkTarget(target); err != nil {
		return fmt.Errorf("set target: %w", err)
	}
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	return nil
}

// SetDelay adds latency to every chunk the proxy reads from now on, on live and
// new connections: up for client-to-server chunks, down for server-to-client.
// A chunk is due at the moment it was read plus the delay in force then; chunks
// are still written in the order they were read, so lowering the delay never
// reorders bytes. Delay is latency, not a bandwidth cap: chunks in flight wait
// concurrently. It panics on a negative duration.
func (p *Proxy) SetDelay(up, down time.Duration) {
	if up < 0 || down < 0 {
		panic(fmt.Sprintf("faultproxy: negative delay (up %v, down %v)", up, down))
	}
	p.delay[Up].Store(int64(up))
	p.delay[Down].Store(int64(down))
}

// SetThrottle caps the bytes per second forwarded in each direction, summed over
// all connections of this proxy (one shared link, like one device's uplink).
// Zero removes the cap. It applies at once to live and new connections; writes
// are paced in pieces of about 20 ms worth of bytes, without bursts. It panics
// on a negative rate.
func (p *Proxy) SetThrottle(bytesPerSec int) {
	if bytesPerSec < 0 {
		panic(fmt.Sprintf("faultproxy: negative throttle %d", bytesPerSec))
	}
	p.buckets[Up].setRate(int64(bytesPerSec))
	p.buckets[Down].setRate(int64(bytesPerSec))
}

// ResetAll aborts every live connection with a TCP reset towards both peers
// and returns how many it aborted. Bytes the proxy had read but not yet written
// are lost, like packets in flight. New connections are not affected.
func (p *Proxy) ResetAll() int {
	n := 0
	for _, c := range p.live() {
		if c.teardown(reset) {
			n++
		}
	}
	return n
}

// CutAfter arms a cut on every live connection: each forwards n more bytes in
// direction dir and is reset (towards both peers) when byte n+1 reaches the
// proxy; that byte and all after it are never forwarded. With n = 0 the next
// byte in dir triggers the reset, so CutAfter(Down, 0) loses the answer to a
// request the server has already received: the commit happens, its
// acknowledgement does not arrive. Arming again replaces a connection's budget
// for that direction. It panics on a negative n.
func (p *Proxy) CutAfter(dir Direction, n int64) {
	dir.mustBeValid()
	if n < 0 {
		panic(fmt.Sprintf("faultproxy: negative cut %d", n))
	}
	for _, c := range p.live() {
		c.cut[dir].Store(n)
	}
}

// CutNextAfter arms a cut, as CutAfter describes, for the next connection
// accepted in Pass mode. Each call arms one cut and each new connection takes
// at most one, oldest first; connections refused or blackholed at accept take
// none. The connection takes it whether or not its dial then succeeds. It
// panics on a negative n.
func (p *Proxy) CutNextAfter(dir Direction, n int64) {
	dir.mustBeValid()
	if n < 0 {
		panic(fmt.Sprintf("faultproxy: negative cut %d", n))
	}
	p.mu.Lock()
	p.pending = append(p.pending, cutSpec{dir: dir, n: n})
	p.mu.Unlock()
}

// ClearCuts disarms every cut: those waiting for a new connection and those
// armed on live connections that have not fired yet.
func (p *Proxy) ClearCuts() {
	p.mu.Lock()
	p.pending = nil
	live := p.liveLocked()
	p.mu.Unlock()
	for _, c := range live {
		c.cut[Up].Store(noCut)
		c.cut[Down].Store(noCut)
	}
}

// Stats returns the proxy's counters. Counters are read one by one, so a
// snapshot taken while traffic flows may be off by the bytes of one chunk.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	live, pending := len(p.conns), len(p.pending)
	p.mu.Unlock()
	c := &p.counts
	return Stats{
		Accepted:      c.accepted.Load(),
		Live:          live,
		Refused:       c.refused.Load(),
		DialFailures:  c.dialFailures.Load(),
		BytesUp:       c.bytes[Up].Load(),
		BytesDown:     c.bytes[Down].Load(),
		DiscardedUp:   c.discarded[Up].Load(),
		DiscardedDown: c.discarded[Down].Load(),
		Resets:        c.resets.Load(),
		Cuts:          c.cuts.Load(),
		PendingCuts:   pending,
	}
}

func (p *Proxy) live() []*conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.liveLocked()
}

func (p *Proxy) liveLocked() []*conn {
	out := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		out = append(out, c)
	}
	return out
}

func (p *Proxy) forget(c *conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// acceptLoop accepts until the listener is closed. Transient accept errors
// (such as running out of file descriptors) are retried with a capped backoff
// that ends on Close.
func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	backoff := acceptBackoffMin
	for {
		tc, err := p.ln.AcceptTCP()
		if err != nil {
			if p.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			p.log.Debug("faultproxy: accept failed", "err", err, "retry_in", backoff)
			if !sleepUntilDone(p.ctx.Done(), backoff) {
				return
			}
			backoff = min(2*backoff, acceptBackoffMax)
			continue
		}
		backoff = acceptBackoffMin
		p.admit(tc)
	}
}

// admit decides an accepted connection's fate from the mode in force now.
func (p *Proxy) admit(tc *net.TCPConn) {
	p.counts.accepted.Add(1)
	id := p.nextID.Add(1)
	mode := p.Mode()

	p.mu.Lock()
	if p.closed || mode == Refuse {
		p.mu.Unlock()
		if mode == Refuse {
			p.counts.refused.Add(1)
			p.log.Debug("faultproxy: refused", "conn", id)
		}
		abortTCP(tc)
		return
	}
	c := newConn(p, id, tc)
	if mode == Blackhole {
		c.tainted.Store(true)
	} else if len(p.pending) > 0 {
		spec := p.pending[0]
		p.pending = p.pending[1:]
		c.cut[spec.dir].Store(spec.n)
	}
	p.conns[c] = struct{}{}
	target := p.target
	p.wg.Add(1)
	p.mu.Unlock()

	p.log.Debug("faultproxy: accepted", "conn", id, "mode", mode.String())
	go c.run(target, mode == Blackhole)
}

// dial connects to target, bounded by the dial timeout and by Close.
func (p *Proxy) dial(target string) (*net.TCPConn, error) {
	ctx, cancel := context.WithTimeout(p.ctx, p.dialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		return nil, err
	}
	return nc.(*net.TCPConn), nil
}

// sleepUntilDone waits for d or until done is closed, and reports whether d
// elapsed. Its timer never outlives the wait.
func sleepUntilDone(done <-chan struct{}, d time.Duration) bool {
	if d <= 0 {
		select {
		case <-done:
			return false
		default:
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// abortTCP closes tc with a reset rather than a FIN.
func abortTCP(tc *net.TCPConn) {
	_ = tc.SetLinger(0) // best effort: a failure leaves a plain close
	_ = tc.Close()      // the connection is being discarded; nothing to report
}
