package checker_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/soak/checker"
	"github.com/syncd-dev/syncd/soak/journal"
	"github.com/syncd-dev/syncd/syncproto"
)

// wireFixture is a run of scope project over tasks and members in which
// client a (user ua, its token granting p3) gains p1 by a membership row,
// loses it, and holds p3 while a task moves from p3 to p2:
//
//	seq 1  tasks/t1  put p1 (v1)           seq 5  tasks/t1  put p1 (v2)
//	seq 2  members/m put p1 for ua: grant  seq 6  tasks/t4  put p3 (v1)
//	seq 3  tasks/t2  put p1 (v1)           seq 7  tasks/t4  put p2 (v2): moved away
//	seq 4  members/m delete: revoke        seq 8  tasks/t5  put p2 (v1)
//
// a's journal holds what a careful server sends it: t1 and the membership
// row by p1's backfill read at seq 2, t2 from the feed, the revoking
// delete, t1's eviction, t4 from the feed and its eviction moved. At
// quiescence it follows p3 alone, which holds nothing, so its replica is
// empty.
func wireFixture() *checker.State {
	oplog := []checker.OplogEntry{
		scopedEntry(1, "tasks", "t1", "put", "p1", "", 1),
		scopedEntry(2, "members", "m", "put", "p1", "ua", 1),
		scopedEntry(3, "tasks", "t2", "put", "p1", "", 1),
		scopedEntry(4, "members", "m", "delete", "p1", "", 2),
		scopedEntry(5, "tasks", "t1", "put", "p1", "", 2),
		scopedEntry(6, "tasks", "t4", "put", "p3", "", 1),
		scopedEntry(7, "tasks", "t4", "put", "p2", "", 2),
		scopedEntry(8, "tasks", "t5", "put", "p2", "", 1),
	}
	oplog[1].Grants = []checker.GrantChange{{User: "ua", Scope: "project", Value: "p1", Held: true}}
	oplog[3].Grants = []checker.GrantChange{{User: "ua", Scope: "project", Value: "p1", Held: false}}
	oplog[3].ScopeOld = "p1"
	oplog[6].ScopeOld = "p3"
	s := scopedState(oplog,
		received("tasks", "t1", "put", "p1", 1, 2),
		received("members", "m", "put", "p1", 1, 2),
		received("tasks", "t2", "put", "p1", 1, 3),
		received("members", "m", "delete", "p1", 2, 4),
		evicted("tasks", "t1", "p1", syncproto.EvictRevoked, 4),
		evicted("tasks", "t2", "p1", syncproto.EvictRevoked, 4),
		received("tasks", "t4", "put", "p3", 1, 6),
		evicted("tasks", "t4", "p3", syncproto.EvictMoved, 7),
	)
	a := &s.Clients[0]
	a.Grants, a.Want, a.Replica.Cursor = syncproto.ScopeSet{"project": {"p3"}}, syncproto.ScopeSet{"project": {"*"}}, 7
	return s
}

// scopedEntry is an oplog entry of writer w in scope project: a put's
// value names project (and member, in members).
func scopedEntry(seq uint64, model, key, op, project, member string, version uint64) checker.OplogEntry {
	e := checker.OplogEntry{Seq: seq, Tenant: tenant, Model: model, Key: key, OpID: fmt.Sprintf("op-%d", seq), Op: op, Version: version,
		HLC: hlc(int64(1000+seq), "w"), ClientID: "w", ScopeValue: project, Member: member}
	if op == "put" {
		e.Value = journal.Value{Write: "w/" + key, Project: project, User: member}.Encode()
	}
	return e
}

// scopedState is a run of scope project over tasks and its membership
// model members whose oplog is oplog (its records each key's last entry),
// with one client, a of user ua, whose journal is lines and whose replica
// is empty.
func scopedState(oplog []checker.OplogEntry, lines ...journal.Entry) *checker.State {
	last := map[string]checker.OplogEntry{}
	var keys []string
	for _, e := range oplog {
		k := e.Model + "/" + e.Key
		if _, ok := last[k]; !ok {
			keys = append(keys, k)
		}
		last[k] = e
	}
	var records []checker.Record
	for _, k := range keys {
		e := last[k]
		records = append(records, checker.Record{Tenant: tenant, Model: e.Model, Key: e.Key, Value: e.Value, Version: e.Version, HLC: e.HLC,
			Deleted: e.Op == "delete", OpID: e.OpID, Seq: e.Seq, ScopeValue: e.ScopeValue, Member: e.Member})
	}
	head := oplog[len(oplog)-1].Seq
	ok := []string{"ok"}
	return &checker.State{
		Server: checker.Server{
			Scopes: []checker.Scope{{Name: "project", Models: []string{"tasks", "members"}, Membership: "members"}},
			Oplog:  oplog, Head: head, AppliedSeq: head, Records: records, Integrity: ok,
		},
		Clients: []checker.Client{{ID: "a", Tenant: tenant, Read: []string{"tasks", "members"}, User: "ua", Journal: lines,
			Queue: checker.Queue{Kind: checker.QueueSQLite, Integrity: ok}, Replica: checker.Replica{Integrity: ok, Outcomes: map[string]checker.Outcome{}}}},
	}
}

func received(model, key, op, project string, version, seq uint64) journal.Entry {
	return journal.Entry{Kind: journal.KindReceived, At: t0, Client: "a", Model: model, Key: key, Op: op, ScopeValue: project, Version: version, Seq: seq}
}

// insertBySeq adds a received line to c's journal where it would have
// been written: before the first line read at a later seq.
func insertBySeq(c *checker.Client, e journal.Entry) {
	i := slices.IndexFunc(c.Journal, func(l journal.Entry) bool { return l.Seq > e.Seq })
	if i < 0 {
		i = len(c.Journal)
	}
	c.Journal = slices.Insert(c.Journal, i, e)
}

func evicted(model, key, project, reason string, seq uint64) journal.Entry {
	return journal.Entry{Kind: journal.KindReceived, At: t0, Client: "a", Model: model, Key: key, Op: "evict", ScopeValue: project, Reason: reason, Seq: seq}
}

// The checker judges every row a client received at the seq the server
// read it at, with the grants of that seq: a row sent before its grant,
// after its revoke, or of a value moved away is a leak, named with the
// client, row, value and seq, even though each left the replica before
// quiescence.
func TestWireLeaksAreCaughtAtTheirSeq(t *testing.T) {
	v := converged(wireFixture())
	require.True(t, v.Holds, "a careful server's deliveries: %v", v.Evidence)
	require.Contains(t, strings.Join(v.Notes, "\n"), "at the wire: 5 rows of scoped models received by 1 clients judged")

	for name, tc := range map[string]struct {
		line     journal.Entry
		evidence string
	}{
		"a row received before its grant": {
			line:     received("tasks", "t1", "put", "p1", 1, 1),
			evidence: `a received tasks/t1 version 1 (put) of project "p1" at seq 1, when it did not follow that value (not granted to it, or not requested): a leak (evicted later at seq 4: revoked)`,
		},
		"a row received after its revoke": {
			line:     received("tasks", "t1", "put", "p1", 2, 5),
			evidence: `a received tasks/t1 version 2 (put) of project "p1" at seq 5, when it did not follow that value`,
		},
		"a row of a value moved away, sent as it is now": {
			line:     received("tasks", "t4", "put", "p2", 2, 7),
			evidence: `a received tasks/t4 version 2 (put) of project "p2" at seq 7, when it did not follow that value`,
		},
		"a row of a value moved away, sent as it was": {
			line:     received("tasks", "t4", "put", "p3", 1, 8),
			evidence: `a received tasks/t4 version 1 (put) whose key had moved to project "p2" (seq 7) at seq 8, when it did not follow that value`,
		},
		"a delete of a value never held": {
			line:     received("tasks", "t5", "delete", "p2", 1, 8),
			evidence: `a received tasks/t5 version 1 (delete) of project "p2" at seq 8`,
		},
		"a row sent under a value the oplog did not write": {
			line:     received("tasks", "t5", "put", "p3", 1, 8),
			evidence: `a received tasks/t5 version 1 (put) at seq 8 with scope value "p3", but the oplog wrote it (seq 8) with "p2"`,
		},
		"a row sent before its version was written": {
			line:     received("tasks", "t2", "put", "p1", 1, 2),
			evidence: `a received tasks/t2 version 1 (put) at seq 2, before the oplog wrote that version (seq 3)`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := wireFixture()
			insertBySeq(&s.Clients[0], tc.line)
			v := converged(s)
			require.False(t, v.Holds)
			require.Contains(t, strings.Join(v.Evidence, "\n"), tc.evidence)
		})
	}

	// A value requested by name is followed only when requested: a grant
	// held but not requested does not cover a row.
	s := wireFixture()
	s.Clients[0].Want = syncproto.ScopeSet{"project": {"p3"}}
	v = converged(s)
	require.False(t, v.Holds)
	require.Contains(t, strings.Join(v.Evidence, "\n"), `a received tasks/t1 version 1 (put) of project "p1" at seq 2`)
}

// An oplog compacted from the front is judged from its floor on: rows
// received before it are not judged and the verdict says so, the grants at
// the floor come from the records and the retained entries (and, for a row
// whose earlier entries are gone, the grant changes the server recorded),
// and a leak after the floor is still caught.
func TestWireLeaksJudgedOnlyWhereTheOplogCovers(t *testing.T) {
	compact := func(s *checker.State) {
		s.Server.Oplog = s.Server.Oplog[3:] // seqs 4..8 retained
		insertBySeq(&s.Clients[0], received("tasks", "t1", "put", "p1", 1, 1))
	}
	s := wireFixture()
	compact(s)
	v := converged(s)
	require.True(t, v.Holds, "%v", v.Evidence)
	notes := strings.Join(v.Notes, "\n")
	require.Contains(t, notes, "4 rows received at seqs before 4, which the compacted oplog no longer covers, were not judged")
	require.Contains(t, notes, "1 membership rows' state before the oplog's floor was taken from the server's recorded grant changes")
	require.Contains(t, notes, "at the wire: 2 rows of scoped models received by 1 clients judged")

	s = wireFixture()
	compact(s)
	insertBySeq(&s.Clients[0], received("tasks", "t1", "put", "p1", 2, 5))
	v = converged(s)
	require.False(t, v.Holds)
	require.Contains(t, strings.Join(v.Evidence, "\n"), `a received tasks/t1 version 2 (put) of project "p1" at seq 5, when it did not follow that value`)
}

// What cannot be judged at the wire is said: resyncs and a lagging
// subscription.
func TestWireGapsAreNoted(t *testing.T) {
	s := wireFixture()
	a := &s.Clients[0]
	a.Journal = append(a.Journal, journal.Entry{Kind: journal.KindResync, Client: "a", Seq: 8}, journal.Entry{Kind: journal.KindLagged, Client: "a"})
	v := converged(s)
	require.True(t, v.Holds, "%v", v.Evidence)
	notes := strings.Join(v.Notes, "\n")
	require.Contains(t, notes, "1 resyncs: 0 rows of their snapshots judged at the snapshot's head")
	require.Contains(t, notes, "1 times a client's change subscription lagged")
}

// A membership row that moves from one value to another takes its user's
// grant along at the seq of the move; a re-grant after a delete counts
// from its own seq.
func TestWireGrantsFollowMembershipRowsThatMove(t *testing.T) {
	build := func(lines ...journal.Entry) *checker.State {
		return scopedState([]checker.OplogEntry{
			scopedEntry(1, "members", "m", "put", "p1", "ua", 1),
			scopedEntry(2, "tasks", "t", "put", "p1", "", 1),
			scopedEntry(3, "members", "m", "put", "p2", "ua", 2), // ua: p1 lost, p2 gained
			scopedEntry(4, "tasks", "t", "put", "p2", "", 2),
			scopedEntry(5, "members", "m", "delete", "p2", "", 3), // p2 lost
			scopedEntry(6, "tasks", "u", "put", "p3", "", 1),
			scopedEntry(7, "members", "m", "put", "p2", "ua", 4), // p2 again
			scopedEntry(8, "tasks", "u", "put", "p2", "", 2),
			scopedEntry(9, "members", "m", "delete", "p2", "", 5),
		}, lines...)
	}
	v := converged(build(
		received("members", "m", "put", "p1", 1, 1),
		received("tasks", "t", "put", "p1", 1, 2),
		received("members", "m", "put", "p2", 2, 3),
		received("tasks", "t", "put", "p2", 2, 4),
		received("tasks", "u", "put", "p2", 2, 8),
	))
	require.True(t, v.Holds, "%v", v.Evidence)

	for name, tc := range map[string]struct {
		line     journal.Entry
		evidence string
	}{
		"the value the row moved away from":   {received("tasks", "t", "put", "p1", 1, 4), `a received tasks/t version 1 (put) of project "p1" at seq 4`},
		"between the delete and the re-grant": {received("tasks", "t", "put", "p2", 2, 6), `a received tasks/t version 2 (put) of project "p2" at seq 6`},
	} {
		t.Run(name, func(t *testing.T) {
			v := converged(build(tc.line))
			require.False(t, v.Holds)
			require.Contains(t, strings.Join(v.Evidence, "\n"), tc.evidence)
		})
	}

	// A snapshot read at seq 6, when ua held nothing, is judged there: a
	// row of p2 in it is a leak, unless a later line (p2's backfill once
	// granted again at seq 7) shows the row came with it.
	resync := journal.Entry{Kind: journal.KindResync, Client: "a", Seq: 6}
	snap := received("tasks", "t", "put", "p2", 2, 6)
	snap.Kind = journal.KindSnapshot
	v = converged(build(resync, snap, received("tasks", "t", "put", "p2", 2, 7)))
	require.True(t, v.Holds, "%v", v.Evidence)
	require.Contains(t, strings.Join(v.Notes, "\n"), "1 resyncs: 0 rows of their snapshots judged at the snapshot's head")
	v = converged(build(resync, snap))
	require.False(t, v.Holds)
	require.Contains(t, strings.Join(v.Evidence, "\n"), `a received tasks/t version 2 (in a snapshot) of project "p2" at seq 6, when it did not follow that value`)
}
