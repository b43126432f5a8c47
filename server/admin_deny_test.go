package server_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/server/auth/authtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// adminDo sends method to an admin path with a JSON body (nil for none),
// decodes a JSON answer into out (when not nil) and returns the status.
func (ts *testServer) adminDo(t testing.TB, method, path string, body, out any) int {
	t.Helper()
	status, err := ts.adminSend(method, path, body, out)
	require.NoError(t, err)
	return status
}

// adminSend is adminDo returning its error, for a goroutine other than
// the test's.
func (ts *testServer) adminSend(method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, ts.adminURL+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+ts.adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode < 300 {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, err
		}
	}
	return resp.StatusCode, nil
}

// adminWhileClosed sends an admin request as adminDo does while c reads
// its session to the end, requires the answer to be 200 and c's session
// to end with an error of code and its close, and returns that error. A
// request that ends sessions (a denial, a revocation) answers once they
// are closed: c answers its close at once, where a client that read only
// after the answer would leave the server waiting out the websocket close
// handshake's timeout (5 s) before it answers.
func (ts *testServer) adminWhileClosed(t testing.TB, c *wsClient, method, path string, body, out any, code syncproto.Code) *syncproto.Error {
	t.Helper()
	type answer struct {
		status int
		err    error
	}
	answered := make(chan answer, 1)
	go func() { // owned by this call: it waits for the answer below
		status, err := ts.adminSend(method, path, body, out)
		answered <- answer{status, err}
	}()
	e := c.expectRefusalClose(code)
	a := <-answered
	require.NoError(t, a.err)
	require.Equal(t, http.StatusOK, a.status, "%s %s", method, path)
	return e
}

// TestAdminDenyListClosesSessionsAtOnce: a jti or a user denied through
// the admin API is in force when the answer comes, its open sessions
// already ended with unauthorized (the periodic recheck is an hour away),
// the deny-list file holds the entry, and removing it lets the token in
// again.
func TestAdminDenyListClosesSessionsAtOnce(t *testing.T) {
	ts := startJWTServer(t, server.Config{TokenRecheck: time.Hour}, nil)
	now := time.Now()
	byJTI := ts.idp.Sign("RS256", authtest.Claims("alice", "acme", now, time.Minute, map[string]any{"jti": "j-1"}))
	c1, _ := session(t, ts.testServer, byJTI, "alice:phone")
	c2, _ := session(t, ts.testServer, ts.idp.Token("ES256", "bob", "acme", time.Minute), "bob:phone")
	c3, _ := session(t, ts.testServer, ts.idp.Token("EdDSA", "carol", "acme", time.Minute), "carol:tablet")

	var sessions []adminapi.Session
	require.Equal(t, http.StatusOK, ts.adminGet(t, adminapi.PathSessions, ts.adminToken, &sessions))
	users := map[string]string{}
	for _, s := range sessions {
		users[s.ClientID] = s.User
	}
	require.Equal(t, map[string]string{"alice:phone": "alice", "bob:phone": "bob", "carol:tablet": "carol"}, users, "sessions show their user")

	var ch adminapi.DenyChange
	until := now.Add(time.Minute).Truncate(time.Second).UTC()
	e := ts.adminWhileClosed(t, c1, http.MethodPost, adminapi.PathDeny, adminapi.Denial{JTI: "j-1", Until: until}, &ch, syncproto.CodeUnauthorized)
	require.Equal(t, 1, ch.ClosedSessions)
	require.Contains(t, e.Message, "was revoked")
	refusedUpgrade(t, ts.testServer, dialOptions(byJTI), http.StatusUnauthorized)

	ts.adminWhileClosed(t, c2, http.MethodPost, adminapi.PathDeny, adminapi.Denial{User: "bob", Until: until}, &ch, syncproto.CodeUnauthorized)
	require.Equal(t, 1, ch.ClosedSessions)
	c3.barrier() // carol is untouched

	var list adminapi.DenyList
	require.Equal(t, http.StatusOK, ts.adminGet(t, adminapi.PathDeny, ts.adminToken, &list))
	require.Equal(t, []adminapi.DeniedJTI{{JTI: "j-1", ExpiresAt: until}}, list.JTIs)
	require.Len(t, list.Users, 1)
	require.Equal(t, "bob", list.Users[0].User)
	require.Equal(t, until, list.Users[0].Until)
	onDisk, err := auth.ReadDenyList(ts.deny)
	require.NoError(t, err)
	require.Len(t, onDisk.JTIs, 1, "the deny-list file holds the entries")
	require.Len(t, onDisk.Users, 1)

	// Un-revoke: the token works again at once.
	require.Equal(t, http.StatusOK, ts.adminDo(t, http.MethodDelete, adminapi.PathDeny+"?"+url.Values{adminapi.ParamJTI: {"j-1"}}.Encode(), nil, &ch))
	require.Empty(t, ch.List.JTIs)
	c4, _ := session(t, ts.testServer, byJTI, "alice:phone")
	c4.barrier()
	require.Equal(t, http.StatusNotFound, ts.adminDo(t, http.MethodDelete, adminapi.PathDeny+"?jti=j-1", nil, nil))

	// Bad requests change nothing.
	for _, body := range []any{
		adminapi.Denial{},
		adminapi.Denial{JTI: "x", User: "y"},
		map[string]string{"jti": "x", "surprise": "1"},
		"not an object",
	} {
		require.Equal(t, http.StatusBadRequest, ts.adminDo(t, http.MethodPost, adminapi.PathDeny, body, nil), "%v", body)
	}
	require.Equal(t, http.StatusBadRequest, ts.adminDo(t, http.MethodDelete, adminapi.PathDeny, nil, nil))
	after, err := auth.ReadDenyList(ts.deny)
	require.NoError(t, err)
	require.Equal(t, []auth.DeniedJTI{}, after.JTIs)
	require.Len(t, after.Users, 1)
}

// TestAdminDenyListNeedsADenyFile: without --jwt-deny-file the deny list
// cannot be listed or changed (409), and a client token cannot reach it.
func TestAdminDenyListNeedsADenyFile(t *testing.T) {
	ts := startServer(t, server.Config{})
	require.Equal(t, http.StatusConflict, ts.adminGet(t, adminapi.PathDeny, ts.adminToken, nil))
	require.Equal(t, http.StatusConflict, ts.adminDo(t, http.MethodPost, adminapi.PathDeny, adminapi.Denial{JTI: "x"}, nil))
	require.Equal(t, http.StatusUnauthorized, ts.adminGet(t, adminapi.PathDeny, ts.Member(t, "acme", "dev-a"), nil))
}
