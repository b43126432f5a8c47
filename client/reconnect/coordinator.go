package reconnect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Steps are the caller's side effects, called in this order by a run. Each
// must honour its context: the coordinator cancels it when the network goes
// offline or the coordinator closes, and a run (and Close) cannot end before
// the running step returns. All four are required.
type Steps struct {
	// Reconnect opens a new transport (a websocket dial). It is called again
	// after any failed attempt, including one where Activate or Bind failed,
	// so it must discard whatever transport the previous attempt opened.
	Reconnect func(ctx context.Context) error
	// Activate makes the transport Reconnect opened the active one.
	Activate func(ctx context.Context) error
	// Bind runs the handshake (hello/welcome) and resumes the change feed.
	Bind func(ctx context.Context) error
	// Replay runs the sync worker over the bound transport. It is called at
	// most once per run, only after Bind succeeded and with the context
	// still live. A nil error means the replay completed.
	Replay func(ctx context.Context) error
}

func (s Steps) validate() error {
	var missing []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"Reconnect", s.Reconnect != nil},
		{"Activate", s.Activate != nil},
		{"Bind", s.Bind != nil},
		{"Replay", s.Replay != nil},
	} {
		if !f.set {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("reconnect: steps: %s required", strings.Join(missing, ", "))
	}
	return nil
}

func (s Steps) call(ctx context.Context, step Step) error {
	switch step {
	case StepReconnect:
		return s.Reconnect(ctx)
	case StepActivate:
		return s.Activate(ctx)
	case StepBind:
		return s.Bind(ctx)
	default:
		return s.Replay(ctx)
	}
}

// Config configures a Coordinator. The zero value of every field means its
// default; New rejects negative values.
type Config struct {
	// Backoff shapes the wait between failed attempts (exponential, capped,
	// jittered as Backoff.Wait says). Zero fields mean the defaults.
	Backoff Backoff

	// MaxAttempts bounds the attempts of one run; the run then ends GaveUp.
	// 0, the default, means no bound: a run retries until it connects or its
	// context ends. That is the right default for a run started by the
	// network coming online, because the monitor will not report Online
	// again until it has reported Offline, so a run that gave up would leave
	// the client unsynced on a working network. Set a bound only if you
	// handle GaveUp, for example by calling OnOnline again later.
	MaxAttempts int

	// After is the clock: it returns a channel that receives once d has
	// passed, like time.After (the default). The coordinator reads no other
	// clock.
	After func(d time.Duration) <-chan time.Time

	// OnOutcome, if set, receives the outcome of every run that OnOnline
	// started, on that run's goroutine, after the coordinator's own
	// bookkeeping is done and with no lock held. Outcomes arrive one at a
	// time and in the order the runs started. It must not call Close (Close
	// waits for it); it may call OnOnline and OnOffline.
	OnOutcome func(Outcome)

	// Logger receives a line per outcome and, rate-limited to the attempts
	// numbered 1, 2, 4, 8, ..., per failed attempt. Default: discard.
	Logger *slog.Logger

	// Registerer, when set, receives the coordinator's metrics (see doc.go);
	// the global registry is never used. Coordinators sharing a registry
	// must each register through prometheus.WrapRegistererWith with a
	// distinguishing label.
	Registerer prometheus.Registerer
}

func (c Config) withDefaults() (Config, error) {
	if c.MaxAttempts < 0 {
		return c, errors.New("reconnect: config: MaxAttempts must not be negative")
	}
	if err := c.Backoff.validate(); err != nil {
		return c, err
	}
	if c.After == nil {
		c.After = time.After
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Cancellation causes, found in Outcome.Err of an Aborted run.
var (
	// ErrOffline: OnOffline cancelled the run. Nothing the run had not yet
	// started will run; queued mutations stay queued for the next run.
	ErrOffline = errors.New("reconnect: network went offline")
	// ErrClosed: Close cancelled the run. The coordinator starts no more runs.
	ErrClosed = errors.New("reconnect: coordinator closed")
)

// phase is what the coordinator believes about the connection.
type phase uint8

const (
	idle      phase = iota // offline, or the last run did not reconnect
	running                // a run serves the current online period
	connected              // the last run reconnected; no run needed until OnOffline
)

// run is one OnOnline-started run, as the coordinator tracks it.
type run struct {
	cancel context.CancelCauseFunc
	done   chan struct{} // closed after the run's outcome was reported
}

// Coordinator sequences reconnect, activate, bind and replay when the
// network comes back, one run per online period. Its methods are safe for
// concurrent use and none of them waits for a step, except Close.
type Coordinator struct {
	steps   Steps
	cfg     Config
	metrics *metrics

	base context.Context // parent of every run; cancelled by Close
	stop context.CancelCauseFunc
	wg   sync.WaitGroup // one per run goroutine

	// mu guards the fields below. It is held only to read and write them:
	// never across a step, a wait or OnOutcome.
	mu     sync.Mutex
	phase  phase
	cur    *run // the run serving this online period; nil unless running
	last   *run // the most recently started run, possibly still finishing
	closed bool
}

// New validates steps and cfg and registers the metrics. No run starts
// until OnOnline.
func New(steps Steps, cfg Config) (*Coordinator, error) {
	if err := steps.validate(); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("reconnect: register metrics: %w", err)
	}
	base, stop := context.WithCancelCause(context.Background())
	return &Coordinator{steps: steps, cfg: cfg, metrics: m, base: base, stop: stop}, nil
}

// OnOnline starts a run on its own goroutine and reports whether it did. It
// starts none while a run is in progress (repeated online signals coalesce
// into that run), after a run reconnected (until OnOffline), or after
// Close. A run started right after OnOffline waits until the cancelled run
// has returned, so the steps of two runs never overlap. OnOnline never
// blocks on a run.
func (c *Coordinator) OnOnline() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.phase != idle {
		return false
	}
	ctx, cancel := context.WithCancelCause(c.base)
	r := &run{cancel: cancel, done: make(chan struct{})}
	prev := c.last
	c.phase, c.cur, c.last = running, r, r
	c.wg.Go(func() { c.serve(ctx, r, prev) })
	return true
}

// OnOffline cancels the run in progress, if any, with cause ErrOffline, and
// forgets a connection the last run made, so the next OnOnline starts a
// fresh run. It returns at once: the run notices through its context, stops
// before its next step or wait, and never starts Replay afterwards. Call it
// also when the active transport breaks while the network is still online,
// followed by OnOnline.
func (c *Coordinator) OnOffline() {
	c.mu.Lock()
	r := c.cur
	c.phase, c.cur = idle, nil
	c.mu.Unlock()
	if r != nil {
		r.cancel(ErrOffline)
	}
}

// Close cancels any run with cause ErrClosed and waits until every run
// goroutine has returned, its outcome reported. OnOnline does nothing
// afterwards. Close is idempotent; it must not be called from OnOutcome.
func (c *Coordinator) Close() {
	c.mu.Lock()
	c.closed = true
	c.phase, c.cur = idle, nil
	c.mu.Unlock()
	c.stop(ErrClosed)
	c.wg.Wait()
}

// serve is the goroutine of one OnOnline run.
func (c *Coordinator) serve(ctx context.Context, r *run, prev *run) {
	defer close(r.done)
	defer r.cancel(nil)
	if prev != nil {
		// The previous run was cancelled (or finished); let it return before
		// this one touches the steps, unless this one is cancelled too.
		select {
		case <-prev.done:
		case <-ctx.Done():
		}
	}
	out := c.Run(ctx)
	c.mu.Lock()
	if c.cur == r {
		c.cur, c.phase = nil, idle
		if out.Result == Reconnected {
			c.phase = connected
		}
	}
	c.mu.Unlock()
	if prev != nil {
		<-prev.done // outcomes are reported one at a time, in run order
	}
	if c.cfg.OnOutcome != nil {
		c.cfg.OnOutcome(out)
	}
}

// Run performs one run on the calling goroutine and returns its outcome:
// reconnect (with backoff between failed attempts), activate, bind, replay,
// stopping as soon as ctx ends. It is what OnOnline runs; call it directly
// only when you own the goroutine and the cancellation yourself, and not
// alongside OnOnline, which would run two sequences against the same Steps.
func (c *Coordinator) Run(ctx context.Context) Outcome {
	seq := sequence{backoff: c.cfg.Backoff, maxAttempts: c.cfg.MaxAttempts}
	act := seq.begin()
	for act.kind != doneRun {
		switch act.kind {
		case doStep:
			if ctx.Err() != nil {
				act = seq.cancelled(context.Cause(ctx))
				continue
			}
			step := act.step
			if step == StepReconnect {
				c.metrics.attempted()
			}
			err := c.steps.call(ctx, step)
			var cause error
			if ctx.Err() != nil {
				cause = context.Cause(ctx)
			}
			act = seq.stepReturned(err, cause)
			if err != nil && cause == nil && step != StepReplay {
				c.failed(step, seq.out.Attempts, err)
			}
		case doWait:
			select {
			case <-ctx.Done():
				act = seq.cancelled(context.Cause(ctx))
			case <-c.cfg.After(act.delay):
				act = seq.waited()
			}
		}
	}
	out := act.outcome
	c.metrics.finished(out)
	level := slog.LevelInfo
	if out.Result == GaveUp || (out.ReplayRan && out.ReplayErr != nil) {
		level = slog.LevelWarn
	}
	c.cfg.Logger.Log(ctx, level, "reconnect: run ended", "outcome", out.String())
	return out
}

// failed records a failed reconnect, activate or bind; it logs at Warn only
// for attempts 1, 2, 4, 8, ... so a long outage costs a few lines, not one
// per attempt.
func (c *Coordinator) failed(step Step, attempt int, err error) {
	c.metrics.stepFailed(step)
	level := slog.LevelDebug
	if attempt&(attempt-1) == 0 {
		level = slog.LevelWarn
	}
	c.cfg.Logger.Log(context.Background(), level, "reconnect: attempt failed",
		"step", step.String(), "attempt", attempt, "err", err)
}
