package server_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// scopesHistory writes, as the owner of tenant acme on a server declaring
// projectScopes: tasks t1 (p1), t2 (p1, then moved to p2), t3 (p3), t4 (p1,
// stays), n1 (notes: unscoped); members m1 (alice in p1), m2 (bob in p1),
// m3 (alice in p2, then deleted). It connects alice's phone, whose token
// grants p3, and subscribes it requesting every project value (so the
// server records that set), and returns the server and the admin explain query for a key
// of alice's phone.
func scopesHistory(t *testing.T, cfg server.Config) (*testServer, func(model, key string, want ...string) url.Values) {
	t.Helper()
	cfg.Scopes = projectScopes(t)
	ts := startServer(t, cfg)
	owner := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "owner", User: "owner", Read: []string{"*"}, Write: []string{"*"},
		Scopes: map[string][]string{"project": {"*"}, "site": {"*"}}})
	oc, clock := session(t, ts, owner, "owner")
	requireApplied(t, oc.push("a",
		put(t, clock, "members", "m1", `{"user":"alice","project_id":"p1"}`),
		put(t, clock, "members", "m2", `{"user":"bob","project_id":"p1"}`),
		put(t, clock, "members", "m3", `{"user":"alice","project_id":"p2"}`),
		put(t, clock, "tasks", "t1", `{"project_id":"p1"}`),
		put(t, clock, "tasks", "t2", `{"project_id":"p1"}`),
		put(t, clock, "tasks", "t3", `{"project_id":"p3"}`),
		put(t, clock, "tasks", "t4", `{"project_id":"p1"}`),
		put(t, clock, "notes", "n1", `"plain"`)))
	requireApplied(t, oc.push("b", put(t, clock, "tasks", "t2", `{"project_id":"p2"}`)))
	requireApplied(t, oc.push("c", syncproto.Mutation{OpID: newOpID(t), Model: "members", Key: "m3", Op: syncproto.OpDelete, HLC: clock.Now()}))
	alice := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "alice:phone", User: "alice", Read: []string{"tasks", "members"}, Write: []string{"tasks"},
		Scopes: map[string][]string{"project": {"p3"}}})
	phone, _ := session(t, ts, alice, "alice:phone")
	phone.send(&syncproto.Subscribe{ID: "s", Scopes: syncproto.ScopeSet{"project": {syncproto.AllValues}}})
	expect[*syncproto.Changes](phone)
	requireMetric(t, ts, `syncd_scope_requested_sets_total{result="new"}`, 1)
	q := func(model, key string, want ...string) url.Values {
		return url.Values{adminapi.ParamTenant: {"acme"}, adminapi.ParamClientID: {"alice:phone"}, adminapi.ParamModel: {model}, adminapi.ParamKey: {key}, adminapi.ParamWant: want}
	}
	return ts, q
}

func (ts *testServer) explainKey(t *testing.T, q url.Values) adminapi.KeyExplanation {
	t.Helper()
	var ans adminapi.KeyExplanation
	require.Equal(t, http.StatusOK, ts.adminGet(t, adminapi.PathScopesExplain+"?"+q.Encode(), ts.adminToken, &ans))
	return ans
}

func TestAdminExplainSaysWhyAKeyIsOrIsNotOnADevicesScopes(t *testing.T) {
	ts, q := scopesHistory(t, server.Config{})

	t1 := ts.explainKey(t, q("tasks", "t1"))
	require.Equal(t, adminapi.KeyOnScopes, t1.Verdict, t1.Why)
	require.Equal(t, adminapi.RequestedRecorded, t1.RequestedFrom, "judged with the set recorded at the phone's subscribe")
	require.Equal(t, syncproto.ScopeSet{"project": {syncproto.AllValues}}, t1.Requested)
	require.True(t, t1.Connected)
	require.Equal(t, "alice", t1.User)
	require.Equal(t, "p1", t1.ScopeValue)
	require.Equal(t, "membership", t1.Grant.Kind)
	require.Equal(t, adminapi.MemberRow{Value: "p1", User: "alice", Model: "members", Key: "m1", Seq: 1}, *t1.Grant.Row)
	require.Equal(t, []string{"p1"}, t1.MemberGrants, "m3 was deleted")
	at := t1.Events[0].At
	require.Equal(t, []adminapi.KeyEvent{
		{Seq: 1, At: at, Kind: adminapi.EventGranted, To: "p1", Model: "members", Key: "m1", ClientID: "owner"},
		{Seq: 4, At: at, Kind: adminapi.EventWritten, To: "p1", ClientID: "owner"},
	}, t1.Events)

	t2 := ts.explainKey(t, q("tasks", "t2"))
	require.Equal(t, adminapi.KeyNotGranted, t2.Verdict, t2.Why)
	require.Equal(t, "p2", t2.ScopeValue)
	require.Contains(t, t2.Evicted, "revoked at seq 10: membership row members/m3", "the grant of p2 was lost after the move into it")
	var kinds []string
	for _, e := range t2.Events {
		kinds = append(kinds, e.Kind+" "+e.From+">"+e.To)
	}
	require.Equal(t, []string{"granted >p1", "granted >p2", "written >p1", "moved p1>p2", "revoked >p2"}, kinds)

	t3 := ts.explainKey(t, q("tasks", "t3"))
	require.Equal(t, adminapi.KeyOnScopes, t3.Verdict, t3.Why)
	require.Equal(t, &adminapi.GrantSource{Kind: "token"}, t3.Grant)
	require.Equal(t, syncproto.ScopeSet{"project": {"p3"}}, t3.TokenGrants)

	t3narrow := ts.explainKey(t, q("tasks", "t3", "project:p1"))
	require.Equal(t, adminapi.KeyNotRequested, t3narrow.Verdict, t3narrow.Why)
	require.Contains(t, t3narrow.Evicted, "unsubscribed")
	all := ts.explainKey(t, q("tasks", "t3", "project:*"))
	require.Equal(t, adminapi.KeyOnScopes, all.Verdict, "* requests every value granted")

	n1 := ts.explainKey(t, q("notes", "n1"))
	require.Equal(t, adminapi.KeyUnscoped, n1.Verdict)
	require.Contains(t, n1.Why, "covered by no scope")
	require.Equal(t, adminapi.KeyNotFound, ts.explainKey(t, q("tasks", "nope")).Verdict)

	// A device that is not connected: membership rows still answer, its
	// token's grants are unknown and said to be.
	offline := q("tasks", "t3")
	offline.Set(adminapi.ParamClientID, "alice:tablet")
	ans := ts.explainKey(t, offline)
	require.False(t, ans.Connected)
	require.Equal(t, "alice", ans.User, "the user from the client id's namespace")
	require.Equal(t, adminapi.KeyNotGranted, ans.Verdict)
	require.Contains(t, ans.Why, "token's grants are unknown")
	offline.Set(adminapi.ParamKey, "t4")
	require.Equal(t, adminapi.KeyOnScopes, ts.explainKey(t, offline).Verdict)
}

func TestAdminExplainRefusesBadParameters(t *testing.T) {
	ts, q := scopesHistory(t, server.Config{})
	for name, v := range map[string]url.Values{
		"no key":           {adminapi.ParamTenant: {"acme"}, adminapi.ParamClientID: {"alice:phone"}, adminapi.ParamModel: {"tasks"}},
		"undeclared scope": q("tasks", "t1", "region:eu"),
		"malformed want":   q("tasks", "t1", "project"),
		"bad value":        q("tasks", "t1", "project:a\x01"),
		"bad user":         func() url.Values { v := q("tasks", "t1"); v.Set(adminapi.ParamUser, "a\x01b"); return v }(),
	} {
		t.Run(name, func(t *testing.T) {
			requireBadRequest(t, ts, adminapi.PathScopesExplain+"?"+v.Encode())
		})
	}
}

func TestAdminScopesListsValuesGrantsAndDevicesPaged(t *testing.T) {
	ts, _ := scopesHistory(t, server.Config{})
	var page adminapi.ScopesPage
	require.Equal(t, http.StatusOK, ts.adminGet(t, adminapi.PathScopes, ts.adminToken, &page))
	require.Len(t, page.Scopes, 2)
	require.Equal(t, "project", page.Scopes[0].Name)
	require.Nil(t, page.Values, "no tenant: declarations only")

	require.Equal(t, http.StatusOK, ts.adminGet(t, adminapi.PathScopes+"?tenant=acme", ts.adminToken, &page))
	require.Equal(t, []adminapi.ScopeValue{
		// Requesting: alice's phone requested * (recorded); the owner never subscribed.
		{Scope: "project", Value: "p1", Rows: 4, Members: 2, Devices: 2, Requesting: 1}, // m1, m2, t1, t4; alice and bob; owner (*) and alice
		{Scope: "project", Value: "p2", Rows: 1, Members: 0, Devices: 1, Requesting: 1}, // t2; m3 deleted; owner
		{Scope: "project", Value: "p3", Rows: 1, Members: 0, Devices: 2, Requesting: 1}, // t3; owner and alice's token
	}, page.Values)
	require.Empty(t, page.Next)

	var first, second adminapi.ScopesPage
	require.Equal(t, http.StatusOK, ts.adminGet(t, adminapi.PathScopes+"?tenant=acme&limit=2", ts.adminToken, &first))
	require.Len(t, first.Values, 2)
	require.Equal(t, "project:p2", first.Next)
	require.Equal(t, http.StatusOK, ts.adminGet(t, adminapi.PathScopes+"?tenant=acme&limit=2&after="+url.QueryEscape(first.Next), ts.adminToken, &second))
	require.Equal(t, page.Values[2:], second.Values)

	var one adminapi.ScopesPage
	require.Equal(t, http.StatusOK, ts.adminGet(t, adminapi.PathScopes+"?tenant=acme&scope=project&value=p1", ts.adminToken, &one))
	require.Len(t, one.Values, 1)
	require.Equal(t, []adminapi.MemberRow{{Value: "p1", User: "alice", Model: "members", Key: "m1", Seq: 1}, {Value: "p1", User: "bob", Model: "members", Key: "m2", Seq: 2}}, one.Values[0].MemberRows)
	require.Equal(t, []string{"alice:phone", "owner"}, []string{one.Values[0].DeviceList[0].ClientID, one.Values[0].DeviceList[1].ClientID})

	var user adminapi.ScopesPage
	require.Equal(t, http.StatusOK, ts.adminGet(t, adminapi.PathScopes+"?tenant=acme&scope=site&user=alice", ts.adminToken, &user))
	require.Empty(t, user.Values, "no site value has rows")
	require.Equal(t, syncproto.ScopeSet{"project": {"p1"}}, user.User.Grants)
	require.Equal(t, []adminapi.MemberRow{{Value: "p1", User: "alice", Model: "members", Key: "m1", Seq: 1}}, user.User.Membership)
	require.Equal(t, []adminapi.Device{{ClientID: "alice:phone", User: "alice", TokenGrants: syncproto.ScopeSet{"project": {"p3"}}}}, user.User.Devices)

	for _, bad := range []string{"?scope=project", "?tenant=acme&scope=nope", "?tenant=acme&value=p1", "?tenant=acme&limit=-1", "?tenant=acme&user=a%01b"} {
		requireBadRequest(t, ts, adminapi.PathScopes+bad)
	}
}

// requireBadRequest requires a 400 answer to an admin GET of path whose
// body names the error.
func requireBadRequest(t *testing.T, ts *testServer, path string) {
	t.Helper()
	resp := syncdtest.Get(t, ts.adminURL+path, ts.adminToken)
	defer resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, path)
	var e adminapi.Error
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e), path)
	require.NotEmpty(t, e.Error, path)
}

// TestAdminScopesAnswersAreStable pins the JSON of the partial-sync admin
// answers (a ScopesPage with a user, a value's detail, a key explanation)
// on a fixed clock, like TestAdminAnswersAreStable.
func TestAdminScopesAnswersAreStable(t *testing.T) {
	// Ahead of the devices' clocks, so that no write is refused for skew.
	at := time.Date(2100, 3, 1, 12, 0, 0, 0, time.UTC)
	ts, q := scopesHistory(t, server.Config{Now: func() time.Time { return at }})
	for _, tc := range []struct{ name, path string }{
		{"scopes.json", adminapi.PathScopes + "?tenant=acme&user=alice"},
		{"scopes_value.json", adminapi.PathScopes + "?tenant=acme&scope=project&value=p1"},
		{"scopes_explain.json", adminapi.PathScopesExplain + "?" + q("tasks", "t2", "project:p1", "project:p2").Encode()},
		{"scopes_explain_recorded.json", adminapi.PathScopesExplain + "?" + q("tasks", "t1").Encode()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			goldenAdmin(t, tc.name, adminRaw(t, ts, tc.path))
		})
	}
}
