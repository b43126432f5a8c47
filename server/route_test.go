package server_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// The feed router (route.go) wakes a subscription only for the entries
// that concern it. These tests hold it to the feed's guarantees over real
// websockets: every entry, evict entry and grant change a subscription
// must receive reaches it, under concurrent writers, on a single node and
// on a cluster node.

// pushAll sends each batch through c, one after another, and returns the
// first error (a connection failure or a result other than applied). It
// uses no require, so writer goroutines may run it.
func pushAll(c *wsClient, name string, batches [][]syncproto.Mutation) error {
	for i, muts := range batches {
		id := fmt.Sprintf("%s-%d", name, i)
		frame, err := syncproto.Encode(&syncproto.Push{ID: id, Mutations: muts})
		if err != nil {
			return err
		}
		if err := c.tryWrite(websocket.MessageText, frame); err != nil {
			return err
		}
		for answered := false; !answered; {
			frame, err := c.next()
			if err != nil {
				return fmt.Errorf("push %s: %w", id, err)
			}
			msg, err := syncproto.Decode(frame)
			if err != nil {
				return err
			}
			pr, ok := msg.(*syncproto.PushResult)
			if !ok || pr.ID != id {
				continue
			}
			for j, r := range pr.Results {
				if r.Status != syncproto.StatusApplied {
					return fmt.Errorf("push %s result %d: %+v", id, j, r)
				}
			}
			answered = true
		}
	}
	return nil
}

// writer is a principal of tenant acme that may write every model and
// value, as clientID.
func writer(t testing.TB, ts *testServer, clientID string) (*wsClient, *syncproto.Clock) {
	t.Helper()
	tok := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: clientID, User: "owner", Read: []string{"*"}, Write: []string{"*"},
		Scopes: map[string][]string{"project": {"*"}, "site": {"*"}}})
	return session(t, ts, tok, clientID)
}

// randomTasks returns n batches of 5 writes of one writer (keys prefix-k0
// to prefix-k14, so rows are rewritten and moved between values p0 to p9;
// one write in ten a delete, one in ten a note of no scope).
func randomTasks(t testing.TB, rng *rand.Rand, clock *syncproto.Clock, prefix string, n int) [][]syncproto.Mutation {
	t.Helper()
	batches := make([][]syncproto.Mutation, n)
	live := map[string]bool{} // tasks written and not deleted
	for i := range batches {
		for range 5 {
			key := fmt.Sprintf("%s-k%d", prefix, rng.IntN(15))
			var m syncproto.Mutation
			switch r := rng.IntN(10); {
			case r == 0:
				m = put(t, clock, "notes", key, fmt.Sprintf(`{"n":%d}`, i))
			case r == 1 && live[key]:
				m = put(t, clock, "tasks", key, "null")
				m.Op, m.Value = syncproto.OpDelete, nil
				live[key] = false
			default:
				m = put(t, clock, "tasks", key, fmt.Sprintf(`{"project_id":"p%d","n":%d}`, rng.IntN(10), i))
				live[key] = true
			}
			batches[i] = append(batches[i], m)
		}
	}
	return batches
}

// randomWriters opens n writer sessions and returns them with each one's
// randomTasks of batches batches.
func randomWriters(t testing.TB, ts *testServer, rng *rand.Rand, n, batches int) ([]*wsClient, [][][]syncproto.Mutation) {
	t.Helper()
	clients := make([]*wsClient, n)
	work := make([][][]syncproto.Mutation, n)
	for w := range n {
		var clock *syncproto.Clock
		clients[w], clock = writer(t, ts, fmt.Sprint("writer", w))
		work[w] = randomTasks(t, rng, clock, fmt.Sprint("w", w), batches)
	}
	return clients, work
}

// startWriters runs each writer's batches in its own goroutine and returns
// a channel that yields the first error (or nil) once all are done.
func startWriters(clients []*wsClient, batches [][][]syncproto.Mutation) <-chan error {
	done := make(chan error, 1)
	var wg sync.WaitGroup
	errs := make(chan error, len(clients))
	for i, c := range clients {
		wg.Go(func() { errs <- pushAll(c, fmt.Sprint("w", i), batches[i]) })
	}
	go func() {
		wg.Wait()
		close(errs)
		var first error
		for err := range errs {
			if first == nil {
				first = err
			}
		}
		done <- first
	}()
	return done
}

// routedEntry is what a device received of one oplog entry.
type routedEntry struct {
	Seq uint64
	Op  syncproto.Op
	Key string
}

// expectedFeed returns, for a device of tenant acme reading models with
// follow set follow, every entry after cursor it must receive, in order:
// entries of models of no scope, entries whose new scope value it
// follows, and evict entries for those moving a row out of its values.
func expectedFeed(t testing.TB, ts *testServer, cursor uint64, models []string, follow syncproto.ScopeSet) []routedEntry {
	t.Helper()
	scopeOf := map[string]string{} // key -> scope value before the entry
	var want []routedEntry
	for _, e := range ts.Oplog(t, "&tenant=acme") {
		old := scopeOf[e.Model+"/"+e.Key]
		scopeOf[e.Model+"/"+e.Key] = e.ScopeValue
		if e.Seq <= cursor || !slices.Contains(models, e.Model) {
			continue
		}
		switch {
		case e.Model == "notes" || follow.Has("project", e.ScopeValue):
			want = append(want, routedEntry{e.Seq, e.Op, e.Key})
		case old != "" && follow.Has("project", old):
			want = append(want, routedEntry{e.Seq, syncproto.OpEvict, e.Key})
		}
	}
	return want
}

// readFeed reads c's frames of subscription id until n entries arrived
// and returns them; a frame of another kind fails the test.
func readFeed(t testing.TB, c *wsClient, id string, n int) []routedEntry {
	t.Helper()
	var got []routedEntry
	for len(got) < n {
		msg := c.recv()
		ch, ok := msg.(*syncproto.Changes)
		require.True(t, ok, "want changes, got %#v after %d entries of %d", msg, len(got), n)
		require.Equal(t, id, ch.ID)
		for _, e := range ch.Entries {
			got = append(got, routedEntry{e.Seq, e.Op, e.Key})
		}
	}
	return got
}

// Under four concurrent writers moving rows between ten values, each
// device receives exactly the entries and evict entries of its values
// (and of its unscoped models), in seq order, nothing more: a device
// following three values, one value of one model, every value, and a
// device reading only a model of no scope.
func TestRoutedFeedDeliversEveryEntryOfItsValues(t *testing.T) {
	ts, _ := scopedServer(t, 0)
	rng := rand.New(rand.NewPCG(21, 5))
	// Each device reads members too: a welcome to a principal reading a
	// scope's models but not its membership model fails to encode
	// (replication.Scopes.Info), a fault outside the router.
	type device struct {
		name   string
		models []string
		grants []string
		follow syncproto.ScopeSet // nil: a subscription without scopes
		c      *wsClient
	}
	devices := []*device{
		{name: "three", models: []string{"tasks", "members", "notes"}, grants: []string{"p0", "p1", "p2"}, follow: syncproto.ScopeSet{"project": {"p0", "p1", "p2"}}},
		{name: "one", models: []string{"tasks", "members"}, grants: []string{"p3"}, follow: syncproto.ScopeSet{"project": {"p3"}}},
		{name: "every", models: []string{"tasks", "members", "notes"}, grants: []string{syncproto.AllValues}, follow: syncproto.ScopeSet{"project": {syncproto.AllValues}}},
		{name: "notes", models: []string{"notes"}},
	}
	head := ts.head(t)
	for _, d := range devices {
		p := auth.Principal{Tenant: "acme", ClientID: d.name, User: d.name, Read: d.models}
		if d.grants != nil {
			p.Scopes = map[string][]string{"project": d.grants}
		}
		d.c, _ = session(t, ts, ts.Issue(t, p), d.name)
		have := d.follow // nothing written yet: every value is held complete
		if d.follow.All("project") {
			have = nil // followed whole, never backfilled
		}
		d.c.send(&syncproto.Subscribe{ID: "s-" + d.name, Cursor: head, Scopes: d.follow, Have: have})
		first := expect[*syncproto.Changes](d.c)
		require.Empty(t, first.Entries)
		require.Empty(t, first.Evictions)
	}
	clients, batches := randomWriters(t, ts, rng, 4, 30)
	require.NoError(t, <-startWriters(clients, batches))

	for _, d := range devices {
		follow := d.follow
		if follow == nil {
			follow = syncproto.ScopeSet{}
		}
		want := expectedFeed(t, ts, head, d.models, follow)
		require.NotEmpty(t, want, d.name)
		got := readFeed(t, d.c, "s-"+d.name, len(want))
		require.Equal(t, want, got, d.name)
	}
}

// replica is a device's copy of the rows of scoped models it holds: key
// to version, scope value per key, applied by version as PROTOCOL.md 19.4 and 19.5 say.
type replica struct {
	version map[string]uint64
	value   map[string]string
}

func newReplica() *replica {
	return &replica{version: map[string]uint64{}, value: map[string]string{}}
}

func (r *replica) apply(e syncproto.Change, backfill bool) {
	if e.Op != syncproto.OpEvict && e.ScopeValue == "" {
		return // a model of no scope: not compared
	}
	k := e.Model + "/" + e.Key
	if backfill && r.version[k] >= e.Version && r.version[k] != 0 {
		return
	}
	switch e.Op {
	case syncproto.OpPut:
		r.version[k], r.value[k] = e.Version, e.ScopeValue
	case syncproto.OpDelete, syncproto.OpEvict:
		delete(r.version, k)
		delete(r.value, k)
	}
}

func (r *replica) evict(value string) {
	for k, v := range r.value {
		if v == value {
			delete(r.version, k)
			delete(r.value, k)
		}
	}
}

// serverRows returns the live rows of tenant acme whose scope value is one
// of values, key to version, read from the server's snapshot.
func serverRows(t testing.TB, ts *testServer, owner string, values []string) map[string]uint64 {
	t.Helper()
	_, recs := ts.Snapshot(t, owner)
	out := map[string]uint64{}
	for _, rec := range recs {
		if !rec.Deleted && rec.ScopeValue != "" && slices.Contains(values, rec.ScopeValue) {
			out[rec.Model+"/"+rec.Key] = rec.Version
		}
	}
	return out
}

// follower reads one device's feed, applying it to its replica, and keeps
// what it holds complete (have) and its cursor.
type follower struct {
	c      *wsClient
	rep    *replica
	have   map[string]bool
	cursor uint64
}

// step reads one frame and applies it.
func (f *follower) step(t testing.TB) {
	t.Helper()
	switch m := f.c.recv().(type) {
	case *syncproto.Changes:
		for _, e := range m.Entries {
			f.rep.apply(e, false)
		}
		for _, ev := range m.Evictions {
			f.rep.evict(ev.Value)
			delete(f.have, ev.Value)
		}
		f.cursor = max(f.cursor, m.Cursor)
	case *syncproto.Backfill:
		for _, e := range m.Entries {
			f.rep.apply(e, true)
		}
		if m.Done {
			f.have[m.Value] = true
		}
	default:
		t.Fatalf("unexpected frame %#v", m)
	}
}

// until reads frames until the replica holds exactly want, or no frame
// comes for ioTimeout (the test fails, showing both).
func (f *follower) until(t testing.TB, want func() map[string]uint64) {
	t.Helper()
	w := want()
	for range 100_000 {
		if maps.Equal(f.rep.version, w) {
			return
		}
		f.step(t)
	}
	require.Equal(t, w, f.rep.version)
}

// While writers move rows between values: a device following every value
// granted through membership rows gains and loses grants (the owner
// writes and deletes its membership rows), and a device changes its
// requested set three times (new subscribe with its cursor and have).
// Both end holding exactly the server's rows of their values.
func TestRoutedFeedFollowsGrantsAndSetChanges(t *testing.T) {
	ts, owner := scopedServer(t, 0)
	rng := rand.New(rand.NewPCG(21, 8))
	head := ts.head(t)

	alice, _ := session(t, ts, ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "alice-phone", User: "alice", Read: []string{"*"}}), "alice-phone")
	alice.send(&syncproto.Subscribe{ID: "a", Cursor: head, Scopes: syncproto.ScopeSet{"project": {syncproto.AllValues}}})
	af := &follower{c: alice, rep: newReplica(), have: map[string]bool{}}

	bob, _ := session(t, ts, ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "bob-phone", User: "bob", Read: []string{"*"},
		Scopes: map[string][]string{"project": {"*"}}}), "bob-phone")
	bobSets := [][]string{{"p0"}, {"p0", "p1"}, {"p1", "p2"}, {"p2", "p3", "p7"}}
	bob.send(&syncproto.Subscribe{ID: "b0", Cursor: head, Scopes: syncproto.ScopeSet{"project": bobSets[0]}})
	bf := &follower{c: bob, rep: newReplica(), have: map[string]bool{}, cursor: head}

	clients, batches := randomWriters(t, ts, rng, 3, 40)
	// The membership writer: alice gains p1, p2, p5, loses p1, gains p1
	// again, loses p2, one push at a time, between the others' writes.
	mc, mclock := writer(t, ts, "membership")
	member := func(p string, held bool) []syncproto.Mutation {
		m := put(t, mclock, "members", "alice-"+p, fmt.Sprintf(`{"user":"alice","project_id":%q}`, p))
		if !held {
			m.Op, m.Value = syncproto.OpDelete, nil
		}
		return []syncproto.Mutation{m}
	}
	grants := [][]syncproto.Mutation{member("p1", true), member("p2", true), member("p5", true), member("p1", false), member("p1", true), member("p2", false)}
	aliceHolds := []string{"p1", "p5"}
	var paced [][]syncproto.Mutation
	for i, g := range grants {
		paced = append(paced, g)
		// Unrelated writes between grant changes, so the grants spread
		// over the writers' run.
		for j := range 5 {
			paced = append(paced, []syncproto.Mutation{put(t, mclock, "notes", fmt.Sprintf("m%d-%d", i, j), `{}`)})
		}
	}
	clients = append(clients, mc)
	batches = append(batches, paced)
	done := startWriters(clients, batches)

	// Bob changes his set while the writers run, once each earlier set's
	// backfills are in.
	for i := 1; i < len(bobSets); i++ {
		for !bf.haveAll(bobSets[i-1]) {
			bf.step(t)
		}
		have := syncproto.ScopeSet{"project": slices.Sorted(maps.Keys(bf.have))}
		bob.send(&syncproto.Subscribe{ID: fmt.Sprint("b", i), Cursor: bf.cursor, Scopes: syncproto.ScopeSet{"project": bobSets[i]}, Have: have})
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
	}
	require.NoError(t, <-done)

	for !bf.haveAll(bobSets[len(bobSets)-1]) {
		bf.step(t)
	}
	bf.until(t, func() map[string]uint64 { return serverRows(t, ts, owner, bobSets[len(bobSets)-1]) })
	require.Equal(t, map[string]bool{"p2": true, "p3": true, "p7": true}, bf.have)
	af.until(t, func() map[string]uint64 { return serverRows(t, ts, owner, aliceHolds) })
}

// haveAll reports whether f holds every value of values complete.
func (f *follower) haveAll(values []string) bool {
	for _, v := range values {
		if !f.have[v] {
			return false
		}
	}
	return true
}

// The same guarantees on a node of a 3-node cluster, whose materializer
// applies the writes (the router reads them from its log).
func TestRoutedFeedOnAClusterNode(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"DeliversEveryEntryOfItsValues", TestRoutedFeedDeliversEveryEntryOfItsValues},
		{"FollowsGrantsAndSetChanges", TestRoutedFeedFollowsGrantsAndSetChanges},
		{"SkipsWhatIsNotForIt", TestRoutedFeedSkipsWhatIsNotForIt},
	} {
		runInCluster(t, tc.name, tc.test, true) // each mostly waits for its cluster
	}
}

// A subscription no write concerns is not woken, yet stands at the head:
// the admin API reports its cursor at the head (not behind by every write
// of others), and when a compaction removed only others' entries after
// its cursor, the next entry for it arrives as changes, not as resync.
func TestRoutedFeedSkipsWhatIsNotForIt(t *testing.T) {
	ts := startServer(t, server.Config{Scopes: projectScopes(t),
		Retention: server.Retention{Oplog: replication.Retention{MaxEntries: 5, MaxAge: -1}}, RetentionInterval: -1})
	quiet, _ := session(t, ts, ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "quiet", User: "quiet", Read: []string{"*"},
		Scopes: map[string][]string{"project": {"p0"}}}), "quiet")
	head := ts.head(t)
	quiet.send(&syncproto.Subscribe{ID: "q", Cursor: head, Scopes: syncproto.ScopeSet{"project": {"p0"}}, Have: syncproto.ScopeSet{"project": {"p0"}}})
	first := expect[*syncproto.Changes](quiet)
	require.Equal(t, head, first.Cursor)

	w, clock := writer(t, ts, "writer")
	last := putTasks(t, w, clock, "p1", "other", 30)
	cursorOf := func(clientID string) uint64 {
		var sessions []adminapi.Session
		ts.Admin(t, adminapi.PathSessions, &sessions)
		for _, s := range sessions {
			if s.ClientID == clientID {
				return s.Cursor
			}
		}
		t.Fatalf("no session of %s", clientID)
		return 0
	}
	require.Eventually(t, func() bool { return cursorOf("quiet") == last }, ioTimeout, 10*time.Millisecond,
		"the admin API reports the quiet subscription at the head %d", last)

	ts.runRetention(t)
	require.Greater(t, ts.Status(t).OplogFloor, head, "compaction removed entries after the quiet subscription's last frame")
	mine := putTasks(t, w, clock, "p0", "mine", 1)
	ch := expect[*syncproto.Changes](quiet)
	require.Equal(t, "q", ch.ID)
	require.Len(t, ch.Entries, 1)
	require.Equal(t, mine, ch.Entries[0].Seq)
	require.Equal(t, mine, ch.Cursor)
	// The session records its cursor once its write returned, which may be
	// a moment after the client read the frame.
	require.Eventually(t, func() bool { return cursorOf("quiet") == mine }, ioTimeout, 10*time.Millisecond,
		"the admin API reports the quiet subscription at its last frame %d", mine)
}
