package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// TestClusterProcessStaleTokenFile: a token revoked in the token file of
// two nodes but not in the third's. The third is behind their generation:
// once its grace (--cluster-tokens-grace) is over it stops serving
// (/readyz 503 naming the token file), closes its sessions, and takes no
// write with the revoked token, which the other two refuse outright;
// nothing of it lands anywhere. Its file brought up to date, the third
// serves again.
func TestClusterProcessStaleTokenFile(t *testing.T) {
	waitsInParallel(t)
	pc := newProcCluster(t, func(_, _ int, addr string) string { return addr }, nil, "--cluster-tokens-grace", "4s")
	token := pc.member(t, "phone")
	tokens, err := auth.ReadFile(pc.tokens)
	require.NoError(t, err)
	id := tokens[len(tokens)-1].TokenID

	// node-3 reads a token file of its own, a copy of the shared one, from
	// its start (a start fewer than starting it on the shared file and
	// restarting it on the copy).
	stale := filepath.Join(t.TempDir(), "tokens.json")
	copyFile := func() {
		data, err := os.ReadFile(pc.tokens)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(stale, data, 0o600))
	}
	copyFile()
	third := pc.nodes[2]
	third.args = append(third.args, "--tokens", stale)
	pc.startAll(t)

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
	require.Equal(t, 1.0, nodeMetric(t, third, graceExpired), "its grace ran out once")
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
	waitsInParallel(t)
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
// agreement part it differs in, and checks that the other nodes serve on:
// none refuses for its configuration, and each answers ready (within a
// bound: a loaded machine shows a node waiting for quorum at times, which
// is no refusal of its configuration and closes no session).
func requireOutOfAgreement(t testing.TB, pc *procCluster, n *procNode, part string) {
	t.Helper()
	require.Eventually(t, func() bool {
		code, body := readyz(n)
		return code == http.StatusServiceUnavailable && strings.Contains(body, part)
	}, time.Minute, 200*time.Millisecond, "%s names %s", n.name, part)
	for _, o := range pc.nodes {
		if o == n {
			continue
		}
		code, body := readyz(o)
		require.False(t, code != http.StatusOK && strings.Contains(body, cluster.ErrConfigMismatch.Error()), "%s serves on: %d %s", o.name, code, body)
		if code != http.StatusOK {
			t.Logf("%s answered /readyz %d %s; waiting for it to serve", o.name, code, body)
		}
		require.Eventually(t, o.ready, time.Minute, 200*time.Millisecond, "%s serves on", o.name)
	}
}

// The agreement's instruments a test reads (docs/metrics.md).
var (
	configRefusals   = regexp.MustCompile(`(?m)^syncd_cluster_config_refusals_total (\S+)$`)
	tokensBehind     = regexp.MustCompile(`(?m)^syncd_cluster_config_behind\{part="tokens"\} (\S+)$`)
	tokensGeneration = regexp.MustCompile(`(?m)^syncd_cluster_config_generation\{part="tokens"\} (\S+)$`)
	graceCaughtUp    = regexp.MustCompile(`(?m)^syncd_cluster_config_grace_ends_total\{outcome="caught_up",part="tokens"\} (\S+)$`)
	graceExpired     = regexp.MustCompile(`(?m)^syncd_cluster_config_grace_ends_total\{outcome="expired",part="tokens"\} (\S+)$`)
)

// nodeMetric is the value re captures in n's metrics.
func nodeMetric(t testing.TB, n *procNode, re *regexp.Regexp) float64 {
	t.Helper()
	v, err := metricValue(n.url+"/metrics", re)
	require.NoError(t, err, "%s: %s", n.name, re)
	return v
}

// waitNodeMetric waits until re's value in n's metrics is want.
func waitNodeMetric(t testing.TB, n *procNode, re *regexp.Regexp, want float64, why string) {
	t.Helper()
	require.Eventually(t, func() bool {
		v, err := metricValue(n.url+"/metrics", re)
		return err == nil && v == want
	}, time.Minute, 200*time.Millisecond, "%s: %s", n.name, why)
}

// fileGeneration is the generation of the token file at path.
func fileGeneration(t testing.TB, path string) float64 {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return float64(auth.Generation(data))
}

// device is a token and the client id it acts as.
type device struct{ id, token string }

// dial opens d's session on n.
func (d device) dial(ctx context.Context, n *procNode) (*pushConn, error) {
	return dialPush(ctx, n, d.token, d.id, syncproto.NewClock(d.id, nil))
}

// issueThrough issues a client token for clientID through n's admin API
// (the console's token page does the same).
func (pc *procCluster) issueThrough(t testing.TB, n *procNode, clientID string) device {
	t.Helper()
	var issued adminapi.IssuedToken
	pc.adminPost(t, n, adminapi.PathTokens, adminapi.TokenRequest{Tenant: "acme", ClientID: clientID, Read: []string{auth.Wildcard}, Write: []string{auth.Wildcard}},
		http.StatusCreated, &issued)
	return device{id: clientID, token: issued.Bearer}
}

// adminPost posts body as JSON to path on n's admin API with the admin
// token, requires the answer's status to be want, and decodes its body
// into out.
func (pc *procCluster) adminPost(t testing.TB, n *procNode, path string, body any, want int, out any) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, n.adminURL+path, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+pc.adminToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, want, resp.StatusCode, "%s: POST %s", n.name, path)
	require.NoError(t, decodeJSONBody(resp, out))
}

// watchReady polls every node's /readyz until the returned stop is
// called, which returns the answers that refused for the configuration
// (a wait for quorum, which a loaded machine shows at times and which
// closes no session, is not one).
func watchReady(pc *procCluster) (stop func() []string) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	for _, n := range pc.nodes {
		wg.Add(1)
		go func() { // owned by stop
			defer wg.Done()
			for {
				if code, body := readyz(n); code != http.StatusOK && strings.Contains(body, cluster.ErrConfigMismatch.Error()) {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%s: %d %s", n.name, code, body))
					mu.Unlock()
				}
				select {
				case <-done:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	return func() []string {
		close(done)
		wg.Wait()
		return bad
	}
}

// TestClusterProcessIssueOnASharedTokenFile: three nodes share one token
// file and a device is connected to every node. Tokens issued through
// each node's admin API (the console's path) and through the file
// (syncctl's path), and a revocation, each admitted at once by every
// node; the nodes come to publish the file's generation; no node ever
// stops serving (/readyz 200 throughout, no refusal counted, no grace run
// out) and no device's session is closed.
func TestClusterProcessIssueOnASharedTokenFile(t *testing.T) {
	waitsInParallel(t)
	pc := startProcCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stop := watchReady(pc)
	conns := make([]*pushConn, len(pc.nodes))
	for i, n := range pc.nodes {
		d := device{id: fmt.Sprintf("device-%d", i+1)}
		d.token = pc.member(t, d.id)
		c, err := d.dial(ctx, n)
		require.NoError(t, err, "%s admits a token issued while it runs", n.name)
		defer c.close()
		conns[i] = c
	}
	// Rounds of issues, one every 250 ms, span several reports (the scale
	// test that once issued as it went saw nodes flap within a few): at
	// least 3 rounds, then until 6 reports passed, 60 at most.
	var issued []device
	start := time.Now()
	pace := time.NewTicker(250 * time.Millisecond)
	defer pace.Stop()
	for round := 0; round < 60 && (round < 3 || time.Since(start) < 6*2*time.Second); round++ {
		<-pace.C
		n := pc.nodes[round%len(pc.nodes)]
		fromFile := device{id: fmt.Sprintf("file-%d", round)}
		fromFile.token = pc.member(t, fromFile.id)
		for _, d := range []device{pc.issueThrough(t, n, fmt.Sprintf("api-%d", round)), fromFile} {
			for _, m := range pc.nodes {
				c, err := d.dial(ctx, m)
				require.NoError(t, err, "%s admits %s at once", m.name, d.id)
				c.close()
			}
			issued = append(issued, d)
		}
	}
	require.NoError(t, auth.Revoke(pc.tokens, auth.TokenIDOf(issued[0].token)))
	want := fileGeneration(t, pc.tokens)
	t.Logf("%d tokens issued over %s; the file is at generation %v", len(issued), time.Since(start).Round(time.Millisecond), want)
	for _, n := range pc.nodes {
		waitNodeMetric(t, n, tokensGeneration, want, "publishes the file's generation")
	}
	for _, n := range pc.nodes {
		_, err := issued[0].dial(ctx, n)
		require.Error(t, err, "%s refuses the revoked token", n.name)
	}
	require.Empty(t, stop(), "no node refused for its configuration")
	for i, n := range pc.nodes {
		_, err := conns[i].roundTrip(ctx, &syncproto.Ping{ID: "still-open"})
		require.NoError(t, err, "the device on %s is still connected", n.name)
		require.Zero(t, nodeMetric(t, n, configRefusals), "%s never refused", n.name)
		require.Zero(t, nodeMetric(t, n, graceExpired), "%s never ran out of grace", n.name)
	}
}

// TestClusterProcessOwnTokenFilesCopiedOneByOne: every node reads its own
// copy of the token file. A token is issued in the operator's file and
// copied to node-1 only: node-1 admits it and serves on throughout; the
// other two are behind its generation and serve inside the grace, their
// devices connected. node-2's copy arrives within the grace: it catches
// up without ever refusing. node-3's never does: once the grace is over
// it refuses (/readyz 503 naming the token file, its device's session
// closed) while the others serve on; copied at last, it serves again and
// admits the new token.
func TestClusterProcessOwnTokenFilesCopiedOneByOne(t *testing.T) {
	waitsInParallel(t)
	pc := newProcCluster(t, func(_, _ int, addr string) string { return addr }, nil, "--cluster-tokens-grace", "30s")
	devices := make([]device, len(pc.nodes))
	for i := range devices {
		devices[i] = device{id: fmt.Sprintf("device-%d", i+1)}
		devices[i].token = pc.member(t, devices[i].id)
	}
	own := make([]string, len(pc.nodes))
	copyTo := func(i int) {
		data, err := os.ReadFile(pc.tokens)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(own[i], data, 0o600))
	}
	for i, n := range pc.nodes {
		own[i] = filepath.Join(n.dir+"-tokens", "tokens.json")
		require.NoError(t, os.MkdirAll(filepath.Dir(own[i]), 0o700))
		copyTo(i)
		n.args = append(n.args, "--tokens", own[i])
	}
	pc.startAll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	conns := make([]*pushConn, len(pc.nodes))
	for i, n := range pc.nodes {
		c, err := devices[i].dial(ctx, n)
		require.NoError(t, err)
		defer c.close()
		conns[i] = c
	}
	first, second, third := pc.nodes[0], pc.nodes[1], pc.nodes[2]
	ping := func(i int) error {
		_, err := conns[i].roundTrip(ctx, &syncproto.Ping{ID: "open"})
		return err
	}

	tablet := device{id: "tablet"}
	tablet.token = pc.member(t, tablet.id)
	copyTo(0)
	require.Eventually(t, func() bool {
		c, err := tablet.dial(ctx, first)
		if err == nil {
			c.close()
		}
		return err == nil
	}, time.Minute, 200*time.Millisecond, "node-1 admits the new token once it has the copy")
	for _, n := range []*procNode{second, third} {
		waitNodeMetric(t, n, tokensBehind, 1, "behind node-1's generation")
	}
	for i, n := range []*procNode{second, third} {
		require.True(t, n.ready(), "%s serves inside the grace", n.name)
		require.NoError(t, ping(i+1), "%s keeps its device inside the grace", n.name)
	}

	copyTo(1)
	waitNodeMetric(t, second, tokensBehind, 0, "caught up")
	require.Equal(t, 1.0, nodeMetric(t, second, graceCaughtUp), "caught up within the grace")
	require.NoError(t, ping(1), "node-2 never closed its device's session")

	requireOutOfAgreement(t, pc, third, "tokens")
	require.Eventually(t, func() bool { return ping(2) != nil }, time.Minute, 200*time.Millisecond, "node-3's session is closed once it refuses")
	require.Equal(t, 1.0, nodeMetric(t, third, graceExpired))

	copyTo(2)
	require.Eventually(t, third.ready, time.Minute, 200*time.Millisecond, "node-3 serves again once it has the copy")
	for _, n := range pc.nodes {
		c, err := tablet.dial(ctx, n)
		require.NoError(t, err, "%s admits the new token", n.name)
		c.close()
	}
	require.NoError(t, ping(0), "node-1's device is still connected")
	require.NoError(t, ping(1), "node-2's device is still connected")
	for _, n := range []*procNode{first, second} {
		require.Zero(t, nodeMetric(t, n, configRefusals), "%s never refused", n.name)
	}
}
