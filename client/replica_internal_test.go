package client

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/syncproto"
)

func openTestReplica(t *testing.T) *replica {
	t.Helper()
	r, err := openReplica(t.Context(), filepath.Join(t.TempDir(), "replica.db"), time.Now)
	require.NoError(t, err)
	t.Cleanup(func() { r.close() })
	return r
}

func testMutation(t *testing.T, key, value string) *syncproto.Mutation {
	t.Helper()
	op, err := syncproto.NewOpID()
	require.NoError(t, err)
	return &syncproto.Mutation{OpID: op, Model: "notes", Key: key, Op: syncproto.OpPut, Value: json.RawMessage(value),
		HLC: syncproto.Timestamp{Wall: time.Now().UnixMilli(), Origin: "phone-1"}}
}

// The sync worker can replay and decide a queued write before the Put that
// queued it has copied it into the pending overlay. The late copy must not
// resurrect the write as pending: reads would show it over the server's
// records forever and Await would never return.
func TestPendingAfterDecisionIsIgnored(t *testing.T) {
	r := openTestReplica(t)
	m := testMutation(t, "k", `{"n":1}`)
	require.NoError(t, r.decide(t.Context(), m, Outcome{OpID: m.OpID, Status: StatusApplied, Version: 1, Seq: 1, HLC: m.HLC, DecidedAt: time.Now()}))
	require.NoError(t, r.addPending(t.Context(), 1, m))

	pending, err := r.isPending(t.Context(), m.OpID)
	require.NoError(t, err)
	require.False(t, pending)
	rec, found, err := r.get(t.Context(), "notes", "k")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, Record{Model: "notes", Key: "k", Value: json.RawMessage(`{"n":1}`), Version: 1}, rec)

	// The overlay's high-water mark still moves, so a restart does not
	// copy the item again either.
	hw, err := r.meta(t.Context(), r.db, metaPendingHW)
	require.NoError(t, err)
	require.Equal(t, uint64(1), hw)
}

// A write copied into the overlay before its decision leaves it when
// decided, in the same transaction that records the outcome.
func TestDecisionRemovesPending(t *testing.T) {
	r := openTestReplica(t)
	m := testMutation(t, "k", `{"n":1}`)
	require.NoError(t, r.addPending(t.Context(), 1, m))
	pending, err := r.isPending(t.Context(), m.OpID)
	require.NoError(t, err)
	require.True(t, pending)

	w := &syncproto.Winner{Version: 4, Value: json.RawMessage(`{"n":"theirs"}`), HLC: syncproto.Timestamp{Wall: m.HLC.Wall + 1, Origin: "phone-2"}}
	require.NoError(t, r.decide(t.Context(), m, Outcome{OpID: m.OpID, Status: StatusSuperseded, Winner: w, DecidedAt: time.Now()}))
	pending, err = r.isPending(t.Context(), m.OpID)
	require.NoError(t, err)
	require.False(t, pending)
	rec, found, err := r.get(t.Context(), "notes", "k")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, Record{Model: "notes", Key: "k", Value: w.Value, Version: 4}, rec, "the winner folds into the records")
	o, found, err := r.outcome(t.Context(), m.OpID)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, StatusSuperseded, o.Status)
	require.Equal(t, *w, *o.Winner)
}
