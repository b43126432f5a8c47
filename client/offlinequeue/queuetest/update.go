package queuetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

var updateTests = []subtest{
	{name: "MarkDone/RemovesVariadicAndIdempotent", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		all := enqueueN(t, e, q, "item", 6)

		require.NoError(t, q.MarkDone(e.ctx()), "MarkDone with no IDs")
		require.NoError(t, q.MarkDone(e.ctx(), all[1], all[3], all[4]))
		require.Equal(t, []offlinequeue.ID{all[0], all[2], all[5]}, ids(pending(t, e, q)))
		requireLen(t, e, q, 3)

		require.NoError(t, q.MarkDone(e.ctx(), all[1], all[3]), "repeated MarkDone")
		require.NoError(t, q.MarkDone(e.ctx(), all[5]+1000, 0), "unknown IDs")
		require.NoError(t, q.MarkDone(e.ctx(), all[0], all[0]), "the same ID twice in one call")
		require.Equal(t, []offlinequeue.ID{all[2], all[5]}, ids(pending(t, e, q)))
		requireLen(t, e, q, 2)
		if e.durable {
			q = e.reopen(q, e.opts())
			require.Equal(t, []offlinequeue.ID{all[2], all[5]}, ids(pending(t, e, q)))
			require.NoError(t, q.MarkDone(e.ctx(), all[1]), "MarkDone of an ID done before the reopen")
		}
	}},
	{name: "MarkDone/LeavesDeadLettersAlone", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		a := enqueue(t, e, q, "a", "op-a")
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), a, "refused"))
		require.NoError(t, q.MarkDone(e.ctx(), a), "a dead letter's ID is not a pending item: ignored")
		require.Equal(t, []offlinequeue.ID{a}, deadIDs(deadLetters(t, e, q)))
	}},
	{name: "SetAttempts/RecordsDurably", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		a := enqueue(t, e, q, "a", "op-a")
		b := enqueue(t, e, q, "b", "")
		require.NoError(t, q.SetAttempts(e.ctx(), a, 3))
		require.NoError(t, q.SetAttempts(e.ctx(), b, 1))
		require.NoError(t, q.SetAttempts(e.ctx(), b, 4294967295))

		items := pending(t, e, q)
		require.Equal(t, []offlinequeue.Attempts{3, 4294967295}, []offlinequeue.Attempts{items[0].Attempts, items[1].Attempts})
		if e.durable {
			q = e.reopen(q, e.opts())
			items = pending(t, e, q)
			require.Equal(t, []offlinequeue.Attempts{3, 4294967295}, []offlinequeue.Attempts{items[0].Attempts, items[1].Attempts}, "after reopen")
			require.NoError(t, q.SetAttempts(e.ctx(), a, 0))
			q = e.reopen(q, e.opts())
			require.Zero(t, pending(t, e, q)[0].Attempts, "reset to zero after reopen")
		}
		require.Equal(t, "a", string(pending(t, e, q)[0].Payload), "SetAttempts keeps the payload")
	}},
	{name: "SetAttempts/UnknownIDIsNotFound", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		a := enqueue(t, e, q, "a", "")
		b := enqueue(t, e, q, "b", "")
		c := enqueue(t, e, q, "c", "")
		require.NoError(t, q.MarkDone(e.ctx(), b))
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), c, "r"))
		before := takeSnapshot(t, e, q)

		for name, id := range map[string]offlinequeue.ID{"never enqueued": c + 100, "zero": 0, "done": b, "dead letter": c} {
			require.ErrorIs(t, q.SetAttempts(e.ctx(), id, 7), offlinequeue.ErrNotFound, name)
		}
		require.Equal(t, before, takeSnapshot(t, e, q))
		require.Zero(t, pending(t, e, q)[0].Attempts)
		require.Equal(t, a, pending(t, e, q)[0].ID)
	}},
	{name: "Stats/CountsAndMaxDepth", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.bounded(10))
		require.Equal(t, 10, q.MaxDepth())
		st, err := q.Stats(e.ctx())
		require.NoError(t, err)
		require.Equal(t, offlinequeue.Stats{MaxDepth: 10}, st)

		all := enqueueN(t, e, q, "item", 5)
		require.NoError(t, q.MarkDone(e.ctx(), all[0]))
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), all[1], "r"))
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), all[2], "r"))
		st, err = q.Stats(e.ctx())
		require.NoError(t, err)
		require.Equal(t, offlinequeue.Stats{Pending: 2, DeadLetters: 2, MaxDepth: 10}, st)
		requireLen(t, e, q, 2)
		if e.durable {
			q = e.reopen(q, e.bounded(10))
			st, err = q.Stats(e.ctx())
			require.NoError(t, err)
			require.Equal(t, offlinequeue.Stats{Pending: 2, DeadLetters: 2, MaxDepth: 10}, st, "after reopen")
		}
	}},
}
