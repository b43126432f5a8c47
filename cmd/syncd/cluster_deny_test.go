package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/server/auth/authtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// partMetric matches the agreement instrument name{labels} of a part
// (labels in the order Prometheus writes them, part last).
func partMetric(name, labels string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name+"{"+labels+"}") + ` (\S+)$`)
}

// The agreement's instruments of the deny list's part (docs/metrics.md).
var (
	denyBehind     = partMetric("syncd_cluster_config_behind", `part="jwt_deny"`)
	denyGeneration = partMetric("syncd_cluster_config_generation", `part="jwt_deny"`)
	denyCaughtUp   = partMetric("syncd_cluster_config_grace_ends_total", `outcome="caught_up",part="jwt_deny"`)
	denyExpired    = partMetric("syncd_cluster_config_grace_ends_total", `outcome="expired",part="jwt_deny"`)
	// rereadsSame counts the surveys at which a node saw a peer publish
	// other values and found its own files unchanged.
	rereadsSame = partMetric("syncd_cluster_config_rereads_total", `result="same"`)
)

// TestClusterProcessDenyListRolledOutNodeByNode: three nodes verify JWTs
// with one shared secret and each reads its own copy of the deny list. A
// JWT is revoked in the operator's list (the next generation) and the
// list copied to one node at a time:
//   - node-1, copied first, refuses the revoked JWT and never stops
//     serving, alone with the new list for four surveys (by digest it is
//     outvoted two to one and stops at the third: the flap this part's
//     generation removes); its device's session stays open throughout;
//   - node-2, copied within the grace, catches up without ever refusing
//     and refuses the revoked JWT;
//   - node-3, never copied, serves inside the grace and then refuses
//     (/readyz 503 naming jwt_deny, its device's session closed) while the
//     others serve on; copied at last, it serves again and refuses the
//     revoked JWT.
//
// Then a user is denied through node-2's admin API and node-2's file is
// copied to the others: no node stops serving, every node publishes the
// new generation and refuses the user's JWT. A JWT never denied is
// admitted by every node at the end.
func TestClusterProcessDenyListRolledOutNodeByNode(t *testing.T) {
	dir := t.TempDir()
	secret := []byte(strings.Repeat("0123456789abcdef", 3))
	secretFile := filepath.Join(dir, "jwt-secret")
	require.NoError(t, os.WriteFile(secretFile, secret, 0o600))
	operator := filepath.Join(dir, "deny.json") // the operator's list, copied to each node
	_, err := auth.Deny(operator, auth.Denial{JTI: "long-gone"}, time.Now())
	require.NoError(t, err)
	own := make([]string, 3)
	copyTo := func(from string, i int) {
		t.Helper()
		data, err := os.ReadFile(from)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(own[i]+".tmp", data, 0o600))
		require.NoError(t, os.Rename(own[i]+".tmp", own[i]), "a copy lands whole, as scp or configuration management would")
	}
	for i := range own {
		own[i] = filepath.Join(dir, fmt.Sprintf("node-%d-deny", i+1), "deny.json")
		require.NoError(t, os.MkdirAll(filepath.Dir(own[i]), 0o700))
		copyTo(operator, i)
	}
	pc := startProcClusterEach(t, func(_, _ int, addr string) string { return addr },
		func(i int) []string { return []string{"--jwt-deny-file", own[i]} },
		"--jwt-hs256-secret-file", secretFile, "--jwt-issuer", authtest.Issuer, "--jwt-audience", authtest.Audience,
		"--cluster-tokens-grace", "30s")
	first, second, third := pc.nodes[0], pc.nodes[1], pc.nodes[2]
	stop := watchReady(pc)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	sign := func(user, jti string) string {
		t.Helper()
		tok, err := auth.SignHS256(secret, authtest.Claims(user, "acme", time.Now(), 10*time.Minute, map[string]any{"jti": jti}))
		require.NoError(t, err)
		return tok
	}
	admits := func(n *procNode, token, clientID string) bool {
		c, err := dialPush(ctx, n, token, clientID, syncproto.NewClock(clientID, nil))
		if err != nil {
			return false
		}
		c.close()
		return true
	}
	refusesAtOnce := func(n *procNode, token, clientID, why string) {
		t.Helper()
		require.Eventually(t, func() bool { return !admits(n, token, clientID) }, time.Minute, 200*time.Millisecond, "%s refuses %s", n.name, why)
	}
	stolen := sign("alice", "stolen")
	for _, n := range pc.nodes {
		require.True(t, admits(n, stolen, "alice:phone"), "%s admits the JWT before its revocation", n.name)
	}
	conns := make([]*pushConn, len(pc.nodes))
	for i, n := range pc.nodes {
		id := fmt.Sprintf("bob:device-%d", i+1)
		c, err := dialPush(ctx, n, sign("bob", fmt.Sprintf("bob-%d", i+1)), id, syncproto.NewClock(id, nil))
		require.NoError(t, err)
		defer c.close()
		conns[i] = c
	}
	ping := func(i int) error {
		_, err := conns[i].roundTrip(ctx, &syncproto.Ping{ID: "open"})
		return err
	}

	_, err = auth.Deny(operator, auth.Denial{JTI: "stolen"}, time.Now())
	require.NoError(t, err)
	want := fileGeneration(t, operator)
	require.Equal(t, 2.0, want)
	copyTo(operator, 0)
	refusesAtOnce(first, stolen, "alice:phone", "the revoked JWT once it has the copy")
	waitNodeMetric(t, first, denyGeneration, want, "publishes the new list's generation")
	// node-1 alone has the new list for more surveys than an outvoted
	// part is given (3): judged by digest it would stop serving here.
	surveys := nodeMetric(t, first, rereadsSame)
	require.Eventually(t, func() bool {
		v, err := metricValue(first.url+"/metrics", rereadsSame)
		return err == nil && v >= surveys+4
	}, time.Minute, 200*time.Millisecond, "node-1 surveys its behind peers four times")
	for i, n := range []*procNode{second, third} {
		waitNodeMetric(t, n, denyBehind, 1, "behind node-1's deny list")
		require.True(t, n.ready(), "%s serves inside the grace", n.name)
		require.NoError(t, ping(i+1), "%s keeps its device inside the grace", n.name)
	}
	require.True(t, first.ready(), "node-1, with the newest list, serves")

	copyTo(operator, 1)
	waitNodeMetric(t, second, denyBehind, 0, "caught up")
	require.Equal(t, 1.0, nodeMetric(t, second, denyCaughtUp), "caught up within the grace")
	refusesAtOnce(second, stolen, "alice:phone", "the revoked JWT once it has the copy")
	require.NoError(t, ping(1), "node-2 never closed its device's session")

	requireOutOfAgreement(t, pc, third, "jwt_deny")
	require.Eventually(t, func() bool { return ping(2) != nil }, time.Minute, 200*time.Millisecond, "node-3's session is closed once it refuses")
	require.False(t, admits(third, stolen, "alice:phone"), "node-3 past the grace admits nobody")
	require.Equal(t, 1.0, nodeMetric(t, third, denyExpired))

	copyTo(operator, 2)
	require.Eventually(t, third.ready, time.Minute, 200*time.Millisecond, "node-3 serves again once it has the copy")
	refusesAtOnce(third, stolen, "alice:phone", "the revoked JWT")
	require.NoError(t, ping(0), "node-1's device is still connected")
	require.NoError(t, ping(1), "node-2's device is still connected")

	// A denial through one node's admin API, its file then copied.
	var change adminapi.DenyChange
	pc.adminPost(t, second, adminapi.PathDeny, adminapi.Denial{User: "mallory"}, http.StatusOK, &change)
	require.Len(t, change.List.Users, 1, "node-2 denies mallory")
	copyTo(own[1], 0)
	copyTo(own[1], 2)
	want = fileGeneration(t, own[1])
	require.Equal(t, 3.0, want, "the admin API wrote the next generation")
	mallory := sign("mallory", "m-1")
	for _, n := range pc.nodes {
		waitNodeMetric(t, n, denyGeneration, want, "publishes node-2's generation")
		refusesAtOnce(n, mallory, "mallory:phone", "the denied user's JWT")
		require.True(t, admits(n, sign("carol", "c-1"), "carol:phone"), "%s admits a JWT never denied", n.name)
	}

	bad := stop()
	for _, b := range bad {
		require.True(t, strings.HasPrefix(b, third.name+":"), "only the node never copied refused: %s", b)
	}
	require.NotEmpty(t, bad, "node-3 was seen refusing")
	for _, n := range []*procNode{first, second} {
		require.Zero(t, nodeMetric(t, n, configRefusals), "%s never refused", n.name)
		require.Zero(t, nodeMetric(t, n, denyExpired), "%s never ran out of grace", n.name)
	}
}
