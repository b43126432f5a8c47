package queuetest

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

var errRecordRefused = errors.New("queuetest: record refused")

// moveWithTests are the rules every MoveToDeadLettersWith keeps, whatever
// the hook can write (a transaction of the queue's database, or storage of
// the caller's own): the hook runs once per move and only for a pending
// item, and a failing hook moves nothing. What makes the hook's effects
// and the move visible together differs by implementation and is tested
// beside each.
var moveWithTests = []subtest{
	{name: "MoveWith/RunsHookOnceAndMoves", moveWith: true, run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		keep := enqueue(t, e, q, "keep", "")
		id := enqueue(t, e, q, "poison", "op-1")
		runs := 0
		require.NoError(t, e.move(e.ctx(), q, id, "refused", func(context.Context) error {
			runs++
			return nil
		}))
		require.Equal(t, 1, runs)
		s := takeSnapshot(t, e, q)
		require.Equal(t, []offlinequeue.ID{keep}, ids(s.Pending))
		require.Equal(t, []offlinequeue.ID{id}, deadIDs(s.Dead))
		require.Equal(t, "refused", s.Dead[0].Reason)
		require.Equal(t, 1, s.Stats.DeadLetters)
		requireGauges(t, e, 1, 1)
		if e.durable {
			require.Equal(t, s, takeSnapshot(t, e, e.reopen(q, e.opts())), "after reopen")
		}
	}},
	{name: "MoveWith/FailingHookMovesNothing", moveWith: true, run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		id := enqueue(t, e, q, "poison", "op-1")
		before := takeSnapshot(t, e, q)
		err := e.move(e.ctx(), q, id, "refused", func(context.Context) error { return errRecordRefused })
		require.ErrorIs(t, err, errRecordRefused)
		require.Equal(t, before, takeSnapshot(t, e, q))
		require.NoError(t, e.move(e.ctx(), q, id, "refused", func(context.Context) error { return nil }),
			"the handle keeps working")
		require.Equal(t, []offlinequeue.ID{id}, deadIDs(takeSnapshot(t, e, q).Dead))
	}},
	{name: "MoveWith/UnknownIsNotFoundWithoutHook", moveWith: true, run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		dead := enqueue(t, e, q, "dead", "")
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), dead, "first"))
		runs := 0
		hook := func(context.Context) error { runs++; return nil }
		for name, id := range map[string]offlinequeue.ID{"never enqueued": dead + 100, "already dead": dead} {
			require.ErrorIs(t, e.move(e.ctx(), q, id, "again", hook), offlinequeue.ErrNotFound, name)
		}
		require.Zero(t, runs, "no hook for an item that is not pending")
		require.NoError(t, q.Close())
		require.ErrorIs(t, e.move(e.ctx(), q, dead, "closed", hook), offlinequeue.ErrClosed)
		require.Zero(t, runs)
	}},
}
