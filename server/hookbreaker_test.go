package server_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// flakyHook is a conflict hook the test switches between failing at once,
// hanging until its deadline, and accepting.
type flakyHook struct {
	mode  atomic.Int32 // hookFails, hookHangs or hookWorks
	calls atomic.Int64
}

const (
	hookFails int32 = iota
	hookHangs
	hookWorks
)

func (h *flakyHook) hook(ctx context.Context, _ replication.Record, _ bool, _ replication.Proposal) (replication.HookResult, error) {
	h.calls.Add(1)
	switch h.mode.Load() {
	case hookFails:
		return replication.HookResult{}, errors.New("the hook's backend is down")
	case hookHangs:
		<-ctx.Done()
		return replication.HookResult{}, ctx.Err()
	}
	return replication.Accept(), nil
}

// TestHookBreakerRefusesRetryablyAndNothingIsLost: a conflict hook that
// fails opens its model's breaker; while it is open, and while the hook
// hangs, writes of that model are refused hook_unavailable without calling
// the hook, writes of another model apply, and a real client keeps the
// refused writes queued (never dead-lettered) and resends them until the
// hook recovers and they apply. Nothing is lost.
func TestHookBreakerRefusesRetryablyAndNothingIsLost(t *testing.T) {
	h := &flakyHook{}
	srv := syncdtest.Start(t, server.Config{
		Policies:    replication.Config{"notes": syncproto.PolicyHook, "tasks": syncproto.PolicyLWW},
		Hook:        h.hook,
		HookTimeout: 100 * time.Millisecond,
		HookBreaker: replication.BreakerConfig{OpenFor: 300 * time.Millisecond},
	})
	q, err := offlinequeue.OpenFile(filepath.Join(t.TempDir(), "queue.ndjson"), offlinequeue.FileOptions{})
	require.NoError(t, err)
	c, err := client.Open(context.Background(), client.Config{
		ServerURLs: []string{srv.URL}, Token: srv.Member(t, "acme", "phone"), ClientID: "phone",
		Queue: q, ReplicaPath: filepath.Join(t.TempDir(), "replica.db"),
		RetryInterval: 20 * time.Millisecond, MaxRetryInterval: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	put := func(model string, from, to int) []string {
		t.Helper()
		var ops []string
		for i := from; i < to; i++ {
			op, err := c.Put(ctx, model, fmt.Sprintf("k%02d", i), []byte(fmt.Sprintf(`{"n":%d}`, i)))
			require.NoError(t, err)
			ops = append(ops, op)
		}
		return ops
	}
	awaitApplied := func(ops []string) {
		t.Helper()
		for _, op := range ops {
			o, err := c.Await(ctx, op)
			require.NoError(t, err)
			require.Equal(t, client.StatusApplied, o.Status, "op %s: %+v", op, o)
		}
	}
	state := func() float64 { return srv.MetricValue(t, `syncd_hook_breaker_state{model="notes"}`) }

	// The hook fails: last-writer-wins decides each write, and after 10
	// calls, all failed, the breaker opens.
	awaitApplied(put("notes", 0, 10))
	require.Equal(t, float64(replication.BreakerOpen), state())
	require.Equal(t, 1.0, srv.MetricValue(t, `syncd_hook_breaker_transitions_total{model="notes",to="open"}`))

	// Now the hook hangs. The model's writes are refused while the breaker
	// is open; every half-open period lets at most 3 probes reach the hook,
	// which time out (last-writer-wins decides the probe's write) and
	// reopen it. The other model's writes apply.
	h.mode.Store(hookHangs)
	callsBefore := h.calls.Load()
	notes := put("notes", 10, 20)
	tasks := put("tasks", 0, 10)
	awaitApplied(tasks)
	require.Eventually(t, func() bool {
		return srv.MetricValue(t, `syncd_hook_breaker_refusals_total{model="notes"}`) >= 10
	}, 30*time.Second, 10*time.Millisecond, "the notes writes are refused hook_unavailable")
	halfOpens := srv.MetricValue(t, `syncd_hook_breaker_transitions_total{model="notes",to="half_open"}`)
	require.LessOrEqual(t, float64(h.calls.Load()-callsBefore), 3*halfOpens,
		"only half-open probes reach a hanging hook")

	// The hook recovers: the next probes succeed, the breaker closes, and
	// the client's resends apply. Nothing was dead-lettered.
	h.mode.Store(hookWorks)
	awaitApplied(notes)
	require.Eventually(t, func() bool { return state() == float64(replication.BreakerClosed) }, 30*time.Second, 10*time.Millisecond)
	// Await answers once a write's outcome is kept; the queue lets the
	// write go just after (the NDJSON queue and the replica are two files).
	st, err := c.Status(ctx)
	for err == nil && st.Pending > 0 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
		st, err = c.Status(ctx)
	}
	require.NoError(t, err)
	require.Zero(t, st.DeadLetters)
	require.Zero(t, st.Pending)
	for _, model := range []string{"notes", "tasks"} {
		n := 10
		if model == "notes" {
			n = 20
		}
		entries := srv.Oplog(t, "&tenant=acme&model="+model)
		keys := map[string]bool{}
		for _, e := range entries {
			keys[e.Key] = true
		}
		require.Len(t, keys, n, "model %s: every key applied", model)
	}
}

// TestHookBreakerAnswersAtOnceWhileOpen: once a model's breaker is open,
// a push of its writes is answered hook_unavailable (retryable in the
// protocol, so the client charges nothing) without calling the hook, which
// would hang for an hour; a write of another model in the same push
// applies, and a resend under the same op id, after the breaker closed,
// applies: the refusal recorded nothing.
func TestHookBreakerAnswersAtOnceWhileOpen(t *testing.T) {
	var calls atomic.Int64
	var works atomic.Bool
	hook := func(ctx context.Context, _ replication.Record, _ bool, _ replication.Proposal) (replication.HookResult, error) {
		calls.Add(1)
		if works.Load() {
			return replication.Accept(), nil
		}
		return replication.HookResult{}, errors.New("the hook's backend is down")
	}
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	ts := startServer(t, server.Config{
		Policies:    replication.Config{"notes": syncproto.PolicyHook},
		Hook:        hook,
		HookTimeout: time.Hour,
		HookBreaker: replication.BreakerConfig{MaxFailures: 1},
		Now:         func() time.Time { return time.Unix(0, now.Load()) },
	})
	c, clock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")

	res := c.push("p1", put(t, clock, "notes", "a", `1`))
	require.Equal(t, syncproto.StatusApplied, res[0].Status, "the failed hook falls back to last-writer-wins")
	require.EqualValues(t, 1, calls.Load())

	refused := put(t, clock, "notes", "b", `2`)
	res = c.push("p2", refused, put(t, clock, "tasks", "t", `3`))
	require.Equal(t, syncproto.StatusRejected, res[0].Status)
	require.Equal(t, syncproto.CodeHookUnavailable, res[0].Code)
	require.True(t, res[0].Code.Retryable())
	require.Equal(t, syncproto.ActionResend, res[0].Action(), "a client leaves it queued, uncharged")
	require.Equal(t, syncproto.StatusApplied, res[1].Status)
	require.EqualValues(t, 1, calls.Load(), "an open breaker does not call the hook")

	// 30 s later the breaker lets probes through; the hook works again.
	works.Store(true)
	now.Add(int64(30 * time.Second))
	res = c.push("p3", refused)
	require.Equal(t, syncproto.StatusApplied, res[0].Status, "the resend is decided afresh")
	require.EqualValues(t, 2, calls.Load())
}
