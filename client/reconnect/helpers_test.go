package reconnect_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/reconnect"
)

// guard bounds every wait for a goroutine; reaching it fails the test. It
// is a hang detector, never a measured duration.
const guard = 10 * time.Second

var errRefused = errors.New("connection refused")

// trace records step calls and test milestones, in order, from any
// goroutine.
type trace struct {
	mu      sync.Mutex
	entries []string
}

func (tr *trace) add(s string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.entries = append(tr.entries, s)
}

func (tr *trace) get() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.entries...)
}

// behaviour is what a step does on its n-th call (from 1).
type behaviour func(ctx context.Context, n int) error

// recordedSteps builds Steps that record each call in tr and then act as
// given; a step without a behaviour succeeds.
func recordedSteps(tr *trace, b map[reconnect.Step]behaviour) reconnect.Steps {
	var mu sync.Mutex
	calls := map[reconnect.Step]int{}
	step := func(s reconnect.Step) func(context.Context) error {
		return func(ctx context.Context) error {
			mu.Lock()
			calls[s]++
			n := calls[s]
			mu.Unlock()
			tr.add(s.String())
			if f := b[s]; f != nil {
				return f(ctx, n)
			}
			return nil
		}
	}
	return reconnect.Steps{
		Reconnect: step(reconnect.StepReconnect),
		Activate:  step(reconnect.StepActivate),
		Bind:      step(reconnect.StepBind),
		Replay:    step(reconnect.StepReplay),
	}
}

// failFirst fails the first n calls with errRefused.
func failFirst(n int) behaviour {
	return func(_ context.Context, call int) error {
		if call <= n {
			return errRefused
		}
		return nil
	}
}

// waits is a fake clock whose waits elapse at once; it records the delays
// asked for.
type waits struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (w *waits) after(d time.Duration) <-chan time.Time {
	w.mu.Lock()
	w.delays = append(w.delays, d)
	w.mu.Unlock()
	c := make(chan time.Time, 1)
	c <- time.Time{}
	return c
}

func (w *waits) get() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.delays...)
}

// newCoordinator builds a coordinator over steps whose outcomes arrive on
// the returned channel, closed by t.Cleanup.
func newCoordinator(t *testing.T, steps reconnect.Steps, cfg reconnect.Config) (*reconnect.Coordinator, <-chan reconnect.Outcome) {
	t.Helper()
	outcomes := make(chan reconnect.Outcome, 16)
	if cfg.OnOutcome == nil {
		cfg.OnOutcome = func(o reconnect.Outcome) { outcomes <- o }
	}
	if cfg.After == nil {
		cfg.After = (&waits{}).after
	}
	if cfg.Backoff.Rand == nil {
		cfg.Backoff.Rand = highest
	}
	c, err := reconnect.New(steps, cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c, outcomes
}

func nextOutcome(t *testing.T, outcomes <-chan reconnect.Outcome) reconnect.Outcome {
	t.Helper()
	select {
	case o := <-outcomes:
		return o
	case <-time.After(guard):
		t.Fatal("no outcome")
		return reconnect.Outcome{}
	}
}

func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(guard):
		t.Fatalf("timed out waiting for %s", what)
	}
}
