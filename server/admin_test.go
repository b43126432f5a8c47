package server_test

import (
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

func TestAdminAPI(t *testing.T) {
	ts := startServer(t, server.Config{NodeID: "node-7", Policies: replication.Config{"accounts": syncproto.PolicyOptimistic}})
	token := ts.Member(t, "acme", "phone")
	c, clock := session(t, ts, token, "phone")
	c.subscribe("s1", 0)
	m1 := put(t, clock, "notes", "n1", `"one"`)
	m2 := putIf(t, clock, "accounts", "a1", `{"balance":1}`, 0)
	requireApplied(t, c.push("p1", m1, m2))
	stale := putIf(t, clock, "accounts", "a1", `{"balance":2}`, 0)
	require.Equal(t, syncproto.StatusConflict, c.push("p2", stale)[0].Status)
	c.waitLive(2)

	t.Run("refuses without an admin token", func(t *testing.T) {
		for _, path := range []string{"/v1/admin/status", "/v1/admin/clients", "/v1/admin/oplog", "/v1/admin/conflicts", "/v1/admin/ledger/" + m1.OpID + "?tenant=acme",
			"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/cmdline"} {
			require.Equal(t, http.StatusUnauthorized, ts.adminGet(t, path, "", nil), path)
			require.Equal(t, http.StatusUnauthorized, ts.adminGet(t, path, token, nil), "a client token is not an admin token: %s", path)
			require.Equal(t, http.StatusUnauthorized, ts.adminGet(t, path, ts.adminToken+"x", nil), path)
		}
		require.Equal(t, http.StatusNotFound, syncdtest.GetJSON(t, ts.url+"/v1/admin/status", ts.adminToken, nil), "the admin API is not on the public listener")
	})

	t.Run("status", func(t *testing.T) {
		st := ts.Status(t)
		require.Equal(t, "node-7", st.NodeID)
		require.Equal(t, 1, st.Connections)
		require.False(t, st.Draining)
		require.Equal(t, uint64(2), st.OplogHead)
		require.Equal(t, uint64(1), st.OplogOldest)
		require.Equal(t, 3, st.LedgerEntries, "two applied, one conflict")
	})

	t.Run("clients show the connected client and its cursor", func(t *testing.T) {
		var clients []adminapi.Session
		require.Eventually(t, func() bool {
			clients = nil
			require.Equal(t, http.StatusOK, ts.adminGet(t, "/v1/admin/clients", ts.adminToken, &clients))
			return len(clients) == 1 && clients[0].Cursor == 2
		}, ioTimeout, 5*time.Millisecond, "clients: %+v", clients)
		require.Equal(t, "phone", clients[0].ClientID)
		require.Equal(t, "acme", clients[0].Tenant)
		require.NotEmpty(t, clients[0].TokenID)
		require.Zero(t, clients[0].PendingPushes)
	})

	t.Run("oplog tail", func(t *testing.T) {
		var page adminapi.OplogPage
		require.Equal(t, http.StatusOK, ts.adminGet(t, "/v1/admin/oplog?from=1", ts.adminToken, &page))
		require.Len(t, page.Entries, 1)
		require.Equal(t, m2.OpID, page.Entries[0].OpID)
		require.Equal(t, "acme", page.Entries[0].Tenant)
		require.Equal(t, "phone", page.Entries[0].ClientID)
		require.Equal(t, uint64(2), page.Head)
		require.Len(t, ts.Oplog(t, "&model=notes"), 1)
		require.Empty(t, ts.Oplog(t, "&tenant=globex"))
		require.Equal(t, http.StatusBadRequest, ts.adminGet(t, "/v1/admin/oplog?from=-1", ts.adminToken, nil))
		require.Equal(t, http.StatusConflict, ts.adminGet(t, "/v1/admin/oplog?from=99", ts.adminToken, nil), "a cursor past the head")
	})

	t.Run("conflicts", func(t *testing.T) {
		var rows []adminapi.Conflict
		require.Equal(t, http.StatusOK, ts.adminGet(t, "/v1/admin/conflicts?tenant=acme", ts.adminToken, &rows))
		require.Len(t, rows, 1)
		require.Equal(t, stale.OpID, rows[0].Loser.OpID)
		require.Equal(t, m2.OpID, rows[0].Winner.OpID)
		require.Equal(t, syncproto.PolicyOptimistic, rows[0].Policy)
		rows = nil
		require.Equal(t, http.StatusOK, ts.adminGet(t, "/v1/admin/conflicts?before="+strconv.FormatInt(rowsID(t, ts), 10), ts.adminToken, &rows))
		require.Empty(t, rows, "paging past the oldest row")
	})

	t.Run("ledger lookup", func(t *testing.T) {
		ans, found := ts.Decided(t, "acme", m1.OpID)
		require.True(t, found)
		require.Equal(t, syncproto.StatusApplied, ans.Result.Status)
		require.Equal(t, uint64(1), ans.Result.Seq)
		require.Equal(t, m1.HLC.Wall, ans.OpTime.UnixMilli())
		ans, found = ts.Decided(t, "acme", stale.OpID)
		require.True(t, found)
		require.Equal(t, syncproto.StatusConflict, ans.Result.Status)
		_, found = ts.Decided(t, "globex", m1.OpID)
		require.False(t, found, "op ids are per tenant")
		require.Equal(t, http.StatusBadRequest, ts.adminGet(t, "/v1/admin/ledger/"+m1.OpID, ts.adminToken, nil), "tenant is required")
	})
}

// rowsID is the id of the only conflict row.
func rowsID(t *testing.T, ts *testServer) int64 {
	t.Helper()
	var rows []adminapi.Conflict
	require.Equal(t, http.StatusOK, ts.adminGet(t, "/v1/admin/conflicts", ts.adminToken, &rows))
	require.Len(t, rows, 1)
	return rows[0].ID
}

func TestMetricsAfterAScenario(t *testing.T) {
	ts := startServer(t, server.Config{Policies: replication.Config{"accounts": syncproto.PolicyOptimistic}})
	c, clock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	older := put(t, clock, "notes", "n", `"older"`)
	m := put(t, clock, "notes", "n", `"newer"`)
	requireApplied(t, c.push("p1", m, putIf(t, clock, "accounts", "a", `1`, 0)))
	require.Equal(t, syncproto.StatusDuplicate, c.push("p2", m)[0].Status)
	require.Equal(t, syncproto.StatusSuperseded, c.push("p3", older)[0].Status)
	require.Equal(t, syncproto.StatusConflict, c.push("p4", putIf(t, clock, "accounts", "a", `2`, 0))[0].Status)
	require.Equal(t, syncproto.StatusRejected, c.push("p5", put(t, clock, "Bad", "k", `1`))[0].Status)

	for series, want := range map[string]string{
		`syncd_mutations_total{status="applied"}`:    "2",
		`syncd_mutations_total{status="duplicate"}`:  "1",
		`syncd_mutations_total{status="superseded"}`: "1",
		`syncd_mutations_total{status="conflict"}`:   "1",
		`syncd_mutations_total{status="rejected"}`:   "1",
		`syncd_conflicts_total{policy="lww"}`:        "1",
		`syncd_conflicts_total{policy="optimistic"}`: "1",
		`syncd_ledger_hits_total`:                    "1",
		`syncd_apply_duration_seconds_count`:         "5",
		`syncd_pushes_total`:                         "5",
		`syncd_connections`:                          "1",
		`syncd_oplog_head_seq`:                       "2",
		`syncd_connections_total{result="accepted"}`: "1",
	} {
		require.Equal(t, want, ts.Metric(t, series), series)
	}
	require.NotEmpty(t, ts.Metric(t, `syncd_apply_duration_seconds_bucket{le="+Inf"}`))
	require.Equal(t, http.StatusOK, syncdtest.GetJSON(t, ts.url+"/healthz", "", nil))
}

func TestLogsHoldNoTokensOrValues(t *testing.T) {
	var logs syncdtest.Buffer
	ts := startServer(t, server.Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	token := ts.Member(t, "acme", "phone")
	c, clock := session(t, ts, token, "phone")
	const secretValue = `"a value that must never be logged"`
	requireApplied(t, c.push("p1", put(t, clock, "notes", "n", secretValue)))
	require.Equal(t, syncproto.StatusRejected, c.push("p2", put(t, clock, "Bad", "n", secretValue))[0].Status)
	refusedUpgrade(t, ts, dialOptions(token+"x"), http.StatusUnauthorized)
	c.send(&syncproto.Hello{ID: "h2", ClientID: "phone", HLC: clock.Now()})
	c.recvError("h2", syncproto.CodeHelloRequired)
	c.expectClose(syncproto.CloseProtocolError)
	ts.stop(t)

	out := logs.String()
	require.Contains(t, out, "authentication failed", "the logs were captured")
	_, secret, _ := strings.Cut(strings.TrimPrefix(token, "sdk_"), "_")
	require.NotContains(t, out, secret)
	require.NotContains(t, out, "must never be logged")
}

func TestProfilesNeedTheAdminToken(t *testing.T) {
	ts := startServer(t, server.Config{})
	resp := syncdtest.Get(t, ts.adminURL+"/debug/pprof/goroutine?debug=1", ts.adminToken)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(body), "goroutine profile")
}
