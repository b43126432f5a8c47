package queuetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

// pageSize is deliberately small and odd so that every listing in the suite
// crosses several page boundaries.
const pageSize = 7

// pending lists every pending item by paging through Peek.
func pending(t *testing.T, e *env, q offlinequeue.Queue) []offlinequeue.Item {
	t.Helper()
	var all []offlinequeue.Item
	var after offlinequeue.ID
	for {
		page, err := q.Peek(e.ctx(), after, pageSize)
		require.NoError(t, err, "Peek(after=%d)", after)
		require.LessOrEqual(t, len(page), pageSize, "Peek returned more than limit")
		if len(page) == 0 {
			return all
		}
		for _, it := range page {
			require.Greater(t, it.ID, after, "Peek page out of order")
			after = it.ID
		}
		all = append(all, page...)
	}
}

// deadLetters lists every dead letter by paging through DeadLetters.
func deadLetters(t *testing.T, e *env, q offlinequeue.Queue) []offlinequeue.DeadLetter {
	t.Helper()
	var all []offlinequeue.DeadLetter
	var after offlinequeue.ID
	for {
		page, err := q.DeadLetters(e.ctx(), after, pageSize)
		require.NoError(t, err, "DeadLetters(after=%d)", after)
		require.LessOrEqual(t, len(page), pageSize, "DeadLetters returned more than limit")
		if len(page) == 0 {
			return all
		}
		for _, d := range page {
			require.Greater(t, d.ID, after, "DeadLetters page out of order")
			after = d.ID
		}
		all = append(all, page...)
	}
}

// snapshot is everything a queue holds, normalised for comparison.
type snapshot struct {
	Pending []offlinequeue.Item
	Dead    []offlinequeue.DeadLetter
	Stats   offlinequeue.Stats
}

// takeSnapshot reads the whole queue. Times are normalised to UTC without a
// monotonic reading, so that snapshots taken before and after a reopen
// compare equal when they hold the same instants.
func takeSnapshot(t *testing.T, e *env, q offlinequeue.Queue) snapshot {
	t.Helper()
	s := snapshot{Pending: pending(t, e, q), Dead: deadLetters(t, e, q)}
	for i := range s.Pending {
		s.Pending[i].EnqueuedAt = s.Pending[i].EnqueuedAt.UTC()
	}
	for i := range s.Dead {
		s.Dead[i].EnqueuedAt = s.Dead[i].EnqueuedAt.UTC()
		s.Dead[i].DeadAt = s.Dead[i].DeadAt.UTC()
	}
	st, err := q.Stats(e.ctx())
	require.NoError(t, err)
	s.Stats = st
	require.Len(t, s.Pending, st.Pending, "Stats.Pending disagrees with Peek")
	require.Len(t, s.Dead, st.DeadLetters, "Stats.DeadLetters disagrees with DeadLetters")
	n, err := q.Len(e.ctx())
	require.NoError(t, err)
	require.Equal(t, st.Pending, n, "Len disagrees with Stats.Pending")
	return s
}

// enqueue enqueues and requires success.
func enqueue(t *testing.T, e *env, q offlinequeue.Queue, payload, key string) offlinequeue.ID {
	t.Helper()
	id, err := q.Enqueue(e.ctx(), []byte(payload), key)
	require.NoError(t, err, "Enqueue(%q, key %q)", payload, key)
	require.NotZero(t, id, "Enqueue returned ID 0, which Peek's after=0 could never reach")
	return id
}

// enqueueN enqueues n unkeyed items named prefix-0 ... prefix-(n-1).
func enqueueN(t *testing.T, e *env, q offlinequeue.Queue, prefix string, n int) []offlinequeue.ID {
	t.Helper()
	ids := make([]offlinequeue.ID, n)
	for i := range n {
		ids[i] = enqueue(t, e, q, fmt.Sprintf("%s-%d", prefix, i), "")
	}
	return ids
}

// ids returns the IDs of items, in order.
func ids(items []offlinequeue.Item) []offlinequeue.ID {
	out := make([]offlinequeue.ID, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

// deadIDs returns the IDs of dead letters, in order.
func deadIDs(dls []offlinequeue.DeadLetter) []offlinequeue.ID {
	out := make([]offlinequeue.ID, len(dls))
	for i, d := range dls {
		out[i] = d.ID
	}
	return out
}

// payloads returns the payloads of items as strings, in order.
func payloads(items []offlinequeue.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = string(it.Payload)
	}
	return out
}

// requireLen requires q to hold want pending items.
func requireLen(t *testing.T, e *env, q offlinequeue.Queue, want int) {
	t.Helper()
	got, err := q.Len(e.ctx())
	require.NoError(t, err)
	require.Equal(t, want, got, "Len")
}

// metricValue returns the value of the one series of the named metric in the
// env's registry. Each subtest has its own registry and one queue, so the
// queue label (which differs between implementations) need not be known.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		ms := f.GetMetric()
		require.Len(t, ms, 1, "metric %s: want exactly one series", name)
		switch {
		case ms[0].GetGauge() != nil:
			return ms[0].GetGauge().GetValue()
		case ms[0].GetCounter() != nil:
			return ms[0].GetCounter().GetValue()
		}
		require.Failf(t, "unexpected metric type", "metric %s is neither gauge nor counter", name)
	}
	require.Failf(t, "metric not exported", "metric %s not found in the registry", name)
	return 0
}

const (
	depthMetric    = "syncd_client_queue_depth"
	deadMetric     = "syncd_client_queue_dead_letters"
	overflowMetric = "syncd_client_queue_overflow_total"
	evictedMetric  = "syncd_client_queue_dead_letters_evicted_total"
)

// requireGauges requires the depth and dead-letter gauges to equal the counts.
func requireGauges(t *testing.T, e *env, wantPending, wantDead int) {
	t.Helper()
	require.Equal(t, float64(wantPending), metricValue(t, e.reg, depthMetric), "depth gauge")
	require.Equal(t, float64(wantDead), metricValue(t, e.reg, deadMetric), "dead-letter gauge")
}

// newCanceledContext returns a context that is already canceled.
func newCanceledContext(e *env) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(e.ctx())
	cancel()
	return ctx, cancel
}
