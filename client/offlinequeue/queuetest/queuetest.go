// Package queuetest is the conformance suite of offlinequeue.Queue. Every
// implementation's tests call Run; a rule of the contract is tested here once,
// not once per implementation.
//
// The suite uses only the Queue interface, real storage at the location the
// implementation's Config.New chooses, and Options (a fake clock through
// Options.Now, metrics on a fresh Prometheus registry). It assumes nothing
// about how an implementation stores its items.
//
// Where the contract leaves a choice, the suite pins the answer every
// implementation gives:
//   - Peek and DeadLetters with a limit of zero or less return no items and
//     no error.
//   - Enqueue validates its arguments before anything else: an empty or
//     oversized payload is refused even when its key is pending.
//   - A canceled context fails a call with an error matching ctx.Err(), and
//     the call changes nothing.
//   - MaxDepth answers on a closed queue (it is configuration).
//   - Times round-trip to the nanosecond.
//
// Subtests are independent (each has its own storage) and not parallel.
package queuetest

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/internal/fakeclock"
)

// opener opens the queue stored at one fixed location. Every call opens the
// same storage, so a test closes a queue and calls it again to reopen.
type opener func(opts offlinequeue.Options) (offlinequeue.Queue, error)

// Config describes the implementation under test.
type Config struct {
	// New prepares a fresh, empty storage location for one test (typically
	// under t.TempDir()) and returns the function that opens the queue
	// there. Every call of that function opens the same storage.
	New func(t *testing.T) func(opts offlinequeue.Options) (offlinequeue.Queue, error)
	// Durable says that the queue keeps its contents across Close and a
	// later open. When false (the memory queue) the reopen subtests and the
	// reopen halves of other subtests are not run.
	Durable bool
	// MoveWith, when set, calls the implementation's MoveToDeadLettersWith
	// on q (an implementation of New) with a hook that runs record. The
	// MoveWith subtests then check what every such method promises; they
	// are skipped when it is nil.
	MoveWith func(ctx context.Context, q offlinequeue.Queue, id offlinequeue.ID, reason string, record func(ctx context.Context) error) error
}

// Run runs every conformance subtest against cfg.
func Run(t *testing.T, cfg Config) {
	require.NotNil(t, cfg.New, "queuetest.Config.New is required")
	for _, group := range [][]subtest{
		enqueueTests, dedupTests, inputTests, peekTests, updateTests,
		depthTests, lifecycleTests, deadLetterTests, moveWithTests, concurrencyTests, metricsTests,
	} {
		for _, st := range group {
			if st.durableOnly && !cfg.Durable || st.moveWith && cfg.MoveWith == nil {
				continue
			}
			t.Run(st.name, func(t *testing.T) {
				st.run(t, newEnv(t, cfg))
			})
		}
	}
}

// subtest is one rule of the contract.
type subtest struct {
	name        string
	run         func(t *testing.T, e *env)
	durableOnly bool // the rule is about reopening; not run for Config.Durable=false
	moveWith    bool // the rule is MoveToDeadLettersWith's; not run without Config.MoveWith
}

// env is one subtest's storage location plus the tools to inspect it.
type env struct {
	t       *testing.T
	open    opener
	durable bool
	move    func(ctx context.Context, q offlinequeue.Queue, id offlinequeue.ID, reason string, record func(ctx context.Context) error) error
	clock   *fakeclock.Clock
	reg     *prometheus.Registry
	metrics *offlinequeue.Metrics
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := offlinequeue.NewMetrics(reg)
	require.NoError(t, err)
	return &env{
		t:       t,
		open:    cfg.New(t),
		durable: cfg.Durable,
		move:    cfg.MoveWith,
		clock:   fakeclock.New(time.Date(2024, 2, 29, 23, 59, 58, 123456789, time.FixedZone("UTC+1", 3600))),
		reg:     reg,
		metrics: m,
	}
}

// opts returns Options wired to the env's clock and metrics.
func (e *env) opts() offlinequeue.Options {
	return offlinequeue.Options{Now: e.clock.Now, Metrics: e.metrics}
}

// bounded returns opts with a MaxDepth.
func (e *env) bounded(maxDepth int) offlinequeue.Options {
	o := e.opts()
	o.MaxDepth = maxDepth
	return o
}

// openQueue opens the env's storage and closes it at the end of the test.
func (e *env) openQueue(opts offlinequeue.Options) offlinequeue.Queue {
	e.t.Helper()
	q, err := e.open(opts)
	require.NoError(e.t, err, "open queue")
	require.NotNil(e.t, q)
	e.t.Cleanup(func() { _ = q.Close() })
	return q
}

// reopen closes q and opens the same storage again.
func (e *env) reopen(q offlinequeue.Queue, opts offlinequeue.Options) offlinequeue.Queue {
	e.t.Helper()
	require.True(e.t, e.durable, "reopen called on a non-durable queue")
	require.NoError(e.t, q.Close(), "close before reopen")
	return e.openQueue(opts)
}

// ctx is the context of ordinary calls.
func (e *env) ctx() context.Context { return e.t.Context() }
