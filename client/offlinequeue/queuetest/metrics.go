package queuetest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

var metricsTests = []subtest{
	{name: "Metrics/GaugesFollowCounts", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.bounded(4))
		requireGauges(t, e, 0, 0)

		a := enqueue(t, e, q, "a", "op-a")
		b := enqueue(t, e, q, "b", "")
		c := enqueue(t, e, q, "c", "")
		requireGauges(t, e, 3, 0)
		enqueue(t, e, q, "a again", "op-a")
		requireGauges(t, e, 3, 0)
		_, err := q.Enqueue(e.ctx(), nil, "")
		require.Error(t, err)
		requireGauges(t, e, 3, 0)

		require.NoError(t, q.MarkDone(e.ctx(), a, a))
		requireGauges(t, e, 2, 0)
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), b, "r"))
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), c, "r"))
		requireGauges(t, e, 0, 2)
		require.NoError(t, q.Requeue(e.ctx(), b))
		requireGauges(t, e, 1, 1)
		require.NoError(t, q.Purge(e.ctx(), c, c))
		requireGauges(t, e, 1, 0)

		enqueueN(t, e, q, "fill", 3)
		_, err = q.Enqueue(e.ctx(), []byte("overflow"), "")
		require.ErrorIs(t, err, offlinequeue.ErrFull)
		requireGauges(t, e, 4, 0)
		require.Equal(t, 1.0, metricValue(t, e.reg, overflowMetric))

		if !e.durable {
			return
		}
		all := pending(t, e, q)
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), all[0].ID, "r"))
		require.NoError(t, q.Close())

		// A reopened queue publishes its stored counts at once, on a
		// fresh registry.
		e.reg = prometheus.NewRegistry()
		m, err := offlinequeue.NewMetrics(e.reg)
		require.NoError(t, err)
		e.metrics = m
		e.openQueue(e.bounded(4))
		requireGauges(t, e, 3, 1)
		require.Zero(t, metricValue(t, e.reg, overflowMetric))
	}},
	{name: "Metrics/NilMetricsIsFine", run: func(t *testing.T, e *env) {
		opts := e.opts()
		opts.Metrics = nil
		opts.MaxDepth = 1
		q := e.openQueue(opts)
		a := enqueue(t, e, q, "a", "")
		_, err := q.Enqueue(e.ctx(), []byte("b"), "")
		require.ErrorIs(t, err, offlinequeue.ErrFull)
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), a, "r"))
		require.NoError(t, q.Requeue(e.ctx(), a))
		requireLen(t, e, q, 1)
	}},
}
