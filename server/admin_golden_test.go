package server_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

var updateAdmin = flag.Bool("update-admin", false, "rewrite the admin API's golden answers under testdata/admin/")

// goldenAdmin compares got with testdata/admin/name, or rewrites the file
// under -update-admin.
func goldenAdmin(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "admin", name)
	if *updateAdmin {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./server -run TestAdminAnswersAreStable -update-admin to create it")
	require.Equal(t, string(want), string(got), "the admin API's JSON changed: %s", path)
}

// TestAdminAnswersAreStable pins the admin API's JSON, byte for byte, as
// syncctl, the console and scripts read it: status, clients, an oplog
// page, conflicts, a ledger answer, figures and tenants from a real server on a fixed clock
// with fixed op ids. The values a run cannot fix (the build, the database
// id, the session's remote address and token id) are replaced by
// placeholders.
func TestAdminAnswersAreStable(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	fixed := func() time.Time { return at }
	ts := startServer(t, server.Config{NodeID: "node-7", Now: fixed, Policies: replication.Config{"accounts": syncproto.PolicyOptimistic}})
	token := ts.Member(t, "acme", "phone")
	c := dial(t, ts, token)
	clock := syncproto.NewClock("phone", fixed)
	c.hello("phone", 0, clock)
	c.subscribe("s1", 0)
	zero := uint64(0)
	m1 := syncproto.Mutation{OpID: "01890a5d-ac96-774b-bcce-b302099a8051", Model: "notes", Key: "n1", Op: syncproto.OpPut, Value: []byte(`"one"`), HLC: clock.Now()}
	m2 := syncproto.Mutation{OpID: "01890a5d-ac96-774b-bcce-b302099a8052", Model: "accounts", Key: "a1", Op: syncproto.OpPut, Value: []byte(`{"balance":1}`), HLC: clock.Now(), BaseVersion: &zero}
	m3 := syncproto.Mutation{OpID: "01890a5d-ac96-774b-bcce-b302099a8053", Model: "notes", Key: "n1", Op: syncproto.OpDelete, HLC: clock.Now()}
	requireApplied(t, c.push("p1", m1, m2, m3))
	stale := syncproto.Mutation{OpID: "01890a5d-ac96-774b-bcce-b302099a8054", Model: "accounts", Key: "a1", Op: syncproto.OpPut, Value: []byte(`{"balance":2}`), HLC: clock.Now(), BaseVersion: &zero}
	require.Equal(t, syncproto.StatusConflict, c.push("p2", stale)[0].Status)
	c.waitLive(3)

	var clients []adminapi.Session
	require.Eventually(t, func() bool {
		clients = nil
		require.Equal(t, http.StatusOK, ts.adminGet(t, "/v1/admin/clients", ts.adminToken, &clients))
		return len(clients) == 1 && clients[0].Cursor == 3
	}, ioTimeout, 5*time.Millisecond, "clients: %+v", clients)
	st := ts.Status(t)
	field := func(name, value string) []byte { return []byte(`"` + name + `": ` + strconv.Quote(value)) }
	volatile := func(b []byte) []byte {
		b = bytes.ReplaceAll(b, field("build", st.Build), field("build", "BUILD"))
		b = bytes.ReplaceAll(b, field("database_id", st.DatabaseID), field("database_id", "DATABASE_ID"))
		// The schema version moves with every migration of the database.
		b = bytes.ReplaceAll(b, []byte(`"schema_version": `+strconv.Itoa(st.SchemaVersion)), []byte(`"schema_version": "SCHEMA_VERSION"`))
		b = bytes.ReplaceAll(b, []byte(clients[0].Remote), []byte("REMOTE"))
		return bytes.ReplaceAll(b, []byte(clients[0].TokenID), []byte("TOKEN_ID"))
	}

	for _, tc := range []struct{ name, path string }{
		{"status.json", "/v1/admin/status"},
		{"clients.json", "/v1/admin/clients"},
		{"oplog.json", "/v1/admin/oplog?from=0&limit=10"},
		{"conflicts.json", "/v1/admin/conflicts"},
		{"ledger.json", "/v1/admin/ledger/" + stale.OpID + "?tenant=acme"},
		{"ledger_not_found.json", "/v1/admin/ledger/01890a5d-ac96-774b-bcce-b302099a8059?tenant=acme"},
		{"error.json", "/v1/admin/oplog?from=-1"},
		{"figures.json", "/v1/admin/figures"},
		{"tenants.json", "/v1/admin/tenants"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			goldenAdmin(t, tc.name, volatile(adminRaw(t, ts, tc.path)))
		})
	}
}

// adminRaw returns the body of an admin GET as sent.
func adminRaw(t *testing.T, ts *testServer, path string) []byte {
	t.Helper()
	resp := syncdtest.Get(t, ts.adminURL+path, ts.adminToken)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return body
}

// TestAdminClusterStatusIsStable pins the cluster part of the status
// answer, which only a cluster node fills: the encoding of a status with
// two nodes, one holding the lease (with its fencing token and its last
// digest and records checks) and one not ready, one announcing a newer
// format than the other (the cluster version the older one's).
func TestAdminClusterStatusIsStable(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st := adminapi.Status{
		NodeID: "n1", Build: "syncd v1.2.3", DatabaseID: "db-1", SchemaVersion: 1, StartedAt: at, UptimeSeconds: 90.5, Connections: 2, OplogHead: 40, OplogOldest: 3, OplogFloor: 2,
		LedgerEntries: 41, LedgerFloor: at.Add(-time.Hour), MaxClientLagEntries: 5,
		Cluster: &adminapi.ClusterStatus{ID: "c-1", LeaseHolder: "n1", LeaseToken: 12, Nodes: []adminapi.Node{
			{Node: "n1", AppliedSeq: 44, Digest: "00ff", StreamHead: 44, LeaseHeld: true, Ready: true, At: at, Format: 2, ClusterVersion: 1, LeaseToken: 12,
				LastDigestCheck:  &adminapi.Check{At: at, Seq: 40, Result: "mismatch", Agree: []string{"n3"}, Disagree: []string{"n2"}},
				LastRecordsCheck: &adminapi.Check{At: at.Add(-time.Hour), Seq: 20, Result: "match", Agree: []string{"n2", "n3"}}},
			{Node: "n2", AppliedSeq: 40, Digest: "0abc", StreamHead: 44, Lag: 4, Problem: "catching up: 4 commands behind", At: at.Add(-time.Second), Format: 1, ClusterVersion: 1},
		}},
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	require.NoError(t, enc.Encode(st))
	goldenAdmin(t, "status_cluster.json", buf.Bytes())

	buf.Reset()
	require.NoError(t, enc.Encode(adminapi.ClusterInfra{Node: "n1", StreamLeader: "n3",
		Servers:  []adminapi.NATSServer{{URL: "nats://10.0.0.1:4222", Connected: true}, {URL: "nats://10.0.0.2:4222"}},
		Replicas: []adminapi.StreamReplica{{Name: "n1", Current: true, ActiveSeconds: 0.25}, {Name: "n2", Offline: true, ActiveSeconds: 30, Lag: 7}}}))
	goldenAdmin(t, "cluster_infra.json", buf.Bytes())
}

// TestAdminTokenAnswersAreStable pins the encodings of the tokens
// answers: a page, an issued token (its bearer), a revocation, a recently
// disconnected device.
func TestAdminTokenAnswersAreStable(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	device := adminapi.TokenInfo{ID: "0a1b2c3d4e5f", CreatedAt: at, Sessions: 1,
		TokenRequest: adminapi.TokenRequest{Tenant: "acme", User: "alice", ClientID: "alice:phone", Read: []string{"*"}, Write: []string{"notes"}}}
	admin := adminapi.TokenInfo{ID: "ffeeddccbbaa", CreatedAt: at, TokenRequest: adminapi.TokenRequest{Admin: true}}
	for name, v := range map[string]any{
		"tokens.json":        adminapi.TokensPage{Tokens: []adminapi.TokenInfo{device, admin}, Next: "ffeeddccbbaa", Total: 3},
		"token_issued.json":  adminapi.IssuedToken{Token: device, Bearer: "sdk_0a1b2c3d4e5f_SECRET"},
		"token_revoked.json": adminapi.TokenRevoked{TokenID: "0a1b2c3d4e5f", ClosedSessions: 1},
		"recent.json": []adminapi.RecentDevice{{Tenant: "acme", ClientID: "alice:phone", LastPushAt: at, LastPushOps: 3,
			LastError: "forbidden_model", LastErrorAt: at, DisconnectedAt: at.Add(time.Minute)}},
	} {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		require.NoError(t, enc.Encode(v))
		goldenAdmin(t, name, buf.Bytes())
	}
}
