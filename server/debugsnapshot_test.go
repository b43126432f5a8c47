package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// newUnserved opens a server over cfg with a fresh database and an empty
// token file, serving nothing.
func newUnserved(t *testing.T, cfg server.Config) (*server.Server, error) {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.json")
	require.NoError(t, os.WriteFile(tokens, []byte(`{"version":1,"tokens":[]}`), 0o600))
	a, err := auth.NewAuthenticator(tokens, nil)
	require.NoError(t, err)
	cfg.DataPath, cfg.Authenticator = filepath.Join(dir, "syncd.db"), a
	return server.New(context.Background(), cfg)
}

// TestStartupzAnswers503UntilServing: a server answers /startupz 503
// "starting" until MarkServing, 200 "serving" after, on both handlers.
func TestStartupzAnswers503UntilServing(t *testing.T) {
	srv, err := newUnserved(t, server.Config{RetentionInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	startupz := func(h http.Handler) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/startupz", nil))
		var body struct{ Status string }
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
		return rec.Code, body.Status
	}
	for _, h := range []http.Handler{srv.Handler(), srv.AdminHandler()} {
		code, status := startupz(h)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, "starting", status)
	}
	srv.MarkServing()
	for _, h := range []http.Handler{srv.Handler(), srv.AdminHandler()} {
		code, status := startupz(h)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "serving", status)
	}
}

// TestDebugSnapshotShowsTheServersMovingParts: GET /debug/snapshot on the
// admin listener, with the admin token, lists the open sessions (without
// tokens or values), the pools, the hook breakers and the queues; without
// the token it is refused, and the public listener does not serve it.
func TestDebugSnapshotShowsTheServersMovingParts(t *testing.T) {
	srv := syncdtest.Start(t, server.Config{
		Policies: replication.Config{"notes": syncproto.PolicyHook},
		Hook: func(context.Context, replication.Record, bool, replication.Proposal) (replication.HookResult, error) {
			return replication.Accept(), nil
		},
	})
	ts := &testServer{Server: srv, srv: srv.Server, url: srv.URL, adminURL: srv.AdminURL, tokenPath: srv.TokenPath, adminToken: srv.AdminToken}
	token := ts.Member(t, "acme", "phone")
	c, clock := session(t, ts, token, "phone")
	requireApplied(t, c.push("p1", put(t, clock, "notes", "k", `"secret-value"`)))

	var snap server.DebugSnapshot
	require.Equal(t, http.StatusOK, syncdtest.GetJSON(t, srv.AdminURL+"/debug/snapshot", srv.AdminToken, &snap))
	require.True(t, snap.Serving)
	require.False(t, snap.Draining)
	require.Equal(t, 1, snap.SessionsTotal)
	require.Len(t, snap.Sessions, 1)
	require.Equal(t, "acme", snap.Sessions[0].Tenant)
	require.Equal(t, "phone", snap.Sessions[0].ClientID)
	require.Equal(t, []replication.BreakerStatus{{Model: "notes", State: replication.BreakerClosed, Calls: 1}}, snap.Breakers)
	require.Positive(t, snap.Pools.Database.MaxOpenConnections)
	require.Positive(t, snap.Pools.FrameBudgetBytes)
	require.Nil(t, snap.Lease, "a single node holds no lease")

	resp := syncdtest.Get(t, srv.AdminURL+"/debug/snapshot", srv.AdminToken)
	defer resp.Body.Close()
	body := make([]byte, server.MaxDebugSnapshotBytes+1)
	n, _ := resp.Body.Read(body)
	require.NotContains(t, string(body[:n]), "secret-value")
	require.NotContains(t, string(body[:n]), token)

	for _, tc := range []struct {
		url, token string
		want       int
	}{
		{srv.AdminURL + "/debug/snapshot", "", http.StatusUnauthorized},
		{srv.AdminURL + "/debug/snapshot", token, http.StatusUnauthorized},
		{srv.URL + "/debug/snapshot", srv.AdminToken, http.StatusNotFound},
	} {
		resp := syncdtest.Get(t, tc.url, tc.token)
		resp.Body.Close()
		require.Equal(t, tc.want, resp.StatusCode, "%s with %q", tc.url, tc.token)
	}
}
