package server_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// TestChangedDeclarationsResyncDevices: once syncd restarts with other
// scope declarations, a device whose cursor came from before is welcomed
// with another database_id (so it resyncs from a snapshot, holding only
// what the new declarations give it) on a single node and on every node of
// a cluster alike; a restart with the same declarations changes nothing.
func TestChangedDeclarationsResyncDevices(t *testing.T) {
	byProject := func(t *testing.T) *replication.Scopes {
		s := &replication.Scopes{}
		require.NoError(t, s.Set("project=tasks.project_id"))
		return s
	}
	byTeam := func(t *testing.T) *replication.Scopes {
		s := &replication.Scopes{}
		require.NoError(t, s.Set("project=tasks.team"))
		return s
	}
	for _, mode := range []struct {
		name  string
		start func(*testing.T, server.Config) []*syncdtest.Server
	}{
		{"single node", func(t *testing.T, cfg server.Config) []*syncdtest.Server {
			return []*syncdtest.Server{syncdtest.Start(t, cfg)}
		}},
		{"cluster", func(t *testing.T, cfg server.Config) []*syncdtest.Server { return syncdtest.StartCluster(t, 3, cfg) }},
	} {
		t.Run(mode.name, func(t *testing.T) {
			nodes := mode.start(t, server.Config{Scopes: byProject(t)})
			alice := nodes[0].Issue(t, auth.Principal{Tenant: "acme", ClientID: "phone", User: "alice", Read: []string{"tasks"}, Write: []string{"tasks"},
				Scopes: map[string][]string{"project": {"p1"}}})
			welcome := func(n *syncdtest.Server, databaseID string, cursor uint64) *syncproto.Welcome {
				t.Helper()
				c := dial(t, &testServer{Server: n, srv: n.Server, url: n.URL}, alice)
				c.send(&syncproto.Hello{ID: "h1", ClientID: "phone", Cursor: cursor, DatabaseID: databaseID, HLC: syncproto.NewClock("phone", nil).Now()})
				w := expect[*syncproto.Welcome](c)
				c.conn.CloseNow()
				return w
			}
			owner := nodes[0].Issue(t, auth.Principal{Tenant: "acme", ClientID: "owner", Read: []string{"*"}, Write: []string{"*"},
				Scopes: map[string][]string{"project": {"*"}}})
			oc, oclock := session(t, &testServer{Server: nodes[0], srv: nodes[0].Server, url: nodes[0].URL}, owner, "owner")
			// Under the new declarations this task is in project x, which
			// alice does not hold.
			requireApplied(t, oc.push("w", put(t, oclock, "tasks", "t1", `{"project_id":"p1","team":"x"}`)))
			oc.conn.CloseNow()
			before := welcome(nodes[0], "", 0)
			require.NotZero(t, before.Head)
			for _, n := range nodes[1:] {
				require.Equal(t, before.DatabaseID, welcome(n, "", 0).DatabaseID, "every node serves one database")
			}
			restartAll := func(decl *replication.Scopes) {
				for _, n := range nodes {
					n.RestartWith(t, func(c *server.Config) { c.Scopes = decl })
				}
			}

			restartAll(byProject(t))
			require.Equal(t, before.DatabaseID, welcome(nodes[0], before.DatabaseID, before.Head).DatabaseID, "the same declarations: devices resume")

			restartAll(byTeam(t))
			for _, n := range nodes {
				after := welcome(n, before.DatabaseID, before.Head)
				require.NotEqual(t, before.DatabaseID, after.DatabaseID, "%s: what devices may see changed: they must resync", n.URL)
				require.NoError(t, syncproto.ValidateID(after.DatabaseID))
			}
		})
	}
}
