package server_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// projectScopes declares scope project over tasks and members (by
// project_id; members grants to its user member) and scope site over
// visits.
func projectScopes(t testing.TB) *replication.Scopes {
	t.Helper()
	s := &replication.Scopes{}
	require.NoError(t, s.Set("project=tasks.project_id,members.project_id"))
	require.NoError(t, s.SetMembership("project=members:user"))
	require.NoError(t, s.Set("site=visits.site"))
	return s
}

// scopedServer starts syncd with projectScopes and returns it with the
// token of an owner of tenant acme who may read and write everything.
func scopedServer(t testing.TB, maxValues int) (*testServer, string) {
	t.Helper()
	ts := startServer(t, server.Config{Scopes: projectScopes(t), MaxScopeValues: maxValues})
	owner := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "owner", User: "owner", Read: []string{"*"}, Write: []string{"*"},
		Scopes: map[string][]string{"project": {"*"}, "site": {"*"}}})
	return ts, owner
}

// putTasks writes n tasks of project p (keys prefix-0000...) through c and
// returns the seq of the last one.
func putTasks(t testing.TB, c *wsClient, clock *syncproto.Clock, p, prefix string, n int) uint64 {
	t.Helper()
	var last uint64
	for start := 0; start < n; start += syncproto.MaxBatch {
		var muts []syncproto.Mutation
		for i := start; i < min(n, start+syncproto.MaxBatch); i++ {
			muts = append(muts, put(t, clock, "tasks", fmt.Sprintf("%s-%04d", prefix, i), fmt.Sprintf(`{"project_id":%q,"n":%d}`, p, i)))
		}
		res := c.push(fmt.Sprintf("w-%s-%d", prefix, start), muts...)
		requireApplied(t, res)
		last = res[len(res)-1].Seq
	}
	return last
}

func TestScopesWelcomeListsDeclarationsGrantsAndTheLimit(t *testing.T) {
	ts, owner := scopedServer(t, 0)
	oc, oclock := session(t, ts, owner, "owner")
	requireApplied(t, oc.push("m", put(t, oclock, "members", "m1", `{"user":"alice","project_id":"p2"}`),
		put(t, oclock, "members", "m2", `{"user":"bob","project_id":"p3"}`)))

	alice := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "phone", User: "alice", Read: []string{"tasks", "members"}, Write: []string{"tasks"},
		Scopes: map[string][]string{"project": {"p1"}, "undeclared": {"x"}}})
	w := dial(t, ts, alice).hello("phone", 0, syncproto.NewClock("phone", nil))
	require.Equal(t, map[string]syncproto.ScopeInfo{"project": {
		Models:     map[string]string{"tasks": "project_id", "members": "project_id"},
		Membership: &syncproto.Membership{Model: "members", UserField: "user"},
	}}, w.Scopes, "site covers no model alice may read or write")
	require.Equal(t, syncproto.ScopeSet{"project": {"p1", "p2"}}, w.Grants, "token grants and membership rows, of declared scopes")
	require.Equal(t, syncproto.DefaultMaxScopeValues, w.Limits.MaxScopeValues)

	plain := startServer(t, server.Config{})
	w = dial(t, plain, plain.Member(t, "acme", "phone")).hello("phone", 0, syncproto.NewClock("phone", nil))
	require.Nil(t, w.Scopes)
	require.Nil(t, w.Grants)
	require.Zero(t, w.Limits.MaxScopeValues, "no scope declared: the limit is not announced")
}

func TestScopesWelcomeCapsGrantsAtTheLimit(t *testing.T) {
	ts, _ := scopedServer(t, 2)
	tok := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "phone", User: "alice", Read: []string{"*"},
		Scopes: map[string][]string{"project": {"p1", "p2"}, "site": {"s1"}}})
	w := dial(t, ts, tok).hello("phone", 0, syncproto.NewClock("phone", nil))
	require.Equal(t, 2, w.Limits.MaxScopeValues)
	require.Equal(t, syncproto.ScopeSet{"project": {"p1", "p2"}}, w.Grants)
}

// scopedFrames reads the frames of subscription id until n backfills of
// which the last is done for every value in values have arrived after the
// first changes frame, and returns that frame and the backfills in order.
func readBackfills(t testing.TB, c *wsClient, id string, values ...string) (*syncproto.Changes, []*syncproto.Backfill) {
	t.Helper()
	first := expect[*syncproto.Changes](c)
	require.Equal(t, id, first.ID)
	var pages []*syncproto.Backfill
	pending := slices.Clone(values)
	for len(pending) > 0 {
		msg := c.recv()
		b, ok := msg.(*syncproto.Backfill)
		require.True(t, ok, "want a backfill of %v, got %#v", pending, msg)
		require.Equal(t, id, b.ID)
		require.NoError(t, b.Validate())
		require.Contains(t, pending, b.Value, "a backfill of a value not owed")
		pages = append(pages, b)
		if b.Done {
			pending = slices.DeleteFunc(pending, func(v string) bool { return v == b.Value })
		}
	}
	return first, pages
}

func TestScopedSubscribeEvictsBackfillsAndResumes(t *testing.T) {
	ts, owner := scopedServer(t, 0)
	oc, oclock := session(t, ts, owner, "owner")
	putTasks(t, oc, oclock, "p1", "a", 3)
	putTasks(t, oc, oclock, "p2", "b", syncproto.MaxPullLimit+205)
	putTasks(t, oc, oclock, "p3", "c", 2)
	requireApplied(t, oc.push("n", put(t, oclock, "notes", "n1", `"unscoped"`)))
	head := ts.head(t)

	alice := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "phone", User: "alice", Read: []string{"*"}, Write: []string{"*"},
		Scopes: map[string][]string{"project": {"p1", "p2"}}})
	c, _ := session(t, ts, alice, "phone")
	c.send(&syncproto.Subscribe{ID: "s1", Cursor: head,
		Scopes: syncproto.ScopeSet{"project": {"p1", "p2", "p9"}},
		Have:   syncproto.ScopeSet{"project": {"p1", "p3"}}})
	first, pages := readBackfills(t, c, "s1", "p2")
	require.Empty(t, first.Entries)
	require.Equal(t, head, first.Cursor)
	require.Equal(t, []syncproto.Eviction{
		{Scope: "project", Value: "p9", Reason: syncproto.EvictNotGranted},
		{Scope: "project", Value: "p3", Reason: syncproto.EvictUnsubscribed},
	}, first.Evictions)
	require.Len(t, pages, 2, "p2's 1,205 rows in two pages; p1 is held, p3 and p9 are not followed")
	var keys []string
	for _, p := range pages {
		require.GreaterOrEqual(t, p.At, head)
		for _, e := range p.Entries {
			require.Equal(t, "p2", e.ScopeValue)
			require.JSONEq(t, fmt.Sprintf(`{"project_id":"p2","n":%d}`, len(keys)), string(e.Value))
			keys = append(keys, e.Key)
		}
	}
	require.Len(t, keys, syncproto.MaxPullLimit+205)
	require.True(t, slices.IsSorted(keys))
	require.False(t, pages[0].Done)
	require.Equal(t, "tasks/"+keys[syncproto.MaxPullLimit-1], pages[0].LastKey)

	// Another connection resumes p2 after the first page: the rest only.
	c2, _ := session(t, ts, alice, "phone")
	c2.send(&syncproto.Subscribe{ID: "s2", Cursor: head,
		Scopes: syncproto.ScopeSet{"project": {"p1", "p2"}},
		Have:   syncproto.ScopeSet{"project": {"p1"}},
		Resume: map[string]map[string]string{"project": {"p2": pages[0].LastKey}}})
	first, rest := readBackfills(t, c2, "s2", "p2")
	require.Empty(t, first.Evictions)
	require.Len(t, rest, 1)
	require.Len(t, rest[0].Entries, 205)
	require.Equal(t, keys[syncproto.MaxPullLimit], rest[0].Entries[0].Key)

	// Counted once each frame was written, which the client may see first.
	requireMetric(t, ts, `syncd_scope_backfills_total{outcome="done"}`, 2)
	requireMetric(t, ts, `syncd_scope_evictions_total{reason="unsubscribed"}`, 1)
	requireMetric(t, ts, `syncd_scope_evictions_total{reason="not_granted"}`, 1)
}

func TestScopedBackfillIsEmptyAndDoneForAValueWithoutRows(t *testing.T) {
	ts, _ := scopedServer(t, 0)
	tok := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "phone", User: "alice", Read: []string{"*"},
		Scopes: map[string][]string{"project": {"empty"}}})
	c, _ := session(t, ts, tok, "phone")
	c.send(&syncproto.Subscribe{ID: "s1", Scopes: syncproto.ScopeSet{"project": {"empty"}}})
	_, pages := readBackfills(t, c, "s1", "empty")
	require.Len(t, pages, 1)
	require.Empty(t, pages[0].Entries)
	require.True(t, pages[0].Done)
}

// TestScopeRequestsRefusedStartNothing: a refused subscribe or pull is
// answered with its code, keeps the connection and starts no feed.
func TestScopeRequestsRefusedStartNothing(t *testing.T) {
	ts, owner := scopedServer(t, 3)
	oc, oclock := session(t, ts, owner, "owner")
	putTasks(t, oc, oclock, "p1", "a", 2)
	tok := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "phone", User: "alice", Read: []string{"*"},
		Scopes: map[string][]string{"project": {"p1", "p2", "p3", "p4"}}})
	c, _ := session(t, ts, tok, "phone")
	for _, tc := range []struct {
		name string
		msg  syncproto.Message
		code syncproto.Code
	}{
		{"undeclared scope", &syncproto.Subscribe{ID: "s1", Scopes: syncproto.ScopeSet{"team": {"a"}}}, syncproto.CodeInvalidScope},
		{"undeclared scope held", &syncproto.Subscribe{ID: "s1", Scopes: syncproto.ScopeSet{"project": {"p1"}}, Have: syncproto.ScopeSet{"team": {"a"}}}, syncproto.CodeInvalidScope},
		{"too many values", &syncproto.Subscribe{ID: "s1", Scopes: syncproto.ScopeSet{"project": {"p1", "p2", "p3", "p4"}}}, syncproto.CodeTooManyScopeValues},
		{"too many values once * is expanded", &syncproto.Subscribe{ID: "s1", Scopes: syncproto.ScopeSet{"project": {"*"}}}, syncproto.CodeTooManyScopeValues},
		{"no scopes, grants beyond the limit", &syncproto.Subscribe{ID: "s1"}, syncproto.CodeTooManyScopeValues},
		{"pull of an undeclared scope", &syncproto.Pull{ID: "k1", Scopes: syncproto.ScopeSet{"team": {"a"}}}, syncproto.CodeInvalidScope},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.t = t
			c.send(tc.msg)
			c.recvError(tc.msg.RequestID(), tc.code)
			require.Empty(t, c.barrier(), "no feed frame, no backfill")
		})
	}
	c.t = t
	// The connection still serves: a valid subscription starts.
	c.send(&syncproto.Subscribe{ID: "s2", Scopes: syncproto.ScopeSet{"project": {"p1"}}})
	_, pages := readBackfills(t, c, "s2", "p1")
	require.Len(t, pages[0].Entries, 2)

	plain := startServer(t, server.Config{})
	pc, _ := session(t, plain, plain.Member(t, "acme", "phone"), "phone")
	pc.send(&syncproto.Subscribe{ID: "s1", Scopes: syncproto.ScopeSet{"project": {"p1"}}})
	pc.recvError("s1", syncproto.CodeInvalidScope)
	require.Empty(t, pc.barrier())
}

// frameJSON is a frame's raw members, for checks that must see what the
// wire carried.
func frameJSON(t testing.TB, msg syncproto.Message) map[string]json.RawMessage {
	t.Helper()
	b, err := syncproto.Encode(msg)
	require.NoError(t, err)
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

// requireMetric waits for series to read want.
func requireMetric(t testing.TB, ts *testServer, series string, want float64) {
	t.Helper()
	require.Eventually(t, func() bool { return ts.MetricValue(t, series) == want }, ioTimeout, 5*time.Millisecond,
		"%s: want %v, have %v", series, want, ts.MetricValue(t, series))
}
