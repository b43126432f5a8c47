package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// TestClusterProcessStaleTokenFile: a token revoked in the token file of
// two nodes but not in the third's. The third stops serving (/readyz 503
// naming the token file) and takes no write with the revoked token, which
// the other two refuse outright; nothing of it lands anywhere. Its file
// brought up to date, the third serves again.
func TestClusterProcessStaleTokenFile(t *testing.T) {
	pc := startProcCluster(t)
	token := pc.member(t, "phone")
	tokens, err := auth.ReadFile(pc.tokens)
	require.NoError(t, err)
	id := tokens[len(tokens)-1].TokenID

	// node-3 gets a token file of its own, a copy of the shared one.
	stale := filepath.Join(t.TempDir(), "tokens.json")
	copyFile := func() {
		data, err := os.ReadFile(pc.tokens)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(stale, data, 0o600))
	}
	copyFile()
	third := pc.nodes[2]
	third.kill(t)
	third.args = append(third.args, "--tokens", stale)
	third.start(t)
	third.waitReady(t)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clock := syncproto.NewClock("phone", nil)
	open, err := dialPush(ctx, third, token, "phone", clock)
	require.NoError(t, err, "a session on node-3 before the revocation")
	defer open.close()

	require.NoError(t, auth.Revoke(pc.tokens, id))
	requireOutOfAgreement(t, pc, third, "tokens")

	// The stale node still knows the token, but serves nobody: its open
	// session is closed (server_busy: another node serves) and new ones
	// are refused, so the revoked token neither writes nor reads there.
	var closed error
	require.Eventually(t, func() bool {
		_, closed = open.roundTrip(ctx, &syncproto.Ping{ID: "k"})
		return closed != nil
	}, time.Minute, 100*time.Millisecond, "the stale node's open session is closed")
	var busy *syncproto.Error
	require.ErrorAs(t, closed, &busy)
	require.Equal(t, syncproto.CodeServerBusy, busy.Code, "closed as busy: another node serves")
	_, err = dialPush(ctx, third, token, "phone", clock)
	require.ErrorContains(t, err, "503", "the stale node refuses new sessions")
	_, err = dialPush(ctx, pc.nodes[0], token, "phone", clock)
	require.Error(t, err, "a current node refuses the revoked token")
	for _, n := range pc.nodes {
		require.Empty(t, pc.admin(n).Oplog(t, "&tenant=acme"), "%s: nothing written", n.name)
	}

	copyFile()
	require.Eventually(t, third.ready, time.Minute, 200*time.Millisecond, "serves again once its file is current")
}

// readyz is n's /readyz status and body.
func readyz(n *procNode) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(n.url + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(body)
}

func mustOpID(t testing.TB) string {
	t.Helper()
	id, err := syncproto.NewOpID()
	require.NoError(t, err)
	return id
}

// TestClusterProcessJWTSettingsDiffer: three nodes verifying JWTs with
// the same shared secret; node-3 restarted with another required issuer
// (it would admit other tokens than its peers) refuses to serve, /readyz
// naming the JWT settings, while the others serve on; restarted with the
// cluster's settings, it serves again.
func TestClusterProcessJWTSettingsDiffer(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "jwt-secret")
	require.NoError(t, os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef0123456789abcdef"), 0o600))
	pc := startProcCluster(t, "--jwt-hs256-secret-file", secret, "--jwt-issuer", "https://id.example", "--jwt-audience", "app")
	third := pc.nodes[2]
	args := third.args
	third.kill(t)
	third.args = append(append([]string(nil), args...), "--jwt-issuer", "https://elsewhere.example")
	third.start(t)
	requireOutOfAgreement(t, pc, third, "jwt")

	third.kill(t)
	third.args = args
	third.start(t)
	third.waitReady(t)
}

// requireOutOfAgreement waits until node n answers /readyz 503 naming the
// agreement part it differs in, and checks that the other nodes serve on.
func requireOutOfAgreement(t testing.TB, pc *procCluster, n *procNode, part string) {
	t.Helper()
	require.Eventually(t, func() bool {
		code, body := readyz(n)
		return code == http.StatusServiceUnavailable && strings.Contains(body, part)
	}, time.Minute, 200*time.Millisecond, "%s names %s", n.name, part)
	for _, o := range pc.nodes {
		if o != n {
			require.True(t, o.ready(), "%s serves on", o.name)
		}
	}
}
