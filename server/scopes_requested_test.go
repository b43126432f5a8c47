package server_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// commitsOf counts what ts committed: its group commits on a single node,
// the batches it published to the command stream on a cluster node.
func commitsOf(t *testing.T, ts *testServer) float64 {
	t.Helper()
	if clusterMode(t) {
		return ts.MetricValue(t, "syncd_cluster_published_batches_total")
	}
	return ts.MetricValue(t, "syncd_commit_group_pushes_count")
}

// requestedResults reads syncd_scope_requested_sets_total of ts by result.
func requestedResults(t *testing.T, ts *testServer) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, r := range []string{"unchanged", "new", "changed", "cleared", "failed", "deferred"} {
		out[r] = ts.MetricValue(t, `syncd_scope_requested_sets_total{result="`+r+`"}`)
	}
	return out
}

// TestRequestedSetIsRecordedOnChangeAndReadOnEveryNode: a device's
// subscribe with scopes records its requested set through the committer;
// every node (of a cluster: the two others too) answers explain with it
// (not_requested without --want) and counts it in the scopes page; a
// reconnect with the same set commits nothing; a changed set is recorded
// again; a subscribe without scopes clears it; a refused subscribe (too
// many values) records nothing.
func TestRequestedSetIsRecordedOnChangeAndReadOnEveryNode(t *testing.T) {
	ts, owner := scopedServer(t, 3)
	if clusterMode(t) {
		// A set is recorded once every node announces the format that
		// carries it (until then: deferred).
		for i, n := range ts.nodes {
			require.Eventually(t, func() bool { return n.MetricValue(t, "syncd_cluster_version") == cluster.LatestFormat },
				time.Minute, 20*time.Millisecond, "node %d never saw the cluster at format %d", i+1, cluster.LatestFormat)
		}
	}
	oc, oclock := session(t, ts, owner, "owner")
	putTasks(t, oc, oclock, "p1", "a", 2)
	putTasks(t, oc, oclock, "p2", "b", 2)
	// Membership rows grant u both values: every node knows them (a
	// token's grants are known only where its device is connected).
	requireApplied(t, oc.push("m", put(t, oclock, "members", "m1", `{"user":"u","project_id":"p1"}`),
		put(t, oclock, "members", "m2", `{"user":"u","project_id":"p2"}`)))
	tok := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "phone", User: "u", Read: []string{"*"}})
	head := ts.head(t) // the phone resumes at the head: no grant change is met (a subscribe without scopes would resync)
	explain := func(t *testing.T, node int, key string) adminapi.KeyExplanation {
		t.Helper()
		q := url.Values{adminapi.ParamTenant: {"acme"}, adminapi.ParamClientID: {"phone"}, adminapi.ParamModel: {"tasks"}, adminapi.ParamKey: {key}}
		var ans adminapi.KeyExplanation
		ts.nodes[node].Admin(t, adminapi.PathScopesExplain+"?"+q.Encode(), &ans)
		return ans
	}
	subscribeAt := func(t *testing.T, at *testServer, scopes syncproto.ScopeSet) *syncproto.Message {
		t.Helper()
		c, _ := session(t, at, tok, "phone")
		defer c.conn.CloseNow()
		c.send(&syncproto.Subscribe{ID: "s", Cursor: head, Scopes: scopes})
		msg := c.recvAnswer()
		return &msg
	}
	subscribe := func(t *testing.T, scopes syncproto.ScopeSet) *syncproto.Message { return subscribeAt(t, ts, scopes) }
	// waitResult waits until n subscribes of ts had result (recorded
	// after the subscription's feed started).
	waitResult := func(t *testing.T, result string, n float64) {
		t.Helper()
		require.Eventually(t, func() bool { return requestedResults(t, ts)[result] == n }, ioTimeout, 5*time.Millisecond,
			"%s: want %v, have %v", result, n, requestedResults(t, ts))
	}
	// requireOnEveryNode waits until every node's explanation of b-0000
	// (in p2) has the verdict want and the request requested.
	requireOnEveryNode := func(t *testing.T, want string, requested syncproto.ScopeSet) {
		t.Helper()
		for i := range ts.nodes {
			require.Eventually(t, func() bool {
				ans := explain(t, i, "b-0000")
				return ans.Verdict == want && (requested == nil) == (ans.Requested == nil) && (requested == nil || ans.Requested.Has("project", requested["project"][0]))
			}, ioTimeout, 10*time.Millisecond, "node %d: %+v", i+1, explain(t, i, "b-0000"))
		}
	}

	before := commitsOf(t, ts)
	ans := explain(t, 0, "b-0000")
	require.Equal(t, adminapi.KeyNotGranted, ans.Verdict, "no set recorded yet, and the client id names no user: %s", ans.Why)
	require.Empty(t, ans.RequestedFrom)

	msg := subscribe(t, syncproto.ScopeSet{"project": {"p1"}})
	require.IsType(t, &syncproto.Changes{}, *msg)
	waitResult(t, "new", 1)
	require.Equal(t, before+1, commitsOf(t, ts), "a new set is one commit")
	requireOnEveryNode(t, adminapi.KeyNotRequested, syncproto.ScopeSet{"project": {"p1"}})
	ans = explain(t, len(ts.nodes)-1, "b-0000")
	require.Equal(t, adminapi.RequestedRecorded, ans.RequestedFrom)
	require.Equal(t, "u", ans.User, "the user recorded with the set")
	require.NotNil(t, ans.RequestedAt)
	for i, n := range ts.nodes {
		var page adminapi.ScopesPage
		n.Admin(t, adminapi.PathScopes+"?tenant=acme&scope=project", &page)
		require.Len(t, page.Values, 2)
		require.Equal(t, []int{1, 0}, []int{page.Values[0].Requesting, page.Values[1].Requesting}, "node %d: p1 is requested by the phone, p2 by none", i+1)
	}

	// --want overrides the recorded set.
	q := url.Values{adminapi.ParamTenant: {"acme"}, adminapi.ParamClientID: {"phone"}, adminapi.ParamModel: {"tasks"}, adminapi.ParamKey: {"b-0000"}, adminapi.ParamWant: {"project:p2"}}
	var wanted adminapi.KeyExplanation
	ts.Admin(t, adminapi.PathScopesExplain+"?"+q.Encode(), &wanted)
	require.Equal(t, adminapi.KeyOnScopes, wanted.Verdict, wanted.Why)
	require.Equal(t, adminapi.RequestedWant, wanted.RequestedFrom)

	// Reconnects with the same set, its values in another order and
	// repeated: nothing is written.
	for range 3 {
		require.IsType(t, &syncproto.Changes{}, *subscribe(t, syncproto.ScopeSet{"project": {"p1", "p1"}}))
	}
	waitResult(t, "unchanged", 3)
	require.Equal(t, before+1, commitsOf(t, ts), "an unchanged set costs no commit")
	if clusterMode(t) {
		// The device moves to another node: its set is there, so the
		// same request writes nothing there either.
		n := ts.nodes[1]
		other := &testServer{Server: n, srv: n.Server, url: n.URL, adminURL: n.AdminURL, tokenPath: n.TokenPath, adminToken: n.AdminToken, nodes: ts.nodes}
		published := other.MetricValue(t, "syncd_cluster_published_batches_total")
		require.IsType(t, &syncproto.Changes{}, *subscribeAt(t, other, syncproto.ScopeSet{"project": {"p1"}}))
		require.Eventually(t, func() bool { return requestedResults(t, other)["unchanged"] == 1 }, ioTimeout, 5*time.Millisecond, "%v", requestedResults(t, other))
		require.Equal(t, published, other.MetricValue(t, "syncd_cluster_published_batches_total"), "the other node published nothing")
		require.Zero(t, requestedResults(t, other)["new"])
	}

	// Bad input: more values than max_scope_values (3) is refused and
	// records nothing.
	msg = subscribe(t, syncproto.ScopeSet{"project": {"p1", "p2", "p3", "p4"}})
	e, ok := (*msg).(*syncproto.Error)
	require.True(t, ok, "want error, got %#v", *msg)
	require.Equal(t, syncproto.CodeTooManyScopeValues, e.Code)
	require.Equal(t, before+1, commitsOf(t, ts), "a refused subscribe records nothing")
	require.Equal(t, adminapi.KeyNotRequested, explain(t, 0, "b-0000").Verdict, "the set recorded before stands")

	// A changed set is recorded again, and read on every node.
	require.IsType(t, &syncproto.Changes{}, *subscribe(t, syncproto.ScopeSet{"project": {"p1", "p2"}}))
	waitResult(t, "changed", 1)
	require.Equal(t, before+2, commitsOf(t, ts))
	requireOnEveryNode(t, adminapi.KeyOnScopes, syncproto.ScopeSet{"project": {"p2"}})

	// A subscribe without scopes follows every grant: the set is cleared.
	require.IsType(t, &syncproto.Changes{}, *subscribe(t, nil))
	waitResult(t, "cleared", 1)
	require.Equal(t, before+3, commitsOf(t, ts))
	requireOnEveryNode(t, adminapi.KeyNotGranted, nil) // no set: no user known for the device either
	require.Zero(t, requestedResults(t, ts)["failed"]+requestedResults(t, ts)["deferred"])
}
