package netmonitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Monitor. The zero value of every field but Probe
// means its default; New rejects negative values.
type Config struct {
	// Probe checks reachability once. Required. See HTTPProbe and TCPProbe.
	Probe Probe

	// Interval is the wait between the end of one probe and the start of the
	// next while the results agree with the current state. Default 5s.
	Interval time.Duration

	// ConfirmInterval replaces Interval while results contradict the current
	// state and a threshold is being counted, so that going offline after
	// FailureThreshold failures takes (FailureThreshold-1)*ConfirmInterval
	// after the first failure, not (FailureThreshold-1)*Interval. It must not
	// exceed Interval. Default 1s, or Interval if that is shorter.
	ConfirmInterval time.Duration

	// OfflineInterval replaces Interval and ConfirmInterval while the state
	// is Offline: how soon a return of the target is noticed. Each such wait
	// is uniform in [OfflineInterval/2, OfflineInterval], so that devices
	// that lost one server together do not probe it in step when it comes
	// back. With the default thresholds a return is decided within two
	// OfflineIntervals. It must not exceed Interval. Default 500ms, or
	// Interval if that is shorter.
	OfflineInterval time.Duration

	// Rand returns a uniform int64 in [0, n) for the offline waits' jitter.
	// Default math/rand/v2.Int64N; tests pass a seeded source.
	Rand func(n int64) int64

	// Timeout bounds one probe: a probe that has not returned by then is a
	// failure (ErrProbeTimeout) and its context is cancelled. Default 2s.
	Timeout time.Duration

	// FailureThreshold is how many consecutive failures turn Online into
	// Offline. Default 2: a single lost probe is a blip, not an outage.
	FailureThreshold int

	// SuccessThreshold is how many consecutive successes turn Offline into
	// Online. Default 2, so a link that answers once in a while does not
	// trigger a reconnect (and a replay) per answer.
	SuccessThreshold int

	// After is the clock: it returns a channel that receives once d has
	// passed, like time.After (the default). Tests pass a fake to step the
	// loop without sleeping. The monitor reads no other clock.
	After func(d time.Duration) <-chan time.Time

	// Logger receives a line per state decision (Info) and per failed probe
	// (Debug). Default: discard.
	Logger *slog.Logger

	// Registerer, when set, receives the monitor's metrics (see doc.go); the
	// global registry is never used. Monitors sharing a registry must each
	// register through prometheus.WrapRegistererWith with a distinguishing
	// label, or New fails with the registration error.
	Registerer prometheus.Registerer
}

const (
	defaultInterval         = 5 * time.Second
	defaultConfirmInterval  = time.Second
	defaultOfflineInterval  = 500 * time.Millisecond
	defaultTimeout          = 2 * time.Second
	defaultFailureThreshold = 2
	defaultSuccessThreshold = 2
)

// withDefaults validates c and fills in the defaults.
func (c Config) withDefaults() (Config, error) {
	if c.Probe == nil {
		return c, errors.New("netmonitor: config: Probe is required")
	}
	if c.Interval < 0 || c.ConfirmInterval < 0 || c.OfflineInterval < 0 || c.Timeout < 0 {
		return c, errors.New("netmonitor: config: Interval, ConfirmInterval, OfflineInterval and Timeout must not be negative")
	}
	if c.FailureThreshold < 0 || c.SuccessThreshold < 0 {
		return c, errors.New("netmonitor: config: thresholds must not be negative")
	}
	if c.Interval == 0 {
		c.Interval = defaultInterval
	}
	if c.ConfirmInterval == 0 {
		c.ConfirmInterval = min(defaultConfirmInterval, c.Interval)
	}
	if c.ConfirmInterval > c.Interval {
		return c, fmt.Errorf("netmonitor: config: ConfirmInterval %s exceeds Interval %s", c.ConfirmInterval, c.Interval)
	}
	if c.OfflineInterval == 0 {
		c.OfflineInterval = min(defaultOfflineInterval, c.Interval)
	}
	if c.OfflineInterval > c.Interval {
		return c, fmt.Errorf("netmonitor: config: OfflineInterval %s exceeds Interval %s", c.OfflineInterval, c.Interval)
	}
	if c.Rand == nil {
		c.Rand = rand.Int64N
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	if c.FailureThreshold == 0 {
		c.FailureThreshold = defaultFailureThreshold
	}
	if c.SuccessThreshold == 0 {
		c.SuccessThreshold = defaultSuccessThreshold
	}
	if c.After == nil {
		c.After = time.After
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// ErrClosed is returned by Start and Wait once the monitor has stopped
// (Close was called or Start's context ended). A stopped monitor cannot be
// restarted; make a new one.
var ErrClosed = errors.New("netmonitor: monitor stopped")

// Monitor probes reachability in a loop and reports Online/Offline decisions.
// All methods are safe for concurrent use.
type Monitor struct {
	cfg     Config
	metrics *metrics

	// wg counts the probe loop and every probe goroutine; Close waits on it.
	wg sync.WaitGroup

	mu      sync.Mutex
	last    Event                   // the latest decision; State Unknown before the first
	changed chan struct{}           // closed and replaced at every decision, and closed at stop
	subs    map[chan Event]struct{} // subscriber channels, closed at stop or unsubscribe
	started bool
	closed  bool // Close was called
	stopped bool // the loop has exited (or Close ran before Start)
	cancel  context.CancelFunc
}

// New validates cfg and registers the metrics. The monitor does not probe
// until Start.
func New(cfg Config) (*Monitor, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("netmonitor: register metrics: %w", err)
	}
	return &Monitor{
		cfg:     cfg,
		metrics: m,
		changed: make(chan struct{}),
		subs:    make(map[chan Event]struct{}),
	}, nil
}

// Start runs the probe loop until ctx ends or Close is called. The first
// probe starts at once, and its result alone decides the first state (see
// doc.go for why no threshold applies to it), so subscribers hear Online or
// Offline within one probe Timeout of Start. Start returns ErrClosed after
// Close, and an error if called twice.
func (m *Monitor) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.stopped {
		return fmt.Errorf("netmonitor: start: %w", ErrClosed)
	}
	if m.started {
		return errors.New("netmonitor: start: already started")
	}
	m.started = true
	ctx, m.cancel = context.WithCancel(ctx)
	m.wg.Go(func() { m.run(ctx) })
	return nil
}

// Close stops the loop, cancels a running probe and waits until the loop and
// the probe have returned; afterwards no probe runs and every subscriber
// channel is closed. Close is idempotent and may be called before Start.
func (m *Monitor) Close() {
	m.mu.Lock()
	m.closed = true
	cancel := m.cancel
	m.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	m.wg.Wait()
	m.stop()
}

// Current returns the latest decision: Unknown until the first probe has
// answered, then Online or Offline.
func (m *Monitor) Current() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last.State
}

// Wait blocks until the state is want, ctx ends, or the monitor stops
// (ErrClosed). It returns at once if the state already is want.
func (m *Monitor) Wait(ctx context.Context, want State) error {
	for {
		m.mu.Lock()
		state, changed, stopped := m.last.State, m.changed, m.stopped
		m.mu.Unlock()
		switch {
		case state == want:
			return nil
		case stopped:
			return fmt.Errorf("netmonitor: wait for %s: %w", want, ErrClosed)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("netmonitor: wait for %s: %w", want, ctx.Err())
		case <-changed:
		}
	}
}

// Subscribe returns a channel of state decisions and a func that ends the
// subscription (idempotent; it closes the channel).
//
// The channel holds one event and is coalescing: when a new decision finds
// the previous one still unread, the unread one is replaced. So the probe
// loop never waits for a subscriber, and a slow subscriber always receives
// the latest decision, but may skip intermediate ones (Event.Seq shows the
// gap). If a decision has already been made, the channel starts with it, so
// a late subscriber learns the current state without waiting for a
// transition. The channel is closed when the monitor stops.
func (m *Monitor) Subscribe() (<-chan Event, func()) {
	ch := make(chan Event, 1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		close(ch)
		return ch, func() {}
	}
	if m.last.State != Unknown {
		ch <- m.last
	}
	m.subs[ch] = struct{}{}
	return ch, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if _, ok := m.subs[ch]; ok {
			delete(m.subs, ch)
			close(ch)
		}
	}
}

// run is the probe loop: probe, decide, publish, wait, for as long as ctx
// lives. It never blocks on a subscriber.
func (m *Monitor) run(ctx context.Context) {
	defer m.stop()
	det := detector{
		failureThreshold: m.cfg.FailureThreshold,
		successThreshold: m.cfg.SuccessThreshold,
	}
	var straggler chan error // a probe that outlived its timeout, until it returns
	for {
		err := m.probe(ctx, &straggler)
		if ctx.Err() != nil {
			return
		}
		m.metrics.probed(err)
		if err != nil {
			m.cfg.Logger.Debug("netmonitor: probe failed", "err", err)
		}
		if ev, changed := det.observe(err); changed {
			m.publish(ev)
		}
		select {
		case <-ctx.Done():
			return
		case <-m.cfg.After(det.next(m.cfg.Interval, m.cfg.ConfirmInterval, m.offlineWait)):
		}
	}
}

// offlineWait is one wait between probes while Offline: uniform in
// [OfflineInterval/2, OfflineInterval].
func (m *Monitor) offlineWait() time.Duration {
	c := int64(m.cfg.OfflineInterval)
	return time.Duration(c - c/2 + m.cfg.Rand(c/2+1))
}

// probe runs one probe on its own goroutine and returns its result, or
// ErrProbeTimeout once Timeout passes. A probe that outlives its timeout is
// left to finish (its context is cancelled) and kept in *straggler; while it
// runs, later rounds fail with ErrProbeTimeout instead of piling up more
// probes. The loop thus keeps its schedule even against a probe that
// ignores cancellation.
func (m *Monitor) probe(ctx context.Context, straggler *chan error) error {
	if *straggler != nil {
		select {
		case <-*straggler:
			*straggler = nil
		default:
			return fmt.Errorf("%w: the previous probe is still running", ErrProbeTimeout)
		}
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	m.wg.Go(func() { done <- m.cfg.Probe.call(pctx) })
	select {
	case err := <-done:
		return err
	case <-m.cfg.After(m.cfg.Timeout):
		*straggler = done
		return fmt.Errorf("%w after %s", ErrProbeTimeout, m.cfg.Timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// publish records a decision and offers it to every subscriber without
// blocking.
func (m *Monitor) publish(ev Event) {
	m.metrics.decided(ev.State)
	m.cfg.Logger.Info("netmonitor: network state", "state", ev.State, "seq", ev.Seq, "err", ev.Err)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = ev
	for ch := range m.subs {
		offer(ch, ev)
	}
	close(m.changed)
	m.changed = make(chan struct{})
}

// offer puts ev in ch (capacity 1), replacing an unread event. It never
// blocks because publish, under m.mu, is the only sender.
func offer(ch chan Event, ev Event) {
	select {
	case ch <- ev:
		return
	default:
	}
	select {
	case <-ch:
	default:
	}
	ch <- ev
}

// stop marks the monitor stopped and releases subscribers and waiters. It is
// idempotent.
func (m *Monitor) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	m.stopped = true
	for ch := range m.subs {
		close(ch)
	}
	clear(m.subs)
	close(m.changed)
}
