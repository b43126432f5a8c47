package synccore

import (
	"reflect"
	"strconv"
	"testing"

	"github.com/syncd-dev/syncd/syncproto"
)

// scoped returns a core welcomed at cursor 7 requesting project p1 and p2,
// holding p1 complete, with p2's backfill interrupted after "tasks/t3".
func scoped(t *testing.T) *Core {
	t.Helper()
	c := New(Config{InFlight: 2, MaxBatch: 2}, 7)
	acts := c.Step(Welcomed{Cursor: 7, Scopes: Scopes{
		Want:   syncproto.ScopeSet{"project": {"p1", "p2"}},
		Have:   syncproto.ScopeSet{"project": {"p1"}},
		Resume: map[string]map[string]string{"project": {"p2": "tasks/t3"}},
	}})
	want := Subscribe{After: 7, Scopes: syncproto.ScopeSet{"project": {"p1", "p2"}}, Have: syncproto.ScopeSet{"project": {"p1"}},
		Resume: map[string]map[string]string{"project": {"p2": "tasks/t3"}}}
	if subs := only[Subscribe](acts); len(subs) != 1 || !reflect.DeepEqual(subs[0], want) {
		t.Fatalf("subscribe on welcome = %#v, want %#v", subs, want)
	}
	c.Step(Page{Read: 1})
	return c
}

func statesOf(c *Core) map[string]ScopeState {
	out := map[string]ScopeState{}
	if s := c.Status().Scopes; s != nil {
		for _, v := range s.Values {
			out[v.Scope+"/"+v.Value] = v.State
		}
	}
	return out
}

func TestBackfillIsAppliedWithoutMovingTheCursor(t *testing.T) {
	c := scoped(t)
	if got := statesOf(c); !reflect.DeepEqual(got, map[string]ScopeState{"project/p1": ScopeReady, "project/p2": ScopeBackfilling}) {
		t.Fatalf("scope states = %v", got)
	}
	e := []syncproto.Change{{Seq: 3, Model: "tasks", Key: "t4", Op: syncproto.OpPut, Version: 1, ScopeValue: "p2"}}
	acts := c.Step(Backfill{Scope: "project", Value: "p2", Entries: e, LastKey: "tasks/t4"})
	fills := only[ApplyBackfill](acts)
	if len(fills) != 1 || fills[0].Done || fills[0].Scopes.Resume["project"]["p2"] != "tasks/t4" || c.Cursor() != 7 {
		t.Fatalf("first page: actions %#v, cursor %d: want the page stored with its resume position, cursor 7", acts, c.Cursor())
	}
	acts = c.Step(Backfill{Scope: "project", Value: "p2", LastKey: "tasks/t9", Done: true})
	fills = only[ApplyBackfill](acts)
	if len(fills) != 1 || !fills[0].Done || !fills[0].Scopes.Have.Has("project", "p2") || len(fills[0].Scopes.Resume) != 0 {
		t.Fatalf("last page: actions %#v: want p2 held and no resume position", acts)
	}
	if got := statesOf(c); got["project/p2"] != ScopeReady || len(only[Report](acts)) != 1 {
		t.Fatalf("scope states after the last page = %v, actions %#v: want p2 ready, reported", got, acts)
	}
	// A page of a value already complete (a repeat) changes nothing.
	if acts := c.Step(Backfill{Scope: "project", Value: "p2", Done: true}); len(acts) != 0 {
		t.Fatalf("repeated last page: actions %#v, want none", acts)
	}
	// The next subscribe says what is held.
	acts = c.Step(Changes{From: 9, Next: 10})
	if subs := only[Subscribe](acts); len(subs) != 1 || !subs[0].Have.Has("project", "p2") || subs[0].After != 7 {
		t.Fatalf("resubscribe after a gap = %#v, want have p1 and p2 from cursor 7", subs)
	}
}

func TestEvictionsLeaveTheHeldSet(t *testing.T) {
	c := scoped(t)
	ev := []syncproto.Eviction{{Scope: "project", Value: "p1", Reason: syncproto.EvictRevoked}, {Scope: "project", Value: "p2", Reason: syncproto.EvictNotGranted}}
	// A subscription's first frame may carry evictions alone, at the cursor.
	acts := c.Step(Changes{From: 7, Next: 7, Evictions: ev})
	apply := only[Apply](acts)
	if len(apply) != 1 || apply[0].Scopes == nil || len(apply[0].Scopes.Have) != 0 || len(apply[0].Scopes.Resume) != 0 || !reflect.DeepEqual(apply[0].Evictions, ev) {
		t.Fatalf("evictions at the cursor: actions %#v, want them applied and the state stored without p1 and p2", acts)
	}
	if got := statesOf(c); got["project/p1"] != ScopeRevoked || got["project/p2"] != ScopeNotGranted {
		t.Fatalf("scope states = %v, want p1 revoked, p2 not_granted", got)
	}
	// A frame without evictions stores no scope state.
	acts = c.Step(Changes{From: 7, Next: 8})
	if apply := only[Apply](acts); len(apply) != 1 || apply[0].Scopes != nil {
		t.Fatalf("plain frame: actions %#v, want an apply without scope state", acts)
	}
	// Granted again later, p2 is backfilled and ready.
	c.Step(Backfill{Scope: "project", Value: "p2", Done: true})
	if got := statesOf(c); got["project/p2"] != ScopeReady {
		t.Fatalf("scope states after p2's backfill = %v", got)
	}
}

func TestRescopeSubscribesFromTheSameCursor(t *testing.T) {
	c := scoped(t)
	c.Step(Changes{From: 7, Next: 12})
	acts := c.Step(Rescope{Want: syncproto.ScopeSet{"project": {"p1", "p3"}}})
	subs := only[Subscribe](acts)
	if len(subs) != 1 || subs[0].After != 12 || !reflect.DeepEqual(subs[0].Scopes, syncproto.ScopeSet{"project": {"p1", "p3"}}) || !subs[0].Have.Has("project", "p1") {
		t.Fatalf("rescope: actions %#v, want a subscribe from 12 with the new request and have p1", acts)
	}
	if got := statesOf(c); got["project/p3"] != ScopeBackfilling {
		t.Fatalf("scope states = %v, want p3 backfilling", got)
	}
	// Not welcomed: the request waits for the next welcome.
	c.Step(Disconnected{})
	if acts := c.Step(Rescope{Want: syncproto.ScopeSet{}}); len(only[Subscribe](acts)) != 0 {
		t.Fatalf("rescope while disconnected: actions %#v, want no subscribe", acts)
	}
}

func TestSnapshotSetsTheHeldSet(t *testing.T) {
	c := New(Config{}, 50)
	c.Step(Welcomed{Cursor: 50, Resync: true, Scopes: Scopes{Want: syncproto.ScopeSet{"project": {"*"}}, Resume: map[string]map[string]string{"project": {"p9": "tasks/x"}}}})
	acts := c.Step(Snapshot{Head: 60, Have: syncproto.ScopeSet{"project": {"p1"}}})
	subs := only[Subscribe](acts)
	if len(subs) != 1 || subs[0].After != 60 || !subs[0].Have.Has("project", "p1") || subs[0].Resume != nil {
		t.Fatalf("subscribe after the snapshot = %#v, want have p1 from 60, nothing to resume", subs)
	}
}

func TestLostValuesAreBounded(t *testing.T) {
	c := scoped(t)
	for i := range MaxLostScopes + 5 {
		v := "v" + uintString(uint64(i))
		c.Step(Changes{From: c.Cursor(), Next: c.Cursor(), Evictions: []syncproto.Eviction{{Scope: "project", Value: v, Reason: syncproto.EvictRevoked}}})
	}
	if n := len(c.lostScopes); n != MaxLostScopes || len(c.lostOrder) != MaxLostScopes {
		t.Fatalf("%d lost values kept (order %d), want %d", n, len(c.lostOrder), MaxLostScopes)
	}
	if _, ok := c.Status().Scopes.Of("project", "v0"); ok {
		t.Fatalf("the longest lost value is still reported")
	}
	if st, _ := c.Status().Scopes.Of("project", "v1004"); st != ScopeRevoked {
		t.Fatalf("the newest lost value is %q, want revoked", st)
	}
}

func uintString(n uint64) string { return strconv.FormatUint(n, 10) }

// The lost values are part of the durable state: a core started from it
// reports them before any welcome.
func TestLostValuesSurviveARestart(t *testing.T) {
	c := scoped(t)
	acts := c.Step(Changes{From: 7, Next: 7, Evictions: []syncproto.Eviction{{Scope: "project", Value: "p1", Reason: syncproto.EvictRevoked}}})
	apply := only[Apply](acts)
	if len(apply) != 1 || apply[0].Scopes == nil || apply[0].Scopes.Lost["project"]["p1"] != syncproto.EvictRevoked {
		t.Fatalf("actions %#v: want the revocation stored", acts)
	}
	again := New(Config{Scopes: *apply[0].Scopes}, 7)
	if st, _ := again.Status().Scopes.Of("project", "p1"); st != ScopeRevoked {
		t.Fatalf("restarted core reports p1 %q, want revoked", st)
	}
	if st, _ := again.Status().Scopes.Of("project", "p2"); st != ScopeBackfilling {
		t.Fatalf("restarted core reports p2 %q, want backfilling", st)
	}
}

// A device at cursor 0 that holds a backfilled value has synced: it
// subscribes (and learns what it lost) rather than loading a snapshot.
func TestBackfilledReplicaAtCursorZeroSubscribes(t *testing.T) {
	c := New(Config{}, 0)
	acts := c.Step(Welcomed{Cursor: 0, Head: 5, Scopes: Scopes{Want: syncproto.ScopeSet{"project": {"*"}}, Have: syncproto.ScopeSet{"project": {"p1"}}}})
	if len(only[Resync](acts)) != 0 || len(only[Subscribe](acts)) != 1 {
		t.Fatalf("actions %#v: want a subscribe from 0, no snapshot", acts)
	}
	c = New(Config{}, 0)
	if acts := c.Step(Welcomed{Cursor: 0, Head: 5, Scopes: Scopes{Want: syncproto.ScopeSet{"project": {"*"}}}}); len(only[Resync](acts)) != 1 {
		t.Fatalf("actions %#v: a replica that holds nothing loads a snapshot", acts)
	}
}
