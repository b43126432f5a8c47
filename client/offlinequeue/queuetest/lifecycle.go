package queuetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

var depthTests = []subtest{
	{name: "MaxDepth/RefusesNewestWithFullError", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.bounded(3))
		require.Equal(t, 3, q.MaxDepth())
		all := enqueueN(t, e, q, "item", 3)
		before := takeSnapshot(t, e, q)

		for i, key := range []string{"", "op-new"} {
			id, err := q.Enqueue(e.ctx(), []byte("overflow"), key)
			require.Zero(t, id)
			require.ErrorIs(t, err, offlinequeue.ErrFull)
			var full *offlinequeue.FullError
			require.ErrorAs(t, err, &full)
			require.Equal(t, offlinequeue.FullError{Depth: 3, Capacity: 3}, *full)
			require.Equal(t, float64(i+1), metricValue(t, e.reg, overflowMetric), "overflow counter")
		}
		require.Equal(t, before, takeSnapshot(t, e, q), "a refused enqueue wrote something")

		require.NoError(t, q.MarkDone(e.ctx(), all[0]))
		id := enqueue(t, e, q, "fits", "op-new")
		require.Greater(t, id, all[2])
		_, err := q.Enqueue(e.ctx(), []byte("overflow"), "")
		require.ErrorIs(t, err, offlinequeue.ErrFull)
		if e.durable {
			want := takeSnapshot(t, e, q)
			q = e.reopen(q, e.bounded(3))
			require.Equal(t, want, takeSnapshot(t, e, q), "after reopen")
			_, err = q.Enqueue(e.ctx(), []byte("overflow"), "")
			require.ErrorIs(t, err, offlinequeue.ErrFull, "a reopened full queue is still full")
		}
	}},
	{name: "MaxDepth/ZeroIsTheDefault", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		require.Equal(t, offlinequeue.DefaultMaxDepth, q.MaxDepth())
		st, err := q.Stats(e.ctx())
		require.NoError(t, err)
		require.Equal(t, offlinequeue.DefaultMaxDepth, st.MaxDepth)
		enqueueN(t, e, q, "item", 40)
		requireLen(t, e, q, 40)
		require.Zero(t, metricValue(t, e.reg, overflowMetric))
	}},
	{name: "MaxDepth/IsPerOpenAndNeverEvicts", durableOnly: true, run: func(t *testing.T, e *env) {
		q := e.openQueue(e.bounded(3))
		enqueueN(t, e, q, "first", 3)
		q = e.reopen(q, e.bounded(5))
		require.Equal(t, 5, q.MaxDepth())
		enqueueN(t, e, q, "second", 2)
		want := takeSnapshot(t, e, q).Pending

		q = e.reopen(q, e.bounded(2))
		_, err := q.Enqueue(e.ctx(), []byte("x"), "")
		var full *offlinequeue.FullError
		require.ErrorAs(t, err, &full)
		require.Equal(t, offlinequeue.FullError{Depth: 5, Capacity: 2}, *full)
		require.Equal(t, want, takeSnapshot(t, e, q).Pending, "a lower MaxDepth must not evict")
	}},
}

var lifecycleTests = []subtest{
	{name: "Close/EveryMethodReturnsErrClosed", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.bounded(7))
		a := enqueue(t, e, q, "a", "op-a")
		b := enqueue(t, e, q, "b", "")
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), b, "r"))
		require.NoError(t, q.Close())

		calls := map[string]func() error{
			"Enqueue":           func() error { _, err := q.Enqueue(e.ctx(), []byte("c"), ""); return err },
			"Enqueue keyed":     func() error { _, err := q.Enqueue(e.ctx(), []byte("c"), "op-a"); return err },
			"Peek":              func() error { _, err := q.Peek(e.ctx(), 0, 10); return err },
			"MarkDone":          func() error { return q.MarkDone(e.ctx(), a) },
			"SetAttempts":       func() error { return q.SetAttempts(e.ctx(), a, 1) },
			"Len":               func() error { _, err := q.Len(e.ctx()); return err },
			"Stats":             func() error { _, err := q.Stats(e.ctx()); return err },
			"MoveToDeadLetters": func() error { return q.MoveToDeadLetters(e.ctx(), a, "r") },
			"DeadLetters":       func() error { _, err := q.DeadLetters(e.ctx(), 0, 10); return err },
			"Requeue":           func() error { return q.Requeue(e.ctx(), b) },
			"Purge":             func() error { return q.Purge(e.ctx(), b) },
		}
		for name, call := range calls {
			require.ErrorIs(t, call(), offlinequeue.ErrClosed, name)
		}
		require.Equal(t, 7, q.MaxDepth(), "MaxDepth is configuration and needs no open handle")
		require.NoError(t, q.Close(), "Close is idempotent")
		require.ErrorIs(t, q.MarkDone(e.ctx(), a), offlinequeue.ErrClosed, "still closed after a second Close")

		if e.durable {
			q = e.openQueue(e.bounded(7))
			s := takeSnapshot(t, e, q)
			require.Equal(t, []offlinequeue.ID{a}, ids(s.Pending), "calls on the closed handle changed the storage")
			require.Equal(t, []offlinequeue.ID{b}, deadIDs(s.Dead))
			require.Zero(t, s.Pending[0].Attempts)
		}
	}},
	{name: "IDs/IncreaseAndAreNeverReused", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		one := enqueue(t, e, q, "one", "")
		two := enqueue(t, e, q, "two", "op-2")
		require.Greater(t, two, one)
		require.NoError(t, q.MarkDone(e.ctx(), two))
		if e.durable {
			q = e.reopen(q, e.opts())
			q = e.reopen(q, e.opts())
		}
		three := enqueue(t, e, q, "three", "op-2")
		require.Greater(t, three, two, "the ID of a done item was reissued")

		// The highest ID leaving through the dead-letter store and a purge
		// does not free it either.
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), three, "r"))
		require.NoError(t, q.Purge(e.ctx(), three))
		if e.durable {
			q = e.reopen(q, e.opts())
			q = e.reopen(q, e.opts())
		}
		four := enqueue(t, e, q, "four", "")
		require.Greater(t, four, three, "the ID of a purged dead letter was reissued")

		// Draining the queue completely does not reset the sequence.
		require.NoError(t, q.MarkDone(e.ctx(), one, four))
		if e.durable {
			q = e.reopen(q, e.opts())
			q = e.reopen(q, e.opts())
		}
		five := enqueue(t, e, q, "five", "")
		require.Greater(t, five, four, "an emptied queue reissued an ID")
	}},
	{name: "Reopen/KeepsEverything", durableOnly: true, run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		all := enqueueN(t, e, q, "item", 10)
		keyed := enqueue(t, e, q, "keyed", "op-k")
		require.NoError(t, q.SetAttempts(e.ctx(), all[2], 2))
		require.NoError(t, q.SetAttempts(e.ctx(), keyed, 5))
		require.NoError(t, q.MarkDone(e.ctx(), all[0], all[5]))
		e.clock.Advance(time.Hour)
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), all[2], "bad request"))
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), all[7], ""))
		want := takeSnapshot(t, e, q)

		for range 3 {
			q = e.reopen(q, e.opts())
			require.Equal(t, want, takeSnapshot(t, e, q))
		}
	}},
}
