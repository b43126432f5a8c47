package client_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/syncproto"
)

// While a device is offline, a row it holds moves out of its value (to
// one it was never granted) and its grant of another value is removed;
// it queued writes to both rows and to one it keeps. On reconnect, by the
// time its cursor reaches the head (one sync), every such row has left
// its replica; its writes to them are dead letters with forbidden_scope,
// none lost, and requeueable: granted again, they go through.
func TestOfflineMoveAndRevocationLeaveWithinOneSync(t *testing.T) {
	s := scopedSyncd(t)
	alice := scopedDevice(t, s, "alice-laptop", "alice", nil, nil)
	bob := scopedDevice(t, s, "bob-phone", "bob", nil, nil)
	ctx := t.Context()
	alice.requireApplied(t, []string{
		alice.put(t, "members", "p1/alice", `{"project_id":"p1","user":"alice"}`),
		alice.put(t, "members", "p2/alice", `{"project_id":"p2","user":"alice"}`),
		alice.put(t, "members", "p9/alice", `{"project_id":"p9","user":"alice"}`),
		alice.put(t, "tasks", "stays", task("p1", 1)),
		alice.put(t, "tasks", "moves", task("p1", 2)),
		alice.put(t, "tasks", "revoked", task("p2", 3)),
		alice.put(t, "members", "p1/bob", `{"project_id":"p1","user":"bob"}`),
		alice.put(t, "members", "p2/bob", `{"project_id":"p2","user":"bob"}`),
	})
	waitKeys(t, bob, "tasks", "moves", "revoked", "stays")
	require.NoError(t, waitScope(bob, "project", "p2"))

	bob.offline()
	bob.waitOffline(t)
	queued := map[string]string{
		"moves":   bob.put(t, "tasks", "moves", task("p1", 20)),
		"revoked": bob.put(t, "tasks", "revoked", task("p2", 30)),
		"stays":   bob.put(t, "tasks", "stays", task("p1", 10)),
	}
	del, err := alice.Delete(ctx, "members", "p2/bob")
	require.NoError(t, err)
	alice.requireApplied(t, []string{alice.put(t, "tasks", "moves", task("p9", 4)), del})
	head := s.Status(t).OplogHead

	bob.online()
	bob.waitStatus(t, "caught up", func(st client.Status) bool { return st.Connected && st.Cursor >= head })
	for key, op := range queued {
		if key == "stays" {
			continue
		}
		// Its queued write shows until the server answers it; the
		// server's copy of the row is gone.
		o := bob.await(t, op)
		require.Equal(t, client.StatusDeadLettered, o.Status, "%s: %+v", key, o)
		require.Contains(t, o.Reason, string(syncproto.CodeForbiddenScope))
	}
	require.Equal(t, client.StatusApplied, bob.await(t, queued["stays"]).Status)
	require.Equal(t, []string{"stays"}, keysOf(t, bob, "tasks"), "the moved and the revoked row left within one sync")
	for _, key := range []string{"moves", "revoked"} {
		_, found, err := bob.Get(ctx, "tasks", key)
		require.NoError(t, err)
		require.False(t, found, key)
	}
	dead, err := bob.DeadLetters(ctx, 0, 10)
	require.NoError(t, err)
	var ops []string
	for _, d := range dead {
		ops = append(ops, d.Mutation.OpID)
	}
	slices.Sort(ops)
	want := []string{queued["moves"], queued["revoked"]}
	slices.Sort(want)
	require.Equal(t, want, ops, "both writes kept as dead letters, none lost")

	// Granted both values again, the requeued dead letters are decided
	// like any write: the one to the revoked row applies, the one to the
	// moved row is superseded by the move (a newer write).
	alice.requireApplied(t, []string{
		alice.put(t, "members", "p2/bob", `{"project_id":"p2","user":"bob"}`),
		alice.put(t, "members", "p9/bob", `{"project_id":"p9","user":"bob"}`),
	})
	require.NoError(t, waitScope(bob, "project", "p9"))
	waitKeys(t, bob, "tasks", "moves", "revoked", "stays")
	for _, d := range dead {
		require.NoError(t, bob.RequeueDeadLetters(ctx, d.ID))
	}
	bob.waitSynced(t)
	require.Eventually(t, func() bool {
		a, okA, errA := bob.Get(ctx, "tasks", "moves")
		b, okB, errB := bob.Get(ctx, "tasks", "revoked")
		return errA == nil && errB == nil && okA && okB && !a.Pending && !b.Pending &&
			jsonEqual(a.Value, []byte(task("p9", 4))) && jsonEqual(b.Value, []byte(task("p2", 30)))
	}, waitFor, pollTick, "the requeued writes are decided")
	dead, err = bob.DeadLetters(ctx, 0, 10)
	require.NoError(t, err)
	require.Empty(t, dead)
}
