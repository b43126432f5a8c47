package server_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// pushOn sends a push on c from a goroutine of its own and returns its
// results, or the error that ended the wait.
func pushOn(c *wsClient, id string, muts []syncproto.Mutation) ([]syncproto.Result, error) {
	if err := c.trySend(&syncproto.Push{ID: id, Mutations: muts}); err != nil {
		return nil, err
	}
	msg, err := c.tryRecv()
	if err != nil {
		return nil, err
	}
	pr, ok := msg.(*syncproto.PushResult)
	if !ok || pr.ID != id {
		return nil, fmt.Errorf("want the answer to %s, got %#v", id, msg)
	}
	return pr.Results, nil
}

// TestScopedRacesEndEqualToTheFilteredServer: seeded rounds on one node,
// and on one node of a 3-node cluster. A round grants a value (a
// membership row) or revokes it. A grant and a write to the granted value
// (in either order) are pipelined on one connection behind a filler push,
// so that they land in one group: one group commit on a single node, one
// command of the stream on a cluster (the edge publishes a client's
// batches that wait behind its unacknowledged command together); the test
// reads which group each landed in (the committer's group histogram, the
// command stream) and requires it of every grant on a single node, of
// most on a cluster (there the filler's acknowledgement may come before
// the pushes behind it arrive). The device then moves (to the next node
// of a cluster; reconnects to a single one), resuming the value's
// backfill, while a row moves into or out of the value and a row of a
// value held before moves to one not held (an evict entry). A revocation
// races, on two connections, a write to the value and a move, while the
// device's own write to the value is in flight; then the device moves.
// Every value has 1,200 rows, so a backfill spans two pages. The device
// (membership grants only, requesting every value) checks every frame as
// the scale test does (nothing of a value at a seq it did not follow it,
// no backfill row twice), and every round ends with its replica equal to
// the server's records it follows at the head: nothing missing, nothing
// extra.
func TestScopedRacesEndEqualToTheFilteredServer(t *testing.T) {
	inBothModes(t, func(t *testing.T) {
		// A cluster node's rounds replicate through NATS: fewer of them,
		// and fewer seeds, keep it within a minute or two. Under the race
		// detector one seed each; make test (make scale) runs them all
		// without.
		seeds, rounds := []uint64{1, 2, 3}, 14
		if clusterMode(t) {
			seeds, rounds = []uint64{1, 2}, 10
		}
		seeds = seeds[:underRace(len(seeds), 1)]
		for _, seed := range seeds {
			t.Run(fmt.Sprint("seed ", seed), func(sub *testing.T) {
				defer inheritMode(t, sub)()
				scopedRaceRun(sub, seed, rounds)
			})
		}
	})
}

func scopedRaceRun(t *testing.T, seed uint64, rounds int) {
	const bulk = 6000
	rng := rand.New(rand.NewPCG(seed, 4))
	values := []string{"p0", "p1", "p2", "p3", "p4"}
	ts, owner := scopedServer(t, 0)
	r := &scaleRun{t: t, nodes: ts.each(), grants: grantLog{}, history: map[string][]scopeAt{}}
	// Every token before anything connects (a cluster's nodes share the
	// token file: see issueTokens).
	phone := auth.Principal{Tenant: "acme", ClientID: "phone", User: "u1", Read: []string{"*"}, Write: []string{"*"}}
	r.tokens = map[string]string{tokenKey("phone", nil): ts.Issue(t, phone)}
	writer := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "writer", User: "owner", Read: []string{"*"}, Write: []string{"*"},
		Scopes: map[string][]string{"project": {"*"}}})
	r.awaitTokenFile()
	oc, oclock := session(t, ts, owner, "owner")
	wc, wclock := session(t, ts, writer, "writer")
	tasks := map[string]string{}
	record := func(muts []syncproto.Mutation, res []syncproto.Result) {
		require.Len(t, res, len(muts))
		r.wrote(muts, res)
		for i, m := range muts {
			if m.Model == "members" {
				v := struct{ User, Project_ID string }{User: "u1", Project_ID: strings.TrimPrefix(m.Key, "m-u1-")}
				if m.Op == syncproto.OpPut {
					require.NoError(t, json.Unmarshal(m.Value, &v))
				}
				r.grants[v.User+"/"+v.Project_ID] = append(r.grants[v.User+"/"+v.Project_ID], grantEvent{seq: res[i].Seq, held: m.Op == syncproto.OpPut})
			}
		}
	}
	var rows []syncproto.Mutation
	for i := range bulk {
		key := fmt.Sprintf("bulk%04d", i)
		tasks[key] = values[i%len(values)]
		rows = append(rows, put(t, oclock, "tasks", key, fmt.Sprintf(`{"project_id":%q}`, tasks[key])))
	}
	res := oc.pushPipelined("bulk", rows, 100)
	requireApplied(t, res)
	record(rows, res)
	d := &scaleDevice{name: "phone", user: "u1", wanted: syncproto.ScopeSet{"project": {"*"}}, clock: syncproto.NewClock("phone", nil),
		cursor: ts.head(t), replica: map[string]replicaRow{}, have: syncproto.ScopeSet{}, resume: map[string]string{}, pushes: map[string]uint64{}}
	r.connect(d, nil)
	t.Cleanup(func() {
		d.conn.CloseNow()
		<-d.done
	})
	held := map[string]bool{}
	moveOf := func(value string) syncproto.Mutation {
		// A row moved into value, or out of it, at random.
		for {
			key := fmt.Sprintf("bulk%04d", rng.IntN(bulk))
			old := tasks[key]
			switch {
			case old == value:
				tasks[key] = values[(slices.Index(values, value)+1+rng.IntN(len(values)-1))%len(values)]
			case rng.IntN(2) == 0:
				tasks[key] = value
			default:
				continue
			}
			return put(t, wclock, "tasks", key, fmt.Sprintf(`{"project_id":%q,"moved":true}`, tasks[key]))
		}
	}
	// moveOut moves a row of a value held before this round (not
	// value) to a value not held: the device, holding that row, must be
	// told it moved (an evict entry).
	moveOut := func(value string) (syncproto.Mutation, bool) {
		var from, to []string
		for _, v := range values {
			switch {
			case v == value:
			case held[v]:
				from = append(from, v)
			default:
				to = append(to, v)
			}
		}
		if len(from) == 0 || len(to) == 0 {
			return syncproto.Mutation{}, false
		}
		src, dst := from[rng.IntN(len(from))], to[rng.IntN(len(to))]
		for {
			key := fmt.Sprintf("bulk%04d", rng.IntN(bulk))
			if tasks[key] == src {
				tasks[key] = dst
				return put(t, wclock, "tasks", key, fmt.Sprintf(`{"project_id":%q,"moved":true}`, dst)), true
			}
		}
	}
	g := &groups{ts: ts}
	grantRounds, arrangedRounds, oneGroup, outcomes := 0, 0, 0, map[string]int{}
	// moveDevice moves the device: to the next node of a cluster, or
	// reconnects it to its one node, resuming what it left (a backfill
	// the round's grant started, often).
	resumed := 0
	leave := func() {
		r.disconnect(d)
		if len(d.resume) > 0 {
			resumed++
		}
	}
	rejoin := func() {
		d.node = (d.node + 1) % len(r.nodes)
		r.connect(d, nil)
	}
	moveDevice := func() {
		leave()
		rejoin()
	}
	// settle ends a round: a row no scope covers is written last; once
	// the device, reconnected first by rejoin if it was away, read up to
	// it and finished the backfills it is owed, its replica, built from
	// its frames alone, is the server's records it follows at that head:
	// nothing missing, nothing extra.
	settle := func(round int, rejoin func()) {
		requireApplied(t, oc.pushResending(fmt.Sprint("end", round), put(t, oclock, "notes", "end", fmt.Sprintf(`{"n":%d}`, round))))
		head := ts.head(t)
		if rejoin != nil {
			rejoin()
		}
		r.settle(d, head, values)
		want := map[string]replicaRow{}
		for k, row := range scopedRecords(t, ts, owner, head) {
			if d.mayRead(r.grants, row.scope, head) {
				want[k] = row
			}
		}
		require.Equal(t, want, d.rows(), "round %d: the device holds the server's records it follows", round)
	}
	for round := range rounds {
		value := values[rng.IntN(len(values))]
		key := "m-u1-" + value
		wkey, wvalue := fmt.Sprintf("w%02d", rng.IntN(20)), fmt.Sprintf(`{"project_id":%q,"round":%d}`, value, round)
		if !held[value] {
			// A grant and a write to the value in one group, then a move
			// while the value's backfill runs.
			held[value] = true
			grantRounds++
			pair := []syncproto.Mutation{put(t, oclock, "members", key, fmt.Sprintf(`{"user":"u1","project_id":%q}`, value)), put(t, oclock, "tasks", wkey, wvalue)}
			if rng.IntN(2) == 0 {
				pair[0], pair[1] = pair[1], pair[0]
			}
			res, one, arranged := g.pipelined(t, oc, oclock, fmt.Sprint("r", round), pair)
			record(pair, res)
			if arranged {
				arrangedRounds++
				if one {
					oneGroup++
				}
			}
			// Every third grant round the device is away through the
			// round's writes and subscribes after its end was written:
			// its first page reaches the head, and the backfill it is
			// owed comes after it.
			late := grantRounds%3 == 0
			if late {
				leave()
			} else {
				moveDevice()
			}
			moves := []syncproto.Mutation{moveOf(value)}
			if m, ok := moveOut(value); ok {
				moves = append(moves, m)
			}
			res = wc.pushResending(fmt.Sprint("m", round), moves...)
			requireApplied(t, res)
			record(moves, res)
			if late {
				settle(round, rejoin)
			} else {
				settle(round, nil)
			}
			continue
		}
		// A revocation, racing a write to the value and a move on another
		// connection, while the device's own write to the value is in
		// flight.
		held[value] = false
		revoke := syncproto.Mutation{OpID: newOpID(t), Model: "members", Key: key, Op: syncproto.OpDelete, HLC: oclock.Now()}
		writes := []syncproto.Mutation{put(t, wclock, "tasks", wkey, wvalue), moveOf(value)}
		own := []syncproto.Mutation{put(t, d.clock, "tasks", fmt.Sprintf("own%02d", rng.IntN(10)), fmt.Sprintf(`{"project_id":%q,"round":%d}`, value, round))}
		id := fmt.Sprint("own", round)
		d.pushes[id] = ts.head(t)
		frame, err := syncproto.Encode(&syncproto.Push{ID: id, Mutations: own})
		require.NoError(t, err)
		require.NoError(t, d.conn.Write(t.Context(), websocket.MessageText, frame))
		var wg sync.WaitGroup
		var gres, wres []syncproto.Result
		var gerr, werr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			gres, gerr = pushOn(oc, fmt.Sprint("g", round), []syncproto.Mutation{revoke})
		}()
		go func() { defer wg.Done(); wres, werr = pushOn(wc, fmt.Sprint("w", round), writes) }()
		wg.Wait()
		require.NoError(t, gerr)
		require.NoError(t, werr)
		requireApplied(t, gres)
		requireApplied(t, wres)
		record([]syncproto.Mutation{revoke}, gres)
		record(writes, wres)
		// The device's write is answered on this connection: applied, or
		// refused forbidden_scope when the revocation came first.
		res := d.answer(t, id)
		outcomes[string(res[0].Status)+" "+string(res[0].Code)]++
		require.True(t, res[0].Status == syncproto.StatusApplied || res[0].Code == syncproto.CodeForbiddenScope, "%+v", res[0])
		r.wrote(own, res)
		moveDevice()
		settle(round, nil)
	}
	t.Logf("%d grants, %d arranged in one group with the write, %d landed there; %d moves resumed a backfill; the device's writes: %v",
		grantRounds, arrangedRounds, oneGroup, resumed, outcomes)
	require.Positive(t, grantRounds)
	if len(r.nodes) == 1 {
		// Held, the committer takes the pushes into the filler's group;
		// on a loaded machine a pair now and then still lands in two
		// groups (seen in CI, 1 of 8 or 9 rounds; its cause is not known).
		require.GreaterOrEqual(t, 2*arrangedRounds, grantRounds, "most grants were arranged with their write")
		require.GreaterOrEqual(t, 2*oneGroup, arrangedRounds, "most grants arranged with their write landed in one group commit")
	} else {
		// The edge publishes the pushes behind the filler together only
		// when both arrived before the filler's command was acknowledged:
		// most of the time, not always.
		require.GreaterOrEqual(t, 2*oneGroup, grantRounds, "most grants and their write landed in one command")
	}

	r.disconnect(d)
	require.Equal(t, len(d.pushes), d.answers, "every push of the device answered")
	t.Logf("holds %v: %d rows", d.have, len(d.rows()))
}

// pushPipelined sends muts in pushes of per mutations (ids id-0, id-1...),
// at most pipelineDepth of them unanswered, and returns the results in
// muts' order. A cluster's edge publishes a client's pushes that wait
// behind its unacknowledged command together, so bulk rows take a few
// commands rather than one round trip each.
func (c *wsClient) pushPipelined(id string, muts []syncproto.Mutation, per int) []syncproto.Result {
	c.t.Helper()
	var pushes []*syncproto.Push
	for start := 0; start < len(muts); start += per {
		pushes = append(pushes, &syncproto.Push{ID: fmt.Sprint(id, "-", len(pushes)), Mutations: muts[start:min(len(muts), start+per)]})
	}
	var res []syncproto.Result
	for i, p := range pushes {
		if i == 0 {
			for _, q := range pushes[:min(pipelineDepth, len(pushes))] {
				c.send(q)
			}
		}
		res = append(res, c.pushResult(p.ID, len(p.Mutations))...)
		if next := i + pipelineDepth; next < len(pushes) {
			c.send(pushes[next])
		}
	}
	return res
}

// pipelineDepth bounds the pushes pushPipelined keeps unanswered: a
// cluster node under -race on a loaded machine answers a command of a few
// hundred rows well within the harness's 10 s per frame.
const pipelineDepth = 4

// answer waits for the answer to d's push id on its connection and returns
// its results.
func (d *scaleDevice) answer(t *testing.T, id string) []syncproto.Result {
	t.Helper()
	var res []syncproto.Result
	require.Eventually(t, func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, m := range d.in {
			if pr, ok := m.(*syncproto.PushResult); ok && pr.ID == id {
				res = pr.Results
				return true
			}
		}
		return d.err != nil
	}, 30*time.Second, 2*time.Millisecond, "%s's push %s is answered", d.name, id)
	require.NotNil(t, res, "%s's connection ended before the answer to %s", d.name, id)
	return res
}

// rows is d's replica without tombstones.
func (d *scaleDevice) rows() map[string]replicaRow {
	got := map[string]replicaRow{}
	for k, row := range d.replica {
		if row.value != "" {
			got[k] = row
		}
	}
	return got
}

// groups tells which pushes a node decided in one group: on a single
// node, one group commit (the committer's histogram of pushes per group);
// on a cluster node, one command of the stream (the edge's group publish,
// which every node applies in one transaction).
type groups struct {
	ts *testServer
	js jetstream.Stream // a cluster's command stream
	db *sql.DB          // a single node's database, to hold its write lock
}

// fillerRows is the size of the push pipelined ahead of a group: long
// enough to publish that the pushes behind it arrive meanwhile and wait
// together.
const fillerRows = 100

// pipelined sends, on c without waiting, a filler push (notes no scope
// covers) and then each of muts as a push of its own, and returns their
// results (in muts' order) and whether muts were decided in one group.
// On a single node the committer is held (holdWriter) on a one-row push
// of its own, taken alone, until the filler and muts' pushes wait in its
// line: that push's group ends there (its tenant drained its line, the
// drained rule of internal/fairshare), and the next one takes the filler
// in one turn and muts in the tenant's next, one group. On a cluster,
// while the filler's command is unacknowledged the edge holds the
// client's later batches, which then share the next command.
//
// arranged says whether the single node's committer was seen taking the
// held push alone and then holding the rest in its line before it went
// on (always true on a cluster, where nothing arranges it): a machine so
// loaded that the pushes did not arrive within the hold (bounded below
// the database's busy timeout) arranges nothing.
func (g *groups) pipelined(t *testing.T, c *wsClient, clock *syncproto.Clock, id string, muts []syncproto.Mutation) (res []syncproto.Result, one, arranged bool) {
	t.Helper()
	var filler []syncproto.Mutation
	for i := range fillerRows {
		filler = append(filler, put(t, clock, "notes", fmt.Sprintf("filler%03d", i), fmt.Sprintf(`{"n":%q}`, id)))
	}
	before := g.mark(t)
	pushes := []*syncproto.Push{{ID: id + "-filler", Mutations: filler}}
	for i, m := range muts {
		pushes = append(pushes, &syncproto.Push{ID: fmt.Sprint(id, "-", i), Mutations: []syncproto.Mutation{m}})
	}
	release := func() {}
	arranged = true
	single := len(g.ts.nodes) == 1
	metricReaches := func(metric string, want float64) bool {
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if g.ts.MetricValue(t, metric) == want {
				return true
			}
		}
		return false
	}
	if single {
		release = g.holdWriter(t)
		const served = `syncd_commit_served_mutations_total{tenant="acme"}`
		held := &syncproto.Push{ID: id + "-held", Mutations: []syncproto.Mutation{put(t, clock, "notes", "held", fmt.Sprintf(`{"n":%q}`, id))}}
		taken := g.ts.MetricValue(t, served) + 1
		c.send(held)
		arranged = metricReaches(served, taken)
		pushes = append([]*syncproto.Push{held}, pushes...)
	}
	for _, p := range pushes[len(pushes)-1-len(muts):] {
		c.send(p)
	}
	if single {
		// The committer took the held push and waits for the write lock;
		// once the filler and muts' pushes wait in its line, it may go on.
		arranged = metricReaches(`syncd_commit_queued_mutations{tenant="acme"}`, float64(fillerRows+len(muts))) && arranged
	}
	release()
	for i, p := range pushes {
		pr := c.pushResult(p.ID, len(p.Mutations))
		requireApplied(t, pr)
		if i >= len(pushes)-len(muts) {
			res = append(res, pr...)
		}
	}
	one, alone := g.oneGroup(t, before, muts)
	return res, one, arranged && alone
}

// holdWriter takes the single node's database write lock on a connection
// of its own and returns what releases it (once; later calls do nothing).
// Meanwhile the committer, having taken a push, waits for the lock (up to
// the database's busy timeout, sqlitedb.DefaultBusyTimeout) and the pushes
// that arrive queue behind it.
func (g *groups) holdWriter(t *testing.T) func() {
	t.Helper()
	if g.db == nil {
		db, err := sqlitedb.Open(t.Context(), g.ts.DataPath, sqlitedb.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		g.db = db
	}
	conn, err := g.db.Conn(t.Context())
	require.NoError(t, err)
	_, err = conn.ExecContext(t.Context(), "BEGIN IMMEDIATE")
	require.NoError(t, err)
	var once sync.Once
	return func() {
		once.Do(func() {
			_, err := conn.ExecContext(context.Background(), "ROLLBACK")
			require.NoError(t, err)
			require.NoError(t, conn.Close())
		})
	}
}

// mark is where the node's groups are before a pipeline: the single
// node's count of groups and pushes, or the stream's last sequence.
func (g *groups) mark(t *testing.T) [2]float64 {
	t.Helper()
	if len(g.ts.nodes) == 1 {
		return [2]float64{g.ts.MetricValue(t, "syncd_commit_group_pushes_count"), g.ts.MetricValue(t, "syncd_commit_group_pushes_sum")}
	}
	if g.js == nil {
		js, err := jetstream.New(g.ts.NATS(t))
		require.NoError(t, err)
		g.js, err = js.Stream(t.Context(), cluster.StreamName)
		require.NoError(t, err)
	}
	info, err := g.js.Info(t.Context())
	require.NoError(t, err)
	return [2]float64{float64(info.State.LastSeq)}
}

// oneGroup reports whether every one of muts, pushed since before, was
// decided in one group. On a single node nothing else commits meanwhile:
// the held push was taken alone, so muts' pushes are in one group exactly
// when the committer counted two groups of the four or more pushes.
func (g *groups) oneGroup(t *testing.T, before [2]float64, muts []syncproto.Mutation) (one, alone bool) {
	t.Helper()
	if len(g.ts.nodes) == 1 {
		// Another push committed meanwhile (seen at load; whose is not
		// known) leaves the histogram unable to tell: not arranged.
		after := g.mark(t)
		pushes := after[1] - before[1]
		require.GreaterOrEqual(t, pushes, float64(2+len(muts)), "pushes committed meanwhile")
		return after[0]-before[0] == 2, pushes == float64(2+len(muts))
	}
	want := map[string]bool{}
	for _, m := range muts {
		want[m.OpID] = true
	}
	info, err := g.js.Info(t.Context())
	require.NoError(t, err)
	for seq := uint64(before[0]) + 1; seq <= info.State.LastSeq; seq++ {
		msg, err := g.js.GetMsg(t.Context(), seq)
		require.NoError(t, err)
		var cmd cluster.Command
		require.NoError(t, json.Unmarshal(msg.Data, &cmd))
		in := 0
		for _, b := range cmd.Batches {
			for _, w := range b.Writes {
				if want[w.Mutation.OpID] {
					in++
				}
			}
		}
		if in > 0 {
			return in == len(muts), true
		}
	}
	t.Fatalf("no command of the stream after %d holds the pushes", uint64(before[0]))
	return false, false
}
