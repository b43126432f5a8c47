package main

import (
	"context"
	"encoding/json"
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
	jwksBehind     = partMetric("syncd_cluster_config_behind", `part="jwt_jwks"`)
	jwksGeneration = partMetric("syncd_cluster_config_generation", `part="jwt_jwks"`)
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
	waitsInParallel(t)
	dir := t.TempDir()
	secret := []byte(strings.Repeat("0123456789abcdef", 3))
	secretFile := filepath.Join(dir, "jwt-secret")
	require.NoError(t, os.WriteFile(secretFile, secret, 0o600))
	operator := filepath.Join(dir, "deny.json") // the operator's list, copied to each node
	_, err := auth.Deny(operator, auth.Denial{JTI: "long-gone"}, time.Now())
	require.NoError(t, err)
	own := newOwnCopies(t, dir, operator)
	copyTo := func(from string, i int) { t.Helper(); own.copy(t, from, i) }
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
	admits := func(n *procNode, token, clientID string) bool { return admits(ctx, n, token, clientID) }
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
	waitAloneForSurveys(t, first)
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

// ownCopies is one file per node of a process cluster, each a copy of an
// operator's file, in a directory of its own.
type ownCopies []string

// newOwnCopies makes ownCopies under dir named after operator's file, each
// a copy of it.
func newOwnCopies(t testing.TB, dir, operator string) ownCopies {
	t.Helper()
	own := make(ownCopies, 3)
	for i := range own {
		own[i] = filepath.Join(dir, fmt.Sprintf("node-%d-own", i+1), filepath.Base(operator))
		require.NoError(t, os.MkdirAll(filepath.Dir(own[i]), 0o700))
		own.copy(t, operator, i)
	}
	return own
}

// copy replaces node i's copy with the file at from, whole (a rename, as
// scp or configuration management would land it).
func (own ownCopies) copy(t testing.TB, from string, i int) {
	t.Helper()
	data, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(own[i]+".tmp", data, 0o600))
	require.NoError(t, os.Rename(own[i]+".tmp", own[i]))
}

// admits reports whether n opens a session for token as clientID.
func admits(ctx context.Context, n *procNode, token, clientID string) bool {
	c, err := dialPush(ctx, n, token, clientID, syncproto.NewClock(clientID, nil))
	if err != nil {
		return false
	}
	c.close()
	return true
}

// waitAloneForSurveys waits until n, the only node with a file's newest
// generation, has surveyed its peers four times (each survey finding
// them publish other values): more than an outvoted part is given (3),
// so a node judged by the file's digest would stop serving meanwhile.
func waitAloneForSurveys(t testing.TB, n *procNode) {
	t.Helper()
	surveys := nodeMetric(t, n, rereadsSame)
	require.Eventually(t, func() bool {
		v, err := metricValue(n.url+"/metrics", rereadsSame)
		return err == nil && v >= surveys+4
	}, time.Minute, 200*time.Millisecond, "%s surveys its behind peers four times", n.name)
}

// jwksAt writes the JWKS of keys at generation gen to path, as syncctl
// jwt keygen does.
func jwksAt(t testing.TB, path string, gen uint64, keys ...auth.SigningKey) {
	t.Helper()
	doc, err := auth.JWKS(keys...)
	require.NoError(t, err)
	var set map[string]any
	require.NoError(t, json.Unmarshal(doc, &set))
	set["generation"] = gen
	doc, err = json.Marshal(set)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, doc, 0o600))
}

// TestClusterProcessJWKSRotatedNodeByNode: three nodes each read their own
// copy of a JWKS file. A key is added (a rotation, the next generation)
// and the file copied to node-1 first: node-1 admits tokens of the new key
// and never stops serving, alone with the new file for four surveys (by
// digest it is outvoted two to one and stops at the third); the other two
// are behind and serve on. Copied to them, every node admits tokens of
// both keys, and no node ever refused.
func TestClusterProcessJWKSRotatedNodeByNode(t *testing.T) {
	waitsInParallel(t)
	dir := t.TempDir()
	old, err := auth.GenerateSigningKey("ES256")
	require.NoError(t, err)
	rotated, err := auth.GenerateSigningKey("EdDSA")
	require.NoError(t, err)
	operator := filepath.Join(dir, "jwks.json")
	jwksAt(t, operator, 1, old)
	own := newOwnCopies(t, dir, operator)
	pc := startProcClusterEach(t, func(_, _ int, addr string) string { return addr },
		func(i int) []string { return []string{"--jwt-jwks-file", own[i]} },
		"--jwt-issuer", authtest.Issuer, "--jwt-audience", authtest.Audience, "--jwt-jwks-min-refresh", "1s",
		"--cluster-tokens-grace", "30s")
	first, second, third := pc.nodes[0], pc.nodes[1], pc.nodes[2]
	stop := watchReady(pc)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sign := func(k auth.SigningKey, user string) string {
		t.Helper()
		tok, err := k.Sign(authtest.Claims(user, "acme", time.Now(), 10*time.Minute, nil))
		require.NoError(t, err)
		return tok
	}
	before, after := sign(old, "alice"), sign(rotated, "bob")
	for _, n := range pc.nodes {
		require.True(t, admits(ctx, n, before, "alice:phone"), "%s admits the old key's token", n.name)
	}

	jwksAt(t, operator, 2, old, rotated)
	own.copy(t, operator, 0)
	require.Eventually(t, func() bool { return admits(ctx, first, after, "bob:phone") }, time.Minute, 200*time.Millisecond,
		"node-1 admits the new key's token once it has the copy")
	waitNodeMetric(t, first, jwksGeneration, 2, "publishes the new file's generation")
	waitAloneForSurveys(t, first)
	for _, n := range []*procNode{second, third} {
		waitNodeMetric(t, n, jwksBehind, 1, "behind node-1's JWKS file")
		require.True(t, n.ready(), "%s serves inside the grace", n.name)
	}
	require.True(t, first.ready(), "node-1, with the newest file, serves")

	own.copy(t, operator, 1)
	own.copy(t, operator, 2)
	for _, n := range pc.nodes {
		waitNodeMetric(t, n, jwksBehind, 0, "has the newest file")
		require.Eventually(t, func() bool { return admits(ctx, n, after, "bob:phone") }, time.Minute, 200*time.Millisecond,
			"%s admits the new key's token", n.name)
		require.True(t, admits(ctx, n, before, "alice:phone"), "%s still admits the old key's token", n.name)
	}
	require.Empty(t, stop(), "no node refused for its configuration")
	for _, n := range pc.nodes {
		require.Zero(t, nodeMetric(t, n, configRefusals), "%s never refused", n.name)
	}
}
