package client

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/syncproto"
)

// decideQueued queues m and decides it with o, as the driver settles a
// push; it returns the decision.
func decideQueued(t *testing.T, r *replica, m *syncproto.Mutation, o Outcome) decision {
	t.Helper()
	_, _, err := r.enqueue(t.Context(), mustJSON(t, m), m, nil)
	require.NoError(t, err)
	items, err := r.queue.Peek(t.Context(), 0, 100)
	require.NoError(t, err)
	var id offlinequeue.ID
	for _, it := range items {
		if it.Key == m.OpID {
			id = it.ID
		}
	}
	require.NotZero(t, id)
	d := decision{mut: m, outcome: o}
	require.NoError(t, r.decideDone(t.Context(), []decision{d}, []offlinequeue.ID{id}, true))
	return d
}

// An Await waiting for a write gets its outcome from the commit that
// recorded it, exactly as a read of the row returns it; an outcome with a
// winner is read back instead (its waiter is woken by Client.outcomes).
func TestDecidedOutcomeIsHandedOverAsStored(t *testing.T) {
	forEachLayout(t, func(t *testing.T, r *replica) {
		m := testMutation(t, "a", `{"n":1}`)
		h := r.handoffs.wait(m.OpID)
		decided := time.Now() // nanoseconds, and a monotonic reading
		decideQueued(t, r, m, Outcome{OpID: m.OpID, Status: StatusApplied, Version: 1, Seq: 7, HLC: m.HLC, DecidedAt: decided})
		handed, ok := h.handed()
		require.True(t, ok)
		stored, found, err := r.outcome(t.Context(), m.OpID)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, stored, handed)
		r.handoffs.leave(m.OpID, h)
		require.Empty(t, r.handoffs.m)

		w := testMutation(t, "b", `{"n":2}`)
		h = r.handoffs.wait(w.OpID)
		again := r.handoffs.wait(w.OpID) // a second Await of the same write
		winner := &syncproto.Winner{Version: 3, Value: []byte(`{"n":3}`), HLC: w.HLC}
		decideQueued(t, r, w, Outcome{OpID: w.OpID, Status: StatusSuperseded, Winner: winner, DecidedAt: decided})
		_, ok = h.handed()
		require.False(t, ok, "a winner's outcome is read back")
		r.handoffs.leave(w.OpID, h)
		r.handoffs.leave(w.OpID, again)
		require.Empty(t, r.handoffs.m)
	})
}

// The feed's echo of a write this client settled as applied is known to
// be in the records without a read, at its version or below; a newer
// version, or any write after a snapshot reset began, is looked up.
func TestSettledWritesEchoWithoutARead(t *testing.T) {
	forEachLayout(t, func(t *testing.T, r *replica) {
		m := testMutation(t, "a", `{"n":1}`)
		decideQueued(t, r, m, Outcome{OpID: m.OpID, Status: StatusApplied, Version: 2, Seq: 5, DecidedAt: time.Now()})
		echo := syncproto.Change{Seq: 5, OpID: m.OpID, Model: m.Model, Key: m.Key, Op: m.Op, Value: m.Value, Version: 2, HLC: m.HLC}
		newer := echo
		newer.OpID, newer.Seq, newer.Version = "another-op", 6, 3
		require.Equal(t, []syncproto.Change{newer}, r.echoes.drop([]syncproto.Change{echo, newer}))
		require.Equal(t, []syncproto.Change{echo}, r.echoes.drop([]syncproto.Change{echo}), "an echo is known once")
		fresh, err := r.unapplied(t.Context(), []syncproto.Change{echo, newer})
		require.NoError(t, err)
		require.Equal(t, []syncproto.Change{newer}, fresh, "the records hold the echo")

		gen := r.echoes.generation()
		r.echoes.reset()
		r.echoes.note(gen, []decision{{mut: m, outcome: Outcome{OpID: m.OpID, Status: StatusApplied, Version: 2}}})
		require.Equal(t, []syncproto.Change{echo}, r.echoes.drop([]syncproto.Change{echo}), "a note a reset overtook is dropped")
	})
}
