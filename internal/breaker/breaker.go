// Package breaker is a circuit breaker as a pure state machine: closed,
// open, half-open. It reads no clock and starts no goroutine: every method
// takes the current time, so tests drive it with a fake clock and a caller
// decides where time comes from. A Breaker is not safe for concurrent use;
// its owner serializes calls (one mutex around Allow and Record).
//
// The caller's duties, in order:
//  1. Before a call out, Allow(now). When it answers false, do not call:
//     answer at once with a retryable refusal (no queuing, no retry into
//     an open breaker).
//  2. When the call ends, Record(now, ticket, ok) with the ticket Allow
//     gave; when it ends without an outcome (the caller's own context was
//     cancelled), Release(ticket) so that a half-open probe slot is freed.
//  3. Act on every Transition returned (log it, export it): a Transition
//     whose From equals To is no transition.
//
// A ticket from before the last transition is ignored by Record and
// Release: a slow call admitted while closed cannot close or reopen a
// breaker that has moved on since.
package breaker

import (
	"errors"
	"fmt"
	"time"
)

// State is where a Breaker is.
type State int

// The states. The numeric values are what syncd exports as the state gauge.
const (
	// Closed: calls go out; outcomes are counted in the sliding window.
	Closed State = iota
	// Open: calls are refused until Config.OpenFor has passed.
	Open
	// HalfOpen: Config.Probes calls go out; as many successes close the
	// breaker, one failure reopens it; other calls are refused meanwhile.
	HalfOpen
)

var stateNames = [...]string{"closed", "open", "half_open"}

// String returns closed, open or half_open.
func (s State) String() string {
	if s < Closed || s > HalfOpen {
		return fmt.Sprintf("state(%d)", int(s))
	}
	return stateNames[s]
}

// MarshalText writes the state's name, so JSON shows "open", not 1.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a name MarshalText wrote.
func (s *State) UnmarshalText(b []byte) error {
	for i, name := range stateNames {
		if string(b) == name {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("unknown breaker state %q", b)
}

// Defaults: the operability plan's numbers.
const (
	DefaultWindow       = 10 * time.Second
	DefaultMaxFailures  = 20
	DefaultMinCalls     = 10
	DefaultFailureRatio = 0.5
	DefaultOpenFor      = 30 * time.Second
	DefaultProbes       = 3
)

// buckets is how many slices the sliding window is cut into: outcomes
// leave the window one slice (Window/buckets) at a time.
const buckets = 10

// Config sets when a Breaker opens and how it recovers. The zero value of
// each field means its default.
type Config struct {
	// Window is the sliding window over which outcomes are counted while
	// closed (DefaultWindow).
	Window time.Duration
	// MaxFailures failures within Window open the breaker
	// (DefaultMaxFailures).
	MaxFailures int
	// MinCalls is how many calls within Window the failure ratio needs
	// before it may open the breaker (DefaultMinCalls).
	MinCalls int
	// FailureRatio of failures among at least MinCalls calls within Window
	// opens the breaker (DefaultFailureRatio); in (0, 1].
	FailureRatio float64
	// OpenFor is how long the breaker stays open before it lets probes
	// through (DefaultOpenFor).
	OpenFor time.Duration
	// Probes is how many calls half-open lets through, and how many of
	// them must succeed to close (DefaultProbes).
	Probes int
}

// ErrConfig is wrapped by Config.Validate's errors.
var ErrConfig = errors.New("invalid breaker config")

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.MaxFailures == 0 {
		c.MaxFailures = DefaultMaxFailures
	}
	if c.MinCalls == 0 {
		c.MinCalls = DefaultMinCalls
	}
	if c.FailureRatio == 0 {
		c.FailureRatio = DefaultFailureRatio
	}
	if c.OpenFor == 0 {
		c.OpenFor = DefaultOpenFor
	}
	if c.Probes == 0 {
		c.Probes = DefaultProbes
	}
	return c
}

// Validate reports a field out of range (after defaults), wrapping
// ErrConfig.
func (c Config) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.Window < buckets*time.Millisecond:
		return fmt.Errorf("%w: window %s is shorter than %s", ErrConfig, c.Window, buckets*time.Millisecond)
	case c.MaxFailures < 1, c.MinCalls < 1, c.Probes < 1:
		return fmt.Errorf("%w: max failures, min calls and probes must be positive", ErrConfig)
	case c.FailureRatio <= 0 || c.FailureRatio > 1:
		return fmt.Errorf("%w: failure ratio %g is not in (0, 1]", ErrConfig, c.FailureRatio)
	case c.OpenFor < 0:
		return fmt.Errorf("%w: negative open duration %s", ErrConfig, c.OpenFor)
	}
	return nil
}

// Transition is a change of state; From == To means none happened.
type Transition struct {
	From, To State
	// Failures and Calls are the window's counts that opened a closed
	// breaker (zero otherwise), for the log line.
	Failures, Calls int
}

// Changed reports whether t is a change of state.
func (t Transition) Changed() bool { return t.From != t.To }

// Ticket identifies one admitted call; Record and Release take it back.
type Ticket struct {
	gen   uint64
	probe bool
}

// bucket counts the outcomes of one slice of the window.
type bucket struct {
	start           time.Time
	calls, failures int
}

// Breaker is one circuit breaker. The zero value is not usable: use New.
type Breaker struct {
	cfg      Config
	state    State
	gen      uint64 // incremented at every transition
	openedAt time.Time
	window   [buckets]bucket
	probes   int // half-open: probes admitted and not yet released
	passed   int // half-open: probes that succeeded
}

// New returns a closed Breaker; cfg's zero fields take their defaults. It
// fails on a Config that Validate refuses.
func New(cfg Config) (*Breaker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new breaker: %w", err)
	}
	return &Breaker{cfg: cfg.WithDefaults()}, nil
}

// Config returns the breaker's configuration, defaults filled in.
func (b *Breaker) Config() Config { return b.cfg }

// State returns the state as of now: an open breaker whose OpenFor has
// passed reports HalfOpen (the move happens at the next Allow).
func (b *Breaker) State(now time.Time) State {
	if b.state == Open && !now.Before(b.openedAt.Add(b.cfg.OpenFor)) {
		return HalfOpen
	}
	return b.state
}

// Counts returns the calls and failures counted in the window ending at
// now (zero unless closed).
func (b *Breaker) Counts(now time.Time) (calls, failures int) {
	if b.state != Closed {
		return 0, 0
	}
	for i := range b.window {
		if b.live(b.window[i], now) {
			calls += b.window[i].calls
			failures += b.window[i].failures
		}
	}
	return calls, failures
}

// Allow reports whether a call may go out at now, with the ticket to give
// back. An open breaker whose OpenFor has passed moves to half-open here
// (the Transition says so) and admits the first probe.
func (b *Breaker) Allow(now time.Time) (Ticket, bool, Transition) {
	t := Transition{From: b.state, To: b.state}
	if b.state == Open {
		if now.Before(b.openedAt.Add(b.cfg.OpenFor)) {
			return Ticket{}, false, t
		}
		b.moveTo(HalfOpen, now)
		t.To = HalfOpen
	}
	if b.state == HalfOpen {
		if b.probes+b.passed >= b.cfg.Probes {
			return Ticket{}, false, t
		}
		b.probes++
		return Ticket{gen: b.gen, probe: true}, true, t
	}
	return Ticket{gen: b.gen}, true, t
}

// Record counts the outcome of the call tk admitted: ok false is a
// failure. A ticket from before the last transition is ignored.
func (b *Breaker) Record(now time.Time, tk Ticket, ok bool) Transition {
	t := Transition{From: b.state, To: b.state}
	if tk.gen != b.gen {
		return t
	}
	switch b.state {
	case Closed:
		bk := b.slot(now)
		bk.calls++
		if !ok {
			bk.failures++
		}
		calls, failures := b.Counts(now)
		if failures >= b.cfg.MaxFailures ||
			(calls >= b.cfg.MinCalls && float64(failures) >= b.cfg.FailureRatio*float64(calls)) {
			b.moveTo(Open, now)
			t.To, t.Calls, t.Failures = Open, calls, failures
		}
	case HalfOpen:
		b.probes--
		if !ok {
			b.moveTo(Open, now)
			t.To = Open
			return t
		}
		b.passed++
		if b.passed >= b.cfg.Probes {
			b.moveTo(Closed, now)
			t.To = Closed
		}
	}
	return t
}

// Release gives back the ticket of a call that ended without an outcome
// (its caller gave up): nothing is counted, and a half-open probe slot is
// freed for another call.
func (b *Breaker) Release(tk Ticket) {
	if tk.gen == b.gen && tk.probe && b.state == HalfOpen {
		b.probes--
	}
}

func (b *Breaker) moveTo(s State, now time.Time) {
	b.state = s
	b.gen++
	b.probes, b.passed = 0, 0
	b.window = [buckets]bucket{}
	if s == Open {
		b.openedAt = now
	}
}

// span is the time one bucket covers.
func (b *Breaker) span() time.Duration { return b.cfg.Window / buckets }

// live reports whether bk holds outcomes within the window ending at now.
func (b *Breaker) live(bk bucket, now time.Time) bool {
	return (bk.calls > 0) && now.Sub(bk.start) < b.cfg.Window && !now.Before(bk.start)
}

// slot returns the bucket for now, emptied when it held an older slice.
func (b *Breaker) slot(now time.Time) *bucket {
	n := now.UnixNano() / int64(b.span())
	bk := &b.window[n%buckets]
	start := time.Unix(0, n*int64(b.span()))
	if !bk.start.Equal(start) {
		*bk = bucket{start: start}
	}
	return bk
}
