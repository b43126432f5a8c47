package server_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// The rows of TestDeviceMovesMidBackfillMissesAndRepeatsNothing: keys
// k0000.. of which every eighth is of p2 and the rest of p1, so p1 takes
// four backfill pages and rows of p2 sit on both sides of any page's end.
const (
	midRows  = 4000
	midEvery = 8
)

// TestDeviceMovesMidBackfillMissesAndRepeatsNothing: a device backfilling
// p1 (3,500 rows, four pages) loses its connection after the first page
// it read, twice, and each time resumes on another connection (to the
// next node of a 3-node cluster; to the same node on a single one) with
// the cursor of the frames it read and the last page's last_key. Between
// the connections, and while the last one backfills, rows move: into and
// out of p1 on both sides of the page's end, are updated and deleted. Every
// row the device receives, by backfill or by the feed, is counted per key
// and version across the connections: no backfill row twice, no feed entry
// twice, a row in both a backfill page and the feed at one version only
// for a write made while the backfill ran (the protocol's merge by
// version), every row written before it exactly once; the replica ends
// equal to the server's records of p1: nothing missing, nothing extra.
func TestDeviceMovesMidBackfillMissesAndRepeatsNothing(t *testing.T) {
	inBothModes(t, func(t *testing.T) { midBackfillRun(t, 7) })
}

// receipt is one row a device received: by backfill or by the feed.
type receipt struct {
	backfill bool
	version  uint64
	seq      uint64
	conn     int
}

func midBackfillRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 21))
	ts, owner := scopedServer(t, 0)
	grant := syncproto.ScopeSet{"project": {"p1"}}
	r := &scaleRun{t: t, nodes: ts.each(), grants: grantLog{}, history: map[string][]scopeAt{}}
	r.tokens = map[string]string{tokenKey("phone", grant["project"]): ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "phone", User: "u1",
		Read: []string{"*"}, Write: []string{"*"}, Scopes: grant})}
	r.awaitTokenFile()
	oc, oclock := session(t, ts, owner, "owner")

	scope := map[string]string{} // key -> value, live rows
	push := func(id string, muts []syncproto.Mutation) {
		res := oc.pushResending(id, muts...)
		requireApplied(t, res)
		r.wrote(muts, res)
	}
	row := func(key, value string) syncproto.Mutation {
		scope[key] = value
		return put(t, oclock, "tasks", key, fmt.Sprintf(`{"project_id":%q,"n":%d}`, value, rng.IntN(1000)))
	}
	for start := 0; start < midRows; start += 200 {
		var muts []syncproto.Mutation
		for i := start; i < start+200; i++ {
			value := "p1"
			if i%midEvery == 0 {
				value = "p2"
			}
			muts = append(muts, row(fmt.Sprintf("k%04d", i), value))
		}
		push(fmt.Sprint("bulk", start), muts)
	}
	start := ts.head(t)
	// churn writes, around the position last (a last_key, "tasks/kNNNN"):
	// rows of p1 and p2 moved into and out of p1 on both sides of it, a
	// row of p1 updated beyond it, one deleted on each side.
	churn := func(id, last string) {
		pick := func(value string, before bool) string {
			for {
				k := fmt.Sprintf("k%04d", rng.IntN(midRows))
				if scope[k] == value && ("tasks/"+k < last) == before {
					return k
				}
			}
		}
		var muts []syncproto.Mutation
		for _, before := range []bool{true, false} {
			muts = append(muts, row(pick("p1", before), "p2"), row(pick("p2", before), "p1"))
			del := pick("p1", before)
			delete(scope, del)
			muts = append(muts, syncproto.Mutation{OpID: newOpID(t), Model: "tasks", Key: del, Op: syncproto.OpDelete, HLC: oclock.Now()})
		}
		muts = append(muts, row(pick("p1", false), "p1"))
		push(id, muts)
	}

	d := &scaleDevice{name: "phone", user: "u1", wanted: grant, token: grant, tok: r.tokens[tokenKey("phone", grant["project"])],
		clock: syncproto.NewClock("phone", nil), cursor: start, replica: map[string]replicaRow{}, have: syncproto.ScopeSet{},
		resume: map[string]string{}, pushes: map[string]uint64{}}
	got := map[string][]receipt{} // model/key -> every receipt, in order
	tally := func(conn int, frames []syncproto.Message) {
		for _, msg := range frames {
			switch m := msg.(type) {
			case *syncproto.Backfill:
				for _, e := range m.Entries {
					k := e.Model + "/" + e.Key
					got[k] = append(got[k], receipt{backfill: true, version: e.Version, seq: e.Seq, conn: conn})
				}
			case *syncproto.Changes:
				for _, e := range m.Entries {
					if e.Model == "tasks" {
						k := e.Model + "/" + e.Key
						got[k] = append(got[k], receipt{version: e.Version, seq: e.Seq, conn: conn})
					}
				}
			}
		}
	}
	// open connects d to node and subscribes from its cursor with what it
	// holds and where its backfill stopped.
	open := func(node int) *wsClient {
		c := dial(t, r.nodes[node], d.tok)
		c.hello(d.name, d.cursor, d.clock)
		sub := &syncproto.Subscribe{ID: "s", Cursor: d.cursor, Scopes: d.wanted}
		if len(d.have) > 0 {
			sub.Have = cloneScopeSet(d.have)
		}
		if len(d.resume) > 0 {
			sub.Resume = map[string]map[string]string{"project": maps.Clone(d.resume)}
		}
		c.send(sub)
		return c
	}
	// Two connections cut after their first backfill page, each followed
	// by writes around where the backfill stopped.
	pages := 0
	for conn := range 2 {
		c := open(conn % len(r.nodes))
		var frames []syncproto.Message
		for {
			msg := c.recv()
			frames = append(frames, msg)
			if b, ok := msg.(*syncproto.Backfill); ok {
				require.False(t, b.Done, "connection %d: p1 done after one page", conn)
				pages++
				break
			}
		}
		c.conn.CloseNow()
		tally(conn, frames)
		d.in = frames
		r.check(d)
		require.NotEmpty(t, d.resume["p1"], "connection %d left p1 unfinished", conn)
		churn(fmt.Sprint("churn", conn), d.resume["p1"])
	}
	// The last connection resumes, and rows move while it backfills.
	c := open(2 % len(r.nodes))
	churn("churn2", d.resume["p1"])
	push("end", []syncproto.Mutation{put(t, oclock, "notes", "end", `{"n":1}`)})
	head := ts.head(t)
	var frames []syncproto.Message
	for done, top := false, uint64(0); !done || top < head; {
		msg := c.recv()
		frames = append(frames, msg)
		switch m := msg.(type) {
		case *syncproto.Backfill:
			pages++
			done = done || m.Done
		case *syncproto.Changes:
			top = max(top, m.Cursor)
		}
	}
	c.conn.CloseNow()
	tally(2, frames)
	d.in = frames
	r.check(d)
	require.Equal(t, syncproto.ScopeSet{"project": {"p1"}}, d.have, "p1 complete")

	// Nothing repeated.
	overlaps := 0
	for k, rs := range got {
		byBackfill, byFeed := map[uint64]receipt{}, map[uint64]receipt{}
		for _, x := range rs {
			seen := byFeed
			if x.backfill {
				seen = byBackfill
			}
			prev, twice := seen[x.version]
			require.False(t, twice, "%s at version %d received twice (backfill %v): connections %d and %d", k, x.version, x.backfill, prev.conn, x.conn)
			seen[x.version] = x
		}
		for v, x := range byBackfill {
			if f, both := byFeed[v]; both {
				require.Greater(t, x.seq, start, "%s at version %d by backfill (connection %d) and by the feed (connection %d), written before the backfill began", k, v, x.conn, f.conn)
				overlaps++
			}
		}
		if len(r.history[k]) == 1 && scope[k[len("tasks/"):]] == "p1" {
			require.Len(t, rs, 1, "%s, never written after the backfill began, received once", k)
		}
	}
	// Nothing missing, nothing extra.
	head = ts.head(t)
	want := map[string]replicaRow{}
	for k, row := range scopedRecords(t, ts, owner, head) {
		if row.scope == "p1" {
			want[k] = row
		}
	}
	require.Equal(t, want, d.rows(), "the device holds the server's records of p1")
	live := 0
	for _, v := range scope {
		if v == "p1" {
			live++
		}
	}
	require.Len(t, want, live)
	t.Logf("%d rows of p1 over %d backfill pages on 3 connections; %d rows received by backfill and by the feed at one version (written during the backfill)", len(want), pages, overlaps)
}
