package server_test

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/internal/fakeclock"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

func TestPushThenPullAndSubscribe(t *testing.T) {
	ts := startServer(t, server.Config{})
	phone, phoneClock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	laptop, _ := session(t, ts, ts.Member(t, "acme", "laptop"), "laptop")

	first := laptop.subscribe("s1", 0).(*syncproto.Changes)
	require.Empty(t, first.Entries, "nothing was written yet")
	require.False(t, first.More, "the first page says caught up")

	m1 := put(t, phoneClock, "notes", "n1", `{"text":"hi"}`)
	m2 := put(t, phoneClock, "notes", "n2", `[1, 2, 3]`)
	res := phone.push("p1", m1, m2)
	requireApplied(t, res)
	require.Equal(t, uint64(1), res[0].Version)
	require.Equal(t, uint64(1), res[0].Seq)
	require.Equal(t, m1.HLC, res[0].HLC)
	require.Equal(t, uint64(2), res[1].Seq)

	// The live feed delivers the other client's writes, in seq order.
	live := laptop.waitLive(2)
	require.Len(t, live, 2)
	require.Equal(t, m1.OpID, live[0].OpID)
	require.Equal(t, m2.OpID, live[1].OpID)
	require.JSONEq(t, `[1,2,3]`, string(live[1].Value))

	page := phone.pull("q1", 0)
	require.Len(t, page.Entries, 2)
	require.Equal(t, uint64(2), page.Cursor)
	require.Equal(t, uint64(2), page.Head)
	require.False(t, page.More)
	require.Equal(t, "n1", page.Entries[0].Key)
	require.JSONEq(t, `{"text":"hi"}`, string(page.Entries[0].Value))
	require.Equal(t, syncproto.OpPut, page.Entries[0].Op)

	after := phone.pull("q2", 1)
	require.Len(t, after.Entries, 1)
	require.Equal(t, uint64(2), after.Entries[0].Seq)

	// A delete is a tombstone: the version goes on, the feed says deleted.
	del := syncproto.Mutation{OpID: newOpID(t), Model: "notes", Key: "n1", Op: syncproto.OpDelete, HLC: phoneClock.Now()}
	res = phone.push("p2", del)
	requireApplied(t, res)
	require.Equal(t, uint64(2), res[0].Version)
	tomb := laptop.waitLive(3)[2]
	require.True(t, tomb.Deleted)
	require.Empty(t, tomb.Value)

	// Unsubscribe is answered by pong, and no changes follow it.
	laptop.send(&syncproto.Unsubscribe{ID: "u1"})
	require.Equal(t, "u1", expect[*syncproto.Pong](laptop).ID)
	laptop.subID = ""
	requireApplied(t, phone.push("p3", put(t, phoneClock, "notes", "n3", `3`)))
	require.Empty(t, laptop.barrier(), "no changes after unsubscribe")
}

func TestResendIsDuplicateWithOriginalResult(t *testing.T) {
	ts := startServer(t, server.Config{})
	token := ts.Member(t, "acme", "phone")
	phone, clock := session(t, ts, token, "phone")
	laptop, laptopClock := session(t, ts, ts.Member(t, "acme", "laptop"), "laptop")

	m := put(t, clock, "notes", "n1", `{"text":"first"}`)
	orig := phone.push("p1", m)[0]
	require.Equal(t, syncproto.StatusApplied, orig.Status)

	// The key moves on, so a second apply would show as a new version.
	requireApplied(t, laptop.push("l1", put(t, laptopClock, "notes", "n1", `{"text":"second"}`)))
	head := ts.head(t)

	// A resend on a new connection, as after a lost answer, whitespace
	// in the value and a fresh hlc notwithstanding.
	phone.conn.CloseNow()
	again, _ := session(t, ts, token, "phone")
	resend := m
	resend.Value = []byte(`{ "text" : "first" }`)
	resend.HLC = clock.Now()
	dup := again.push("p2", resend)[0]
	require.Equal(t, syncproto.StatusDuplicate, dup.Status)
	require.Equal(t, syncproto.StatusApplied, dup.OriginalStatus)
	require.Equal(t, orig.Version, dup.Version)
	require.Equal(t, orig.Seq, dup.Seq)
	require.Equal(t, orig.HLC, dup.HLC)
	require.Equal(t, m.OpID, dup.OpID)
	require.Equal(t, head, ts.head(t), "a duplicate appends nothing")

	// A superseded op is replayed with its winner; an op id twice in one
	// push is a resend at its second occurrence.
	old := syncproto.Mutation{OpID: newOpID(t), Model: "notes", Key: "n1", Op: syncproto.OpPut, Value: []byte(`"stale"`),
		HLC: syncproto.Timestamp{Wall: m.HLC.Wall - 1000, Origin: "phone"}}
	res := again.push("p3", old, old)
	require.Equal(t, syncproto.StatusSuperseded, res[0].Status)
	require.Equal(t, syncproto.StatusDuplicate, res[1].Status)
	require.Equal(t, syncproto.StatusSuperseded, res[1].OriginalStatus)
	require.Equal(t, res[0].Winner, res[1].Winner)
	require.JSONEq(t, `{"text":"second"}`, string(res[1].Winner.Value))
	require.Equal(t, head, ts.head(t))

	entries := ts.Oplog(t, "&tenant=acme")
	seen := map[string]int{}
	for _, e := range entries {
		seen[e.OpID]++
	}
	require.Equal(t, 1, seen[m.OpID], "applied once")
	require.Zero(t, seen[old.OpID], "a superseded write is not in the oplog")
}

func TestOptimisticRaceHasExactlyOneWinner(t *testing.T) {
	ts := startServer(t, server.Config{Policies: replication.Config{"accounts": syncproto.PolicyOptimistic}})
	a, aClock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	b, bClock := session(t, ts, ts.Member(t, "acme", "laptop"), "laptop")

	const rounds = 20
	winners := map[string]int{}
	for round := range uint64(rounds) {
		// Both writers start from the same version; both pushes are on the
		// wire before either answer is read, so the server decides the race.
		ma := putIf(t, aClock, "accounts", "acct-9", fmt.Sprintf(`{"balance":%d,"by":"a"}`, round), round)
		mb := putIf(t, bClock, "accounts", "acct-9", fmt.Sprintf(`{"balance":%d,"by":"b"}`, round), round)
		a.send(&syncproto.Push{ID: "pa", Mutations: []syncproto.Mutation{ma}})
		b.send(&syncproto.Push{ID: "pb", Mutations: []syncproto.Mutation{mb}})
		ra, rb := a.pushResult("pa", 1)[0], b.pushResult("pb", 1)[0]

		won, lost, winner := ra, rb, ma
		if rb.Status == syncproto.StatusApplied {
			won, lost, winner = rb, ra, mb
		}
		require.Equal(t, syncproto.StatusApplied, won.Status, "round %d: %+v / %+v", round, ra, rb)
		require.Equal(t, syncproto.StatusConflict, lost.Status, "round %d: exactly one applied", round)
		require.Equal(t, round+1, won.Version)
		require.NotNil(t, lost.Winner)
		require.Equal(t, won.Version, lost.Winner.Version, "the conflict carries the winner")
		require.Equal(t, won.HLC, lost.Winner.HLC)
		require.JSONEq(t, string(winner.Value), string(lost.Winner.Value))
		require.False(t, lost.Winner.Deleted)
		winners[winner.HLC.Origin]++
	}

	var versions []uint64
	for _, e := range ts.Oplog(t, "&tenant=acme&model=accounts") {
		versions = append(versions, e.Version)
	}
	want := make([]uint64, rounds)
	for i := range want {
		want[i] = uint64(i + 1)
	}
	require.Equal(t, want, versions, "versions per key increase by one, no gaps")

	var conflicts []adminapi.Conflict
	require.Equal(t, http.StatusOK, ts.adminGet(t, "/v1/admin/conflicts?tenant=acme&model=accounts", ts.adminToken, &conflicts))
	require.Len(t, conflicts, rounds, "every loser is logged")
	for _, c := range conflicts {
		require.Equal(t, syncproto.PolicyOptimistic, c.Policy)
	}
	t.Logf("winners by client: %v", winners)
}

func TestLWWHigherHLCWinsWhateverTheArrivalOrder(t *testing.T) {
	base := time.UnixMilli(1_733_140_000_000)
	ts := startServer(t, server.Config{Now: fakeclock.New(base).Now})
	// The phone's clock runs 30 s behind, within the skew bound.
	behind := fakeclock.New(base.Add(-30 * time.Second))
	phone := dial(t, ts, ts.Member(t, "acme", "phone"))
	phoneClock := syncproto.NewClock("phone", behind.Now)
	phone.hello("phone", 0, phoneClock)
	laptop := dial(t, ts, ts.Member(t, "acme", "laptop"))
	laptopClock := syncproto.NewClock("laptop", fakeclock.New(base).Now)
	laptop.hello("laptop", 0, laptopClock)

	// k1: the newer write arrives first; the older one loses on arrival.
	newer := put(t, laptopClock, "notes", "k1", `"laptop"`)
	older := put(t, phoneClock, "notes", "k1", `"phone"`)
	requireApplied(t, laptop.push("l1", newer))
	lost := phone.push("p1", older)[0]
	require.Equal(t, syncproto.StatusSuperseded, lost.Status)
	require.Equal(t, newer.HLC, lost.Winner.HLC)
	require.JSONEq(t, `"laptop"`, string(lost.Winner.Value))

	// k2: the older write arrives first and is overwritten by the newer.
	requireApplied(t, phone.push("p2", put(t, phoneClock, "notes", "k2", `"phone"`)))
	requireApplied(t, laptop.push("l2", put(t, laptopClock, "notes", "k2", `"laptop"`)))

	_, recs := ts.Snapshot(t, ts.Member(t, "acme", "reader"))
	require.Len(t, recs, 2)
	for _, r := range recs {
		require.JSONEq(t, `"laptop"`, string(r.Value), "key %s", r.Key)
		require.Equal(t, "laptop", r.HLC.Origin)
	}

	var conflicts []adminapi.Conflict
	require.Equal(t, http.StatusOK, ts.adminGet(t, "/v1/admin/conflicts?tenant=acme", ts.adminToken, &conflicts))
	require.Len(t, conflicts, 1)
	c := conflicts[0]
	require.Equal(t, syncproto.PolicyLWW, c.Policy)
	require.Equal(t, "k1", c.Key)
	require.Equal(t, older.OpID, c.Loser.OpID)
	require.Equal(t, older.HLC, c.Loser.HLC)
	require.JSONEq(t, `"phone"`, string(c.Loser.Value))
	require.Equal(t, newer.OpID, c.Winner.OpID)
}

func TestTimestampBeyondSkewBoundIsRefusedThenRestamped(t *testing.T) {
	now := time.UnixMilli(1_733_140_000_000)
	ts := startServer(t, server.Config{Now: fakeclock.New(now).Now, MaxClockSkew: 5 * time.Second})
	device := fakeclock.New(now.Add(time.Minute)) // a hand-set clock, a minute fast
	c := dial(t, ts, ts.Member(t, "acme", "phone"))
	clock := syncproto.NewClock("phone", device.Now)
	w := c.hello("phone", 0, clock)
	require.Equal(t, int64(5000), w.Limits.MaxClockSkewMS)
	require.Less(t, w.ServerHLC.Wall, now.Add(time.Second).UnixMilli(), "a hello from the future does not drag the server clock")

	m := put(t, clock, "notes", "n1", `"fast"`)
	res := c.push("p1", m)[0]
	require.Equal(t, syncproto.StatusRejected, res.Status)
	require.Equal(t, syncproto.CodeClockSkew, res.Code)
	require.Equal(t, m.OpID, res.OpID)
	require.Equal(t, uint64(0), ts.head(t), "nothing applied")
	_, found := ts.Decided(t, "acme", m.OpID)
	require.False(t, found, "a skew refusal is not recorded in the ledger")

	// The client corrects its clock and re-stamps the same op.
	device.Set(now.Add(time.Second))
	restamped := m
	restamped.HLC = syncproto.NewClock("phone", device.Now).Now()
	res = c.push("p2", restamped)[0]
	require.Equal(t, syncproto.StatusApplied, res.Status, "%+v", res)
	require.Equal(t, restamped.HLC, res.HLC)

	// The refused reading never reached the server's clock.
	w = dial(t, ts, ts.Member(t, "acme", "tablet")).hello("tablet", 0, syncproto.NewClock("tablet", fakeclock.New(now).Now))
	require.Less(t, w.ServerHLC.Wall, now.Add(5*time.Second).UnixMilli())
}

func TestTenantsCannotSeeOrTouchEachOther(t *testing.T) {
	ts := startServer(t, server.Config{})
	acmeToken := ts.Member(t, "acme", "phone")
	acme, acmeClock := session(t, ts, acmeToken, "phone")
	globexToken := ts.Member(t, "globex", "phone") // the same client id, another tenant
	globex, globexClock := session(t, ts, globexToken, "phone")

	require.Empty(t, acme.subscribe("s1", 0).(*syncproto.Changes).Entries)

	// The same model and key are different records in each tenant.
	mine := put(t, acmeClock, "notes", "shared", `"acme"`)
	r := acme.push("a1", mine)[0]
	require.Equal(t, uint64(1), r.Version)
	theirs := put(t, globexClock, "notes", "shared", `"globex"`)
	r = globex.push("g1", theirs)[0]
	require.Equal(t, syncproto.StatusApplied, r.Status)
	require.Equal(t, uint64(1), r.Version, "globex's write did not touch acme's record")

	// The ledger is per tenant too: globex may use acme's op id for its
	// own write, and it is a new decision, not op_id_reused.
	borrowed := put(t, globexClock, "notes", "other", `"globex"`)
	borrowed.OpID = mine.OpID
	require.Equal(t, syncproto.StatusApplied, globex.push("g2", borrowed)[0].Status)

	// Acme's feed holds acme's write, then its own marker: globex's
	// entries, committed in between, were never sent.
	marker := put(t, acmeClock, "notes", "marker", `"m"`)
	requireApplied(t, acme.push("a2", marker))
	feed := acme.waitLive(2)
	require.Equal(t, []string{mine.OpID, marker.OpID}, []string{feed[0].OpID, feed[1].OpID})

	for _, e := range acme.pull("q1", 0).Entries {
		require.NotEqual(t, `"globex"`, string(e.Value))
	}
	for _, e := range globex.pull("q2", 0).Entries {
		require.Equal(t, `"globex"`, string(e.Value), "globex sees only its own entries")
	}
	_, recs := ts.Snapshot(t, acmeToken)
	require.Len(t, recs, 2)
	for _, rec := range recs {
		require.NotEqual(t, `"globex"`, string(rec.Value))
	}
	_, recs = ts.Snapshot(t, globexToken)
	require.Len(t, recs, 2)
	for _, rec := range recs {
		require.Equal(t, `"globex"`, string(rec.Value))
	}
	_, found := ts.Decided(t, "globex", marker.OpID)
	require.False(t, found)
}

func TestModelScopeOfTokensLimitsTheFeed(t *testing.T) {
	ts := startServer(t, server.Config{})
	writer, clock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	readerToken := ts.Issue(t, readOnly("acme", "watch", "notes"))
	reader, _ := session(t, ts, readerToken, "watch")

	requireApplied(t, writer.push("p1",
		put(t, clock, "notes", "n1", `1`),
		put(t, clock, "secrets", "s1", `2`),
		put(t, clock, "notes", "n2", `3`)))
	page := reader.pull("q1", 0)
	require.Len(t, page.Entries, 2)
	for _, e := range page.Entries {
		require.Equal(t, "notes", e.Model)
	}
	require.Equal(t, uint64(3), page.Cursor, "the cursor skips entries the token may not read")
	_, recs := ts.Snapshot(t, readerToken)
	require.Len(t, recs, 2)
}

func TestSnapshotAndResyncAfterCompaction(t *testing.T) {
	ts := startServer(t, server.Config{
		Retention:         server.Retention{Oplog: replication.Retention{MaxEntries: 2, MaxAge: -1}},
		RetentionInterval: -1,
	})
	token := ts.Member(t, "acme", "phone")
	c, clock := session(t, ts, token, "phone")
	for i := range 5 {
		requireApplied(t, c.push(fmt.Sprintf("p%d", i), put(t, clock, "notes", fmt.Sprintf("n%d", i%3), fmt.Sprintf(`%d`, i))))
	}
	ts.runRetention(t)
	st := ts.Status(t)
	require.Equal(t, uint64(5), st.OplogHead)
	require.Equal(t, uint64(4), st.OplogOldest, "two entries retained")

	c.send(&syncproto.Pull{ID: "q1", Cursor: 2})
	rs := expect[*syncproto.Resync](c)
	require.Equal(t, "q1", rs.ID)
	require.Equal(t, syncproto.ResyncCursorExpired, rs.Reason)
	require.Equal(t, syncproto.SnapshotPath, rs.SnapshotURL)
	require.Equal(t, uint64(5), rs.Head)

	require.IsType(t, &syncproto.Resync{}, c.subscribe("s1", 0))

	// The oldest retained cursor still reads on.
	require.Len(t, c.pull("q2", 3).Entries, 2)

	// The snapshot holds every live key at the head; subscribe from there.
	head, recs := ts.Snapshot(t, token)
	require.Equal(t, uint64(5), head)
	got := map[string]string{}
	for _, r := range recs {
		got[r.Key] = string(r.Value)
	}
	require.Equal(t, map[string]string{"n0": "3", "n1": "4", "n2": "2"}, got)
	require.Empty(t, c.subscribe("s2", head).(*syncproto.Changes).Entries)
	m := put(t, clock, "notes", "n9", `9`)
	requireApplied(t, c.push("p9", m))
	live := c.waitLive(1)
	require.Len(t, live, 1)
	require.Equal(t, m.OpID, live[0].OpID)

	resp := syncdtest.Get(t, ts.url+syncproto.SnapshotPath, "")
	defer resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Equal(t, syncproto.CodeUnauthorized, httpErrorBody(t, resp).Code)
}

func TestRetentionJanitorCompactsOnItsInterval(t *testing.T) {
	ts := startServer(t, server.Config{
		Retention:         server.Retention{Oplog: replication.Retention{MaxEntries: 1, MaxAge: -1}},
		RetentionInterval: 5 * time.Millisecond,
	})
	c, clock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	requireApplied(t, c.push("p1", put(t, clock, "notes", "a", `1`), put(t, clock, "notes", "b", `2`), put(t, clock, "notes", "c", `3`)))
	require.Eventually(t, func() bool { return ts.Status(t).OplogOldest == 3 }, ioTimeout, 5*time.Millisecond)
}

func TestResendOlderThanTheLedgerIsExpired(t *testing.T) {
	ts := startServer(t, server.Config{Retention: server.Retention{LedgerMaxEntries: 1}, RetentionInterval: -1})
	c, clock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	first := put(t, clock, "notes", "a", `1`)
	requireApplied(t, c.push("p1", first))
	requireApplied(t, c.push("p2", put(t, clock, "notes", "b", `2`)))
	ts.runRetention(t)
	_, found := ts.Decided(t, "acme", first.OpID)
	require.False(t, found, "evicted")

	head := ts.head(t)
	res := c.push("p3", first)[0]
	require.Equal(t, syncproto.StatusExpired, res.Status, "%+v", res)
	require.Equal(t, head, ts.head(t), "never applied a second time")

	// welcome announces the floor the expiry was judged by.
	again := dial(t, ts, ts.Member(t, "acme", "phone"))
	w := again.hello("phone", 0, clock)
	require.Equal(t, first.HLC.Wall, w.LedgerFloorMS)
	other := dial(t, ts, ts.Member(t, "other", "phone"))
	require.Zero(t, other.hello("phone", 0, clock).LedgerFloorMS, "another tenant's floor is its own")
}

// Expiry means "the ledger may have forgotten this op", not "the op is
// old": a server that never evicted anything applies a write stamped long
// ago, and announces its retention and that it has no floor.
func TestOldWritesAreNotExpiredWithoutEviction(t *testing.T) {
	ts := startServer(t, server.Config{})
	c := dial(t, ts, ts.Member(t, "acme", "phone"))
	w := c.hello("phone", 0, syncproto.NewClock("phone", nil))
	require.Zero(t, w.LedgerFloorMS)
	require.Equal(t, (7 * 24 * time.Hour).Milliseconds(), w.Limits.LedgerRetentionMS)

	eightDaysAgo := syncproto.NewClock("phone", func() time.Time { return time.Now().Add(-8 * 24 * time.Hour) })
	requireApplied(t, c.push("p1", put(t, eightDaysAgo, "notes", "old", `1`)))
	epoch := syncproto.NewClock("phone", func() time.Time { return time.UnixMilli(1) })
	requireApplied(t, c.push("p2", put(t, epoch, "notes", "older", `1`)))
}

// A conditional write is checked under every policy (PROTOCOL.md section
// 8: "Under every policy, a write that carries base_version is first
// checked as under optimistic ..., and answered conflict when stale"): on
// an lww model, a stale put-if-version is a conflict even though its hlc
// is newer.
func TestConditionalWriteOnLWWModelIsRefusedWhenStale(t *testing.T) {
	ts := startServer(t, server.Config{})
	c, clock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	requireApplied(t, c.push("p1", put(t, clock, "notes", "n", `"v1"`)))
	requireApplied(t, c.push("p2", put(t, clock, "notes", "n", `"v2"`)))

	stale := putIf(t, clock, "notes", "n", `"based on v1"`, 1)
	res := c.push("p3", stale)[0]
	require.Equal(t, syncproto.StatusConflict, res.Status, "a put-if-version on an lww model: %+v", res)
	require.Equal(t, uint64(2), res.Winner.Version)
}

// Undeclared models: welcome says what happens to them (default_policy),
// lists only declared models, and a server started with default policy
// "none" refuses them invalid_model, as section 12 says.
func TestUndeclaredModelsFollowTheAnnouncedDefault(t *testing.T) {
	open := startServer(t, server.Config{Policies: replication.Config{"docs": syncproto.PolicyOptimistic}})
	c := dial(t, open, open.Member(t, "acme", "phone"))
	clock := syncproto.NewClock("phone", nil)
	w := c.hello("phone", 0, clock)
	require.Equal(t, syncproto.PolicyLWW, w.DefaultPolicy)
	require.Equal(t, []string{"docs"}, slices.Sorted(maps.Keys(w.Models)))
	requireApplied(t, c.push("p1", put(t, clock, "anything", "k", `1`)))

	strict := startServer(t, server.Config{Policies: replication.Config{"notes": syncproto.PolicyLWW, replication.AnyModel: syncproto.PolicyNone}})
	c = dial(t, strict, strict.Member(t, "acme", "phone"))
	w = c.hello("phone", 0, clock)
	require.Equal(t, syncproto.PolicyNone, w.DefaultPolicy)
	require.Equal(t, []string{"notes"}, slices.Sorted(maps.Keys(w.Models)))
	res := c.push("p1", put(t, clock, "notes", "k", `1`), put(t, clock, "anything", "k", `1`))
	require.Equal(t, syncproto.StatusApplied, res[0].Status)
	require.Equal(t, syncproto.StatusRejected, res[1].Status)
	require.Equal(t, syncproto.CodeInvalidModel, res[1].Code)
}
