package server_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncproto"
)

// upgradeRequest is a raw websocket upgrade request for the sync endpoint,
// as a client sends it, with the headers a case then breaks.
func upgradeRequest(t *testing.T, ts *testServer, method, path string, header map[string]string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, ts.url+path, nil)
	require.NoError(t, err)
	base := map[string]string{
		"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol": syncproto.Subprotocol,
	}
	for k, v := range header {
		base[k] = v
	}
	for k, v := range base {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	return req
}

// Every refusal before the upgrade is a JSON error body with its code, and
// the checks run in PROTOCOL.md section 1's order: each case breaks two
// rules and must get the answer of the earlier one.
func TestUpgradeRefusalsFollowTheDocumentedOrder(t *testing.T) {
	// The order the cases below prove is the order section 1's table
	// states: path, method and upgrade headers, capacity, token, origin,
	// subprotocol, the token's session cap.
	require.Equal(t, []string{"404", "405", "503", "401", "403", "400", "429"}, documentedCheckOrder(t))
	ts := startServer(t, server.Config{AllowedOrigins: []string{"app.example.com"}, MaxConnections: 1})
	good := "Bearer " + ts.Member(t, "acme", "phone")
	cases := []struct {
		name         string
		method, path string
		header       map[string]string
		status       int
		code         syncproto.Code
	}{
		{"unknown path", http.MethodGet, "/v1/nowhere", map[string]string{"Authorization": ""}, http.StatusNotFound, syncproto.CodeBadRequest},
		{"path before method", http.MethodPost, "/v1/nowhere", nil, http.StatusNotFound, syncproto.CodeBadRequest},
		{"wrong method before token", http.MethodPost, syncproto.SyncPath, nil, http.StatusMethodNotAllowed, syncproto.CodeBadRequest},
		{"upgrade headers before token", http.MethodGet, syncproto.SyncPath, map[string]string{"Upgrade": ""}, http.StatusBadRequest, syncproto.CodeBadRequest},
		{"token before origin", http.MethodGet, syncproto.SyncPath, map[string]string{"Origin": "https://evil.example.org"}, http.StatusUnauthorized, syncproto.CodeUnauthorized},
		{"origin before subprotocol", http.MethodGet, syncproto.SyncPath, map[string]string{"Authorization": good, "Origin": "https://evil.example.org", "Sec-WebSocket-Protocol": "chat"}, http.StatusForbidden, syncproto.CodeForbiddenOrigin},
		{"subprotocol", http.MethodGet, syncproto.SyncPath, map[string]string{"Authorization": good, "Sec-WebSocket-Protocol": "chat"}, http.StatusBadRequest, syncproto.CodeBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.DefaultClient.Do(upgradeRequest(t, ts, tc.method, tc.path, tc.header))
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode)
			require.Equal(t, tc.code, httpErrorBody(t, resp).Code)
			if tc.status == http.StatusMethodNotAllowed {
				require.Equal(t, http.MethodGet, resp.Header.Get("Allow"), "section 17: 405 with Allow: GET")
			}
		})
	}

	t.Run("subprotocol before the token's session cap", func(t *testing.T) {
		capped := startServer(t, server.Config{Quotas: server.Quotas{MaxConnectionsPerToken: 1}})
		token := capped.Member(t, "acme", "phone")
		first := dial(t, capped, token)
		defer first.conn.CloseNow()
		resp, err := http.DefaultClient.Do(upgradeRequest(t, capped, http.MethodGet, syncproto.SyncPath,
			map[string]string{"Authorization": "Bearer " + token, "Sec-WebSocket-Protocol": "chat"}))
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		resp2, err := http.DefaultClient.Do(upgradeRequest(t, capped, http.MethodGet, syncproto.SyncPath,
			map[string]string{"Authorization": "Bearer " + token}))
		require.NoError(t, err)
		defer resp2.Body.Close()
		require.Equal(t, http.StatusTooManyRequests, resp2.StatusCode)
		require.Equal(t, syncproto.CodeRateLimited, httpErrorBody(t, resp2).Code)
		require.NotEmpty(t, resp2.Header.Get("Retry-After"))
	})

	t.Run("connection cap before token, after method and upgrade headers", func(t *testing.T) {
		first := dial(t, ts, ts.Member(t, "acme", "phone"))
		defer first.conn.CloseNow()
		resp, err := http.DefaultClient.Do(upgradeRequest(t, ts, http.MethodGet, syncproto.SyncPath, nil))
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		require.Equal(t, syncproto.CodeServerBusy, httpErrorBody(t, resp).Code)
		require.NotEmpty(t, resp.Header.Get("Retry-After"))

		// At the cap, a request that is no upgrade gets the earlier checks'
		// answers, not 503.
		for _, tc := range []struct {
			method string
			header map[string]string
			status int
		}{
			{http.MethodPost, nil, http.StatusMethodNotAllowed},
			{http.MethodGet, map[string]string{"Upgrade": ""}, http.StatusBadRequest},
		} {
			resp, err := http.DefaultClient.Do(upgradeRequest(t, ts, tc.method, syncproto.SyncPath, tc.header))
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode, "%s %v at the cap", tc.method, tc.header)
			require.Equal(t, syncproto.CodeBadRequest, httpErrorBody(t, resp).Code)
		}
	})
}

// A browser cannot set Authorization on a websocket upgrade: it offers the
// token as a second subprotocol entry. The server selects syncproto.v1
// only (the token is never echoed), and the origin allow-list applies.
func TestTokenInSubprotocolEntry(t *testing.T) {
	ts := startServer(t, server.Config{AllowedOrigins: []string{"app.example.com"}})
	token := ts.Member(t, "acme", "browser")
	browser := func(origin string) *websocket.DialOptions {
		return &websocket.DialOptions{
			Subprotocols: []string{syncproto.Subprotocol, server.BearerSubprotocolPrefix + token},
			HTTPHeader:   http.Header{"Origin": {origin}},
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, ts.syncURL(), browser("https://app.example.com"))
	require.NoError(t, err)
	require.Equal(t, syncproto.Subprotocol, resp.Header.Get("Sec-WebSocket-Protocol"), "only syncproto.v1 is selected")
	c := &wsClient{t: t, conn: conn}
	defer conn.CloseNow()
	clock := syncproto.NewClock("browser", nil)
	c.hello("browser", 0, clock)
	requireApplied(t, c.push("p1", put(t, clock, "notes", "from-a-browser", `"hi"`)))

	require.Equal(t, syncproto.CodeForbiddenOrigin, refusedUpgrade(t, ts, browser("https://evil.example.org"), http.StatusForbidden).Code)
	wrong := browser("https://app.example.com")
	wrong.Subprotocols[1] = server.BearerSubprotocolPrefix + token + "x"
	require.Equal(t, syncproto.CodeUnauthorized, refusedUpgrade(t, ts, wrong, http.StatusUnauthorized).Code)
}

// documentedCheckOrder returns the HTTP statuses of PROTOCOL.md section 1's
// check table, in its order (the first status of each row).
func documentedCheckOrder(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../PROTOCOL.md")
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(doc), "| check | HTTP status |")
	require.True(t, ok, "section 1's check table is missing")
	table, _, _ = strings.Cut(table, "\n\n")
	var statuses []string
	for _, line := range strings.Split(table, "\n")[2:] { // past the header and its rule
		cells := strings.Split(line, "|")
		require.Greater(t, len(cells), 3, "row %q", line)
		fields := strings.Fields(cells[2])
		require.NotEmpty(t, fields, "row %q has no status", line)
		statuses = append(statuses, strings.TrimSuffix(fields[0], ","))
	}
	return statuses
}
