package server_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// grantWindow writes, after the device's cursor, a row in p4 that then
// moves to p9 (a value u1 never holds) before u1 is granted p4, a write to
// p4 after the grant, a write to p2 (held since before the cursor), the
// revocation of p2, a write to p2 after it, and a row no scope covers. It
// returns the cursor and
// the seqs of the grant and the revocation.
func grantWindow(t *testing.T, oc *wsClient, oclock *syncproto.Clock) (cursor, granted, revoked uint64) {
	t.Helper()
	requireApplied(t, oc.push("before",
		put(t, oclock, "members", "m-u1-p2", `{"user":"u1","project_id":"p2"}`),
		put(t, oclock, "tasks", "old2", `{"project_id":"p2"}`)))
	cursor = oc.push("mark", put(t, oclock, "notes", "mark", `{"n":0}`))[0].Seq
	requireApplied(t, oc.push("secret", put(t, oclock, "tasks", "secret", `{"project_id":"p4","text":"before u1 joined"}`)))
	requireApplied(t, oc.push("hide", put(t, oclock, "tasks", "secret", `{"project_id":"p9","text":"private"}`)))
	res := oc.push("grant", put(t, oclock, "members", "m-u1-p4", `{"user":"u1","project_id":"p4"}`),
		put(t, oclock, "tasks", "t4", `{"project_id":"p4"}`),
		put(t, oclock, "tasks", "t2", `{"project_id":"p2"}`))
	requireApplied(t, res)
	granted = res[0].Seq
	res = oc.push("revoke", syncproto.Mutation{OpID: newOpID(t), Model: "members", Key: "m-u1-p2", Op: syncproto.OpDelete, HLC: oclock.Now()},
		put(t, oclock, "tasks", "t2b", `{"project_id":"p2","text":"after u1 left"}`))
	requireApplied(t, res)
	requireApplied(t, oc.push("end", put(t, oclock, "notes", "end", `{"n":1}`)))
	return cursor, granted, res[0].Seq
}

// TestScopedCatchUpReadsEachEntryWithTheGrantsAtItsSeq: a device that
// subscribes (or pulls) from a cursor behind membership changes is sent
// each entry of its catch-up only when its user held the entry's value at
// the entry's seq: not a row written to a value before the user was
// granted it (and moved away from it before the grant), nor a write to a
// value after the user lost it. The grant is backfilled at the seq it
// happened, the revocation evicts at its seq. (The grants read when the
// subscription started once decided the whole catch-up: the leak behind
// "entry of p4, not followed at its seq" in
// TestScopedDevicesReceiveExactlyTheirValues.)
func TestScopedCatchUpReadsEachEntryWithTheGrantsAtItsSeq(t *testing.T) {
	ts, owner := scopedServer(t, 0)
	oc, oclock := session(t, ts, owner, "owner")
	cursor, granted, revoked := grantWindow(t, oc, oclock)
	head := ts.head(t)
	tok := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "phone", User: "u1", Read: []string{"*"}, Write: []string{"*"}})

	// What u1 may read, seq by seq: the grant ends the first page (the
	// grant's own row is of a value not yet followed before it), p4 is
	// backfilled as of then, the revocation's delete is the last of p2.
	after := []string{
		fmt.Sprintf("%d tasks/t4 put p4", granted+1),
		fmt.Sprintf("%d tasks/t2 put p2", granted+2),
		fmt.Sprintf("%d members/m-u1-p2 delete p2", revoked),
		fmt.Sprintf("%d evict p2 revoked", revoked),
		fmt.Sprintf("%d notes/end put ", revoked+2),
	}
	backfilled := []string{"backfill members/m-u1-p4 p4", "backfill tasks/t4 p4"}
	for _, tc := range []struct {
		request syncproto.ScopeSet
		first   []string
	}{
		{syncproto.ScopeSet{"project": {"*"}}, nil},
		{syncproto.ScopeSet{"project": {"p2", "p4"}}, []string{fmt.Sprintf("%d evict p4 not_granted", granted)}},
	} {
		t.Run(fmt.Sprint("subscribe ", tc.request), func(t *testing.T) {
			c, _ := session(t, ts, tok, "phone")
			c.send(&syncproto.Subscribe{ID: "s", Cursor: cursor, Scopes: tc.request, Have: syncproto.ScopeSet{"project": {"p2"}}})
			got, _ := framesUntil(t, c, "s", head)
			var seen []string
			for _, msg := range got {
				switch m := msg.(type) {
				case *syncproto.Changes:
					seen = append(seen, changesLines(m)...)
				case *syncproto.Backfill:
					require.Equal(t, "p4", m.Value)
					require.GreaterOrEqual(t, m.At, granted)
					for _, e := range m.Entries {
						seen = append(seen, fmt.Sprintf("backfill %s/%s %s", e.Model, e.Key, e.ScopeValue))
					}
				default:
					t.Fatalf("unexpected %#v", msg)
				}
			}
			require.Equal(t, append(append(tc.first, backfilled...), after...), seen)
		})
	}

	t.Run("pull", func(t *testing.T) {
		c, _ := session(t, ts, tok, "phone")
		var seen []string
		for at := cursor; at < head; {
			c.send(&syncproto.Pull{ID: "q", Cursor: at, Limit: syncproto.MaxPullLimit, Scopes: syncproto.ScopeSet{"project": {"*"}}})
			ch := expect[*syncproto.Changes](c)
			require.Greater(t, ch.Cursor, at)
			seen = append(seen, changesLines(ch)...)
			at = ch.Cursor
		}
		require.Equal(t, after, seen, "a pull never backfills")
	})
}

// changesLines renders the entries and evictions of m, one line each.
func changesLines(m *syncproto.Changes) []string {
	var lines []string
	for _, e := range m.Entries {
		lines = append(lines, fmt.Sprintf("%d %s/%s %s %s", e.Seq, e.Model, e.Key, e.Op, e.ScopeValue))
	}
	for _, ev := range m.Evictions {
		lines = append(lines, fmt.Sprintf("%d evict %s %s", m.Cursor, ev.Value, ev.Reason))
	}
	return lines
}
