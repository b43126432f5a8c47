package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/internal/fakeclock"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// startScoped starts a server declaring scope project (tasks and members
// by project_id; members grant to their user) with alice's phone
// connected (its token grants p3; it subscribed requesting p2 and p3, so
// the server recorded that set), after the owner wrote:
//
//	seq 1  members/m1  alice in p1
//	seq 2  members/m3  alice in p2
//	seq 3  tasks/t1    p1
//	seq 4  tasks/t2    p1
//	seq 5  tasks/t2    moved to p2
//	seq 6  members/m3  deleted: alice loses p2
//	seq 7  notes/n1    unscoped
func startScoped(t *testing.T) *testServer {
	t.Helper()
	scopes := &replication.Scopes{}
	require.NoError(t, scopes.Set("project=tasks.project_id,members.project_id"))
	require.NoError(t, scopes.SetMembership("project=members:user"))
	ts := startServer(t, serverOptions{clock: fakeclock.New(t0), scopes: scopes})
	owner, err := auth.Issue(ts.tokenPath, auth.Principal{Tenant: tenant, ClientID: "owner", Read: []string{"*"}, Write: []string{"*"}, Scopes: map[string][]string{"project": {"*"}}}, t0)
	require.NoError(t, err)
	alice, err := auth.Issue(ts.tokenPath, auth.Principal{Tenant: tenant, ClientID: "alice:phone", User: "alice", Read: []string{"tasks", "members"}, Scopes: map[string][]string{"project": {"p3"}}}, t0)
	require.NoError(t, err)
	// Both sessions stay connected until the server stops, so that the
	// devices counted are exactly these two.
	s := ts.dialAs(t, owner, "owner", 0)
	at := t0.Add(-time.Minute)
	w := func(n int, op syncproto.Op, model, key, value string) syncproto.Mutation {
		m := write(n, op, model, key, value, at.Add(time.Duration(n)*time.Second), nil)
		m.HLC.Origin = "owner"
		return m
	}
	for i, m := range []syncproto.Mutation{
		w(1, syncproto.OpPut, "members", "m1", `{"user":"alice","project_id":"p1"}`),
		w(2, syncproto.OpPut, "members", "m3", `{"user":"alice","project_id":"p2"}`),
		w(3, syncproto.OpPut, "tasks", "t1", `{"project_id":"p1"}`),
		w(4, syncproto.OpPut, "tasks", "t2", `{"project_id":"p1"}`),
		w(5, syncproto.OpPut, "tasks", "t2", `{"project_id":"p2"}`),
		w(6, syncproto.OpDelete, "members", "m3", ""),
		w(7, syncproto.OpPut, "notes", "n1", `"plain"`),
	} {
		res := s.push(m)
		require.Equal(t, syncproto.StatusApplied, res[0].Status, "write %d: %+v", i+1, res[0])
	}
	phone := ts.dialAs(t, alice, "alice:phone", 0)
	_, ok := phone.request(&syncproto.Subscribe{Cursor: 7, Scopes: syncproto.ScopeSet{"project": {"p2", "p3"}}}).(*syncproto.Changes)
	require.True(t, ok, "subscribe must be answered with changes")
	// The set is recorded once the subscription's feed started.
	c := newCLI(t, ts.adminEnv())
	require.Eventually(t, func() bool {
		var e adminapi.KeyExplanation
		r := c.run("--json", "explain", "--client", "alice:phone", "--model", "tasks", "--key", "t1", "--tenant", tenant)
		return r.err == nil && json.Unmarshal([]byte(r.stdout), &e) == nil && e.RequestedFrom == adminapi.RequestedRecorded
	}, ioTimeout, 10*time.Millisecond, "the phone's requested set was never recorded")
	return ts
}

func TestScopesCommandGolden(t *testing.T) {
	ts := startScoped(t)
	c := newCLI(t, ts.adminEnv())
	requireGolden(t, "scopes", c.ok("scopes"))
	requireGolden(t, "scopes_tenant_user", c.ok("scopes", "--tenant", tenant, "--user", "alice"))
	requireGolden(t, "scopes_value", c.ok("scopes", "--tenant", tenant, "--scope", "project", "--value", "p1"))
	requireGolden(t, "explain_key_revoked", c.ok("explain", "--client", "alice:phone", "--model", "tasks", "--key", "t2", "--tenant", tenant))
	requireGolden(t, "explain_key_not_requested", c.ok("explain", "--client", "alice:phone", "--model", "tasks", "--key", "t1", "--tenant", tenant))
	requireGolden(t, "explain_key_unscoped", c.ok("explain", "--client", "alice:phone", "--model", "notes", "--key", "n1", "--tenant", tenant))
}

func TestScopesCommandPagesAndJSON(t *testing.T) {
	ts := startScoped(t)
	c := newCLI(t, ts.adminEnv())
	r := c.run("scopes", "--tenant", tenant, "--limit", "1")
	require.NoError(t, r.err)
	require.Contains(t, r.stdout, "tenant acme: 1 value")
	require.Contains(t, r.stderr, "more values: --after project:p1")

	var all adminapi.ScopesPage
	decodeStrict(t, c.ok("--json", "scopes", "--tenant", tenant, "--limit", "0"), &all)
	require.Equal(t, []adminapi.ScopeValue{{Scope: "project", Value: "p1", Rows: 2, Members: 1, Devices: 2}, {Scope: "project", Value: "p2", Rows: 1, Requesting: 1, Devices: 1}}, all.Values)
	var rest adminapi.ScopesPage
	decodeStrict(t, c.ok("--json", "scopes", "--tenant", tenant, "--after", "project:p1"), &rest)
	require.Equal(t, all.Values[1:], rest.Values)

	var withUser adminapi.ScopesPage
	decodeStrict(t, c.ok("--json", "scopes", "--tenant", tenant, "--user", "alice", "--limit", "1"), &withUser)
	require.Equal(t, syncproto.ScopeSet{"project": {"p1"}}, withUser.User.Grants)

	var e adminapi.KeyExplanation
	decodeStrict(t, c.ok("--json", "explain", "--client", "alice:phone", "--model", "tasks", "--key", "t1", "--tenant", tenant), &e)
	require.Equal(t, adminapi.KeyNotRequested, e.Verdict, "judged with the recorded set: %s", e.Why)
	require.Equal(t, adminapi.RequestedRecorded, e.RequestedFrom)
	require.Equal(t, syncproto.ScopeSet{"project": {"p2", "p3"}}, e.Requested)
	decodeStrict(t, c.ok("--json", "explain", "--client", "alice:phone", "--model", "tasks", "--key", "t1", "--tenant", tenant, "--want", "project=p3"), &e)
	require.Equal(t, adminapi.KeyNotRequested, e.Verdict, e.Why)
	decodeStrict(t, c.ok("--json", "explain", "--client", "alice:phone", "--model", "tasks", "--key", "t1", "--tenant", tenant, "--want", "project=*"), &e)
	require.Equal(t, adminapi.KeyOnScopes, e.Verdict, "--want overrides the recorded set: %s", e.Why)
	require.Equal(t, adminapi.RequestedWant, e.RequestedFrom)
	require.Equal(t, "m1", e.Grant.Row.Key)
}

func TestScopesCommandsRefuseBadInput(t *testing.T) {
	ts := startScoped(t)
	c := newCLI(t, ts.adminEnv())
	for _, args := range [][]string{
		{"scopes", "--scope", "project"},
		{"scopes", "--tenant", tenant, "--limit", "-1"},
		{"scopes", "--tenant", tenant, "--scope", "nope"},
		{"explain", "--client", "alice:phone", "--model", "tasks", "--tenant", tenant},
		{"explain", "--client", "alice:phone", "--model", "tasks", "--key", "t1"},
		{"explain", "queue.db", "--client", "alice:phone", "--model", "tasks", "--key", "t1", "--tenant", tenant},
		{"explain", "--client", "alice:phone", "--model", "tasks", "--key", "t1", "--tenant", tenant, "--want", "project"},
		{"explain", "--client", "alice:phone", "--model", "tasks", "--key", "t1", "--tenant", tenant, "--want", "region=eu"},
	} {
		r := c.run(args...)
		require.Error(t, r.err, "%v", args)
		require.Equal(t, exitUsage, r.code, "%v: %v", args, r.err)
	}
}
