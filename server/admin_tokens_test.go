package server_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// TestAdminTokensIssueListRevoke: a token issued through the admin API
// works at once and its bearer is in the issuing answer only; the list
// pages by id and never holds a secret; a revocation is in force when the
// answer comes, its open session already ended unauthorized (the periodic
// recheck is an hour away); bad requests change nothing.
func TestAdminTokensIssueListRevoke(t *testing.T) {
	ts := startServer(t, server.Config{TokenRecheck: time.Hour})
	var issued adminapi.IssuedToken
	require.Equal(t, http.StatusCreated, ts.adminDo(t, http.MethodPost, adminapi.PathTokens,
		adminapi.TokenRequest{Tenant: "acme", ClientID: "tablet", Read: []string{"*"}, Write: []string{"notes"}}, &issued))
	require.True(t, strings.HasPrefix(issued.Bearer, "sdk_"+issued.Token.ID+"_"), "a device token: %s", issued.Token.ID)
	require.Equal(t, []string{"notes"}, issued.Token.Write)
	require.False(t, issued.Token.CreatedAt.IsZero())

	c, clock := session(t, ts, issued.Bearer, "tablet")
	requireApplied(t, c.push("p1", put(t, clock, "notes", "n1", `"one"`)))

	// Pages of two over every token of the file (the harness's admin
	// token, this one, and five more), sorted by id, no secret in any.
	for i := range 5 {
		require.Equal(t, http.StatusCreated, ts.adminDo(t, http.MethodPost, adminapi.PathTokens, adminapi.TokenRequest{Tenant: "acme", ClientID: fmt.Sprintf("d%d", i)}, nil))
	}
	onDisk, err := auth.ReadFile(ts.tokenPath)
	require.NoError(t, err)
	var ids []string
	after := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		var page adminapi.TokensPage
		require.Equal(t, http.StatusOK, ts.adminGet(t, adminapi.PathTokens+"?"+url.Values{adminapi.ParamLimit: {"2"}, adminapi.ParamAfter: {after}}.Encode(), ts.adminToken, &page))
		require.Equal(t, len(onDisk), page.Total)
		require.LessOrEqual(t, len(page.Tokens), 2)
		for _, tok := range page.Tokens {
			ids = append(ids, tok.ID)
			if tok.ID == issued.Token.ID {
				require.Equal(t, 1, tok.Sessions, "the tablet's session")
			}
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	require.Len(t, ids, len(onDisk))
	require.IsIncreasing(t, ids)
	var one adminapi.TokensPage
	require.Equal(t, http.StatusOK, ts.adminGet(t, adminapi.PathTokens+"?token_id="+issued.Token.ID, ts.adminToken, &one))
	require.Len(t, one.Tokens, 1)
	secret := strings.TrimPrefix(issued.Bearer, "sdk_"+issued.Token.ID+"_")
	resp := syncdtest.Get(t, ts.adminURL+adminapi.PathTokens, ts.adminToken)
	list, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.NotContains(t, string(list), secret, "the list holds no secret")

	// Revoke: in force at the answer, the session already closed.
	var rev adminapi.TokenRevoked
	ts.adminWhileClosed(t, c, http.MethodDelete, adminapi.PathTokens+"?token_id="+issued.Token.ID, nil, &rev, syncproto.CodeUnauthorized)
	require.Equal(t, adminapi.TokenRevoked{TokenID: issued.Token.ID, ClosedSessions: 1}, rev)
	refusedUpgrade(t, ts, dialOptions(issued.Bearer), http.StatusUnauthorized)
	require.Equal(t, http.StatusNotFound, ts.adminDo(t, http.MethodDelete, adminapi.PathTokens+"?token_id="+issued.Token.ID, nil, nil))
	require.Equal(t, 6.0, ts.MetricValue(t, `syncd_admin_token_changes_total{change="issued"}`))
	require.Equal(t, 1.0, ts.MetricValue(t, `syncd_admin_token_changes_total{change="revoked"}`))

	// Bad requests change nothing.
	before, err := auth.ReadFile(ts.tokenPath)
	require.NoError(t, err)
	for _, body := range []any{
		adminapi.TokenRequest{},
		adminapi.TokenRequest{Admin: true, Tenant: "acme"},
		adminapi.TokenRequest{Tenant: "acme", ClientID: "bad id with spaces"},
		map[string]string{"tenant": "acme", "client_id": "x", "surprise": "1"},
		"not an object",
	} {
		require.Equal(t, http.StatusBadRequest, ts.adminDo(t, http.MethodPost, adminapi.PathTokens, body, nil), "%v", body)
	}
	require.Equal(t, http.StatusBadRequest, ts.adminDo(t, http.MethodDelete, adminapi.PathTokens, nil, nil))
	require.Equal(t, http.StatusBadRequest, ts.adminGet(t, adminapi.PathTokens+"?limit=-1", ts.adminToken, nil))
	require.Equal(t, http.StatusUnauthorized, ts.adminGet(t, adminapi.PathTokens, ts.Member(t, "acme", "intruder"), nil))
	after2, err := auth.ReadFile(ts.tokenPath)
	require.NoError(t, err)
	require.Len(t, after2, len(before)+1, "only the intruder's token was added (by the test, not the API)")
}

// TestAdminDevicesLastPushAndError: the sessions answer carries each
// device's last push (time, mutations) and the last error its pushes got;
// once its session ends the device is listed among the recently
// disconnected with the same figures.
func TestAdminDevicesLastPushAndError(t *testing.T) {
	ts := startServer(t, server.Config{})
	token := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "phone", Read: []string{"*"}, Write: []string{"notes"}})
	c, clock := session(t, ts, token, "phone")
	var sessions []adminapi.Session
	require.Equal(t, http.StatusOK, ts.adminGet(t, adminapi.PathSessions, ts.adminToken, &sessions))
	require.Len(t, sessions, 1)
	require.True(t, sessions[0].LastPushAt.IsZero(), "no push yet")

	requireApplied(t, c.push("p1", put(t, clock, "notes", "a", `1`), put(t, clock, "notes", "b", `2`)))
	require.Equal(t, http.StatusOK, ts.adminGet(t, adminapi.PathSessions, ts.adminToken, &sessions))
	require.Equal(t, 2, sessions[0].LastPushOps)
	require.False(t, sessions[0].LastPushAt.IsZero())
	require.Empty(t, sessions[0].LastError)

	res := c.push("p2", put(t, clock, "secrets", "s", `1`))
	require.Equal(t, syncproto.StatusRejected, res[0].Status)
	require.Equal(t, http.StatusOK, ts.adminGet(t, adminapi.PathSessions, ts.adminToken, &sessions))
	require.Equal(t, 1, sessions[0].LastPushOps)
	require.Equal(t, string(syncproto.CodeForbiddenModel), sessions[0].LastError)
	require.False(t, sessions[0].LastErrorAt.IsZero())

	c.conn.Close(websocket.StatusNormalClosure, "done")
	var recent []adminapi.RecentDevice
	deadline := time.Now().Add(10 * time.Second)
	for len(recent) == 0 {
		require.True(t, time.Now().Before(deadline), "the device among the recently disconnected")
		require.Equal(t, http.StatusOK, ts.adminGet(t, adminapi.PathRecentDevices, ts.adminToken, &recent))
		time.Sleep(50 * time.Millisecond)
	}
	require.Len(t, recent, 1)
	require.Equal(t, "phone", recent[0].ClientID)
	require.Equal(t, string(syncproto.CodeForbiddenModel), recent[0].LastError)
	require.False(t, recent[0].DisconnectedAt.IsZero())
	require.Equal(t, 1.0, ts.MetricValue(t, "syncd_admin_devices_tracked"))
}
