package server_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/server/auth/authtest"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// jwtServer is a real syncd verifying JWTs of a test provider (RS256,
// ES256 and EdDSA keys, JWKS over HTTPS) beside a token file holding its
// admin token, with a deny list.
type jwtServer struct {
	*testServer
	idp  *authtest.Provider
	deny string
}

func startJWTServer(t testing.TB, cfg server.Config, tune func(*auth.JWTConfig)) *jwtServer {
	t.Helper()
	idp := authtest.NewProvider(t, "RS256", "ES256", "EdDSA")
	dir := t.TempDir()
	tokens, deny := filepath.Join(dir, "tokens.json"), filepath.Join(dir, "deny.json")
	admin, err := auth.Issue(tokens, auth.Principal{Admin: true}, time.Now())
	require.NoError(t, err)
	jc := idp.Config()
	if tune != nil {
		tune(jc)
	}
	reg := prometheus.NewRegistry()
	a, err := auth.New(auth.Config{TokenFile: tokens, JWT: jc, DenyFile: deny, Registerer: reg})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	cfg.Authenticator, cfg.Registry = a, reg
	s := syncdtest.Start(t, cfg)
	s.AdminToken, s.TokenPath = admin, tokens
	return &jwtServer{testServer: &testServer{Server: s, srv: s.Server, url: s.URL, adminURL: s.AdminURL, tokenPath: tokens, adminToken: admin, nodes: []*syncdtest.Server{s}, idp: idp}, idp: idp, deny: deny}
}

// jwtClientIDClaim is the client id claim of JWT mode's tokens.
const jwtClientIDClaim = "device_id"

// jwtTests holds the tests (and subtests) that run in JWT mode:
// startServer gives them a server verifying JWTs, and member hands out
// JWTs (user clientID@tenant, the client id in a claim) instead of
// token-file tokens.
var jwtTests sync.Map // testing.TB -> struct{}

// jwtMode reports whether t runs in JWT mode.
func jwtMode(t testing.TB) bool {
	_, ok := jwtTests.Load(t)
	return ok
}

// TestTenantIsolationWithJWTPrincipals runs the tenant isolation cases of
// the behaviour and abuse suites with JWT principals: the tenant comes from
// a signed claim instead of the token file.
func TestTenantIsolationWithJWTPrincipals(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"TenantsCannotSeeOrTouchEachOther", TestTenantsCannotSeeOrTouchEachOther},
		{"OneTenantCannotExpireOrPruneAnother", TestAbuseOneTenantCannotExpireOrPruneAnother},
		{"OneTenantsChurnResyncsNoOther", TestAbuseOneTenantsChurnResyncsNoOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jwtTests.Store(t, struct{}{})
			defer jwtTests.Delete(t)
			tc.test(t)
		})
	}
}

func TestJWTDevicesSyncAsTheirUser(t *testing.T) {
	ts := startJWTServer(t, server.Config{}, nil)
	for _, alg := range []string{"RS256", "ES256", "EdDSA"} {
		t.Run(alg, func(t *testing.T) {
			clientID := "alice:phone-" + strings.ToLower(alg)
			c := dial(t, ts.testServer, ts.idp.Token(alg, "alice", "acme", time.Minute))
			clock := syncproto.NewClock(clientID, nil)
			w := c.hello(clientID, 0, clock)
			require.Equal(t, "alice", w.User, "welcome names the user")
			requireApplied(t, c.push("p1", put(t, clock, "notes", "n-"+alg, `"hi"`)))
		})
	}
	entries := ts.Oplog(t, "")
	require.Len(t, entries, 3)
	for _, e := range entries {
		require.Equal(t, "acme", e.Tenant)
		require.True(t, strings.HasPrefix(e.ClientID, "alice:phone-"), e.ClientID)
	}
}

func TestJWTFromHS256SecretFileSyncs(t *testing.T) {
	secret := []byte(strings.Repeat("0123456789abcdef", 3))
	path := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(path, secret, 0o600))
	ts := startJWTServer(t, server.Config{}, func(c *auth.JWTConfig) {
		c.JWKSURL, c.HTTPClient, c.HS256SecretFile = "", nil, path
	})
	tok, err := auth.SignHS256(secret, authtest.Claims("bob", "acme", time.Now(), time.Minute, nil))
	require.NoError(t, err)
	c, clock := session(t, ts.testServer, tok, "bob:laptop")
	requireApplied(t, c.push("p1", put(t, clock, "notes", "n1", `1`)))
}

func TestJWTHelloOutsideTheUsersNamespaceIsRefused(t *testing.T) {
	ts := startJWTServer(t, server.Config{}, nil)
	for _, id := range []string{"bob:phone", "alice", "alice:", "alicex:phone", "_" + strings.Repeat("0", 24) + ":phone"} {
		t.Run(id, func(t *testing.T) {
			c := dial(t, ts.testServer, ts.idp.Token("ES256", "alice", "acme", time.Minute))
			c.send(&syncproto.Hello{ID: "h1", ClientID: id, HLC: syncproto.NewClock(id, nil).Now()})
			e := c.expectRefusalClose(syncproto.CodeWrongClientID)
			require.Contains(t, e.Message, `starting "alice:"`)
		})
	}
	require.Empty(t, ts.Oplog(t, ""), "nothing applied")
}

func TestJWTUpgradeRefusalsSayWhy(t *testing.T) {
	ts := startJWTServer(t, server.Config{}, nil)
	now := time.Now()
	stranger, err := auth.GenerateSigningKey("RS256")
	require.NoError(t, err)
	unknown, err := stranger.Sign(authtest.Claims("alice", "acme", now, time.Minute, nil))
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		token string
		code  syncproto.Code
		says  string
	}{
		{"expired", ts.idp.Sign("RS256", authtest.Claims("alice", "acme", now.Add(-time.Hour), time.Minute, nil)), syncproto.CodeTokenExpired, "token is expired"},
		{"not yet valid", ts.idp.Sign("RS256", authtest.Claims("alice", "acme", now, time.Hour, map[string]any{"nbf": now.Add(time.Hour).Unix()})), syncproto.CodeUnauthorized, "not valid yet"},
		{"wrong issuer", ts.idp.Sign("RS256", authtest.Claims("alice", "acme", now, time.Minute, map[string]any{"iss": "https://other/"})), syncproto.CodeUnauthorized, "invalid issuer"},
		{"wrong audience", ts.idp.Sign("RS256", authtest.Claims("alice", "acme", now, time.Minute, map[string]any{"aud": "other"})), syncproto.CodeUnauthorized, "invalid audience"},
		{"unknown kid", unknown, syncproto.CodeUnauthorized, "no key with kid"},
		{"oversized", ts.idp.Sign("RS256", authtest.Claims("alice", "acme", now, time.Minute, map[string]any{"pad": strings.Repeat("x", 9000)})), syncproto.CodeUnauthorized, "over the 8192-byte limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := refusedUpgrade(t, ts.testServer, dialOptions(tc.token), http.StatusUnauthorized)
			require.Equal(t, tc.code, e.Code)
			require.Contains(t, e.Message, tc.says)
		})
	}
	require.Empty(t, ts.Oplog(t, ""), "nothing applied")
}

func TestJWTTenantIsolation(t *testing.T) {
	ts := startJWTServer(t, server.Config{}, nil)
	a, aclock := session(t, ts.testServer, ts.idp.Token("EdDSA", "alice", "acme", time.Minute), "alice:phone")
	requireApplied(t, a.push("p1", put(t, aclock, "notes", "secret", `"acme only"`)))

	// mallory's provider account is in tenant evil: the tenant comes from
	// the signed claim, so nothing of acme's is visible or writable.
	evil := ts.idp.Token("EdDSA", "mallory", "evil", time.Minute)
	m, mclock := session(t, ts.testServer, evil, "mallory:laptop")
	require.Empty(t, m.pull("q1", 0).Entries, "another tenant's feed is empty")
	requireApplied(t, m.push("p1", put(t, mclock, "notes", "secret", `"overwritten?"`)))
	head, records := ts.Snapshot(t, ts.idp.Token("EdDSA", "alice", "acme", time.Minute))
	require.NotZero(t, head)
	require.Len(t, records, 1)
	require.JSONEq(t, `"acme only"`, string(records[0].Value), "the other tenant's write did not touch acme's key")
}

func TestJWTSessionEndsAtExpiryWithTokenExpired(t *testing.T) {
	ts := startJWTServer(t, server.Config{TokenRecheck: 100 * time.Millisecond}, nil)
	now := time.Now()
	exp := now.Truncate(time.Second).Add(2 * time.Second)
	tok := ts.idp.Sign("ES256", authtest.Claims("alice", "acme", now, 0, map[string]any{"exp": exp.Unix()}))
	c, _ := session(t, ts.testServer, tok, "alice:phone")
	e := c.expectRefusalClose(syncproto.CodeTokenExpired)
	t.Logf("closed %s after exp (PROTOCOL.md promises within 2s)", time.Since(exp).Round(time.Millisecond))
	require.True(t, e.Retryable, "nothing was lost: get a fresh token and resend")
	require.Equal(t, syncproto.ClosePolicyViolation, syncproto.CloseFor(e.Code))
}

func TestJWTDenyListClosesSessions(t *testing.T) {
	ts := startJWTServer(t, server.Config{TokenRecheck: 50 * time.Millisecond}, nil)
	now := time.Now()
	byJTI := ts.idp.Sign("RS256", authtest.Claims("alice", "acme", now, time.Minute, map[string]any{"jti": "j-1"}))
	c1, _ := session(t, ts.testServer, byJTI, "alice:phone")
	c2, _ := session(t, ts.testServer, ts.idp.Token("RS256", "bob", "acme", time.Minute), "bob:phone")

	require.NoError(t, auth.DenyJTI(ts.deny, "j-1", now.Add(time.Minute), time.Now()))
	e := c1.expectRefusalClose(syncproto.CodeUnauthorized)
	require.Contains(t, e.Message, "was revoked")
	refusedUpgrade(t, ts.testServer, dialOptions(byJTI), http.StatusUnauthorized)
	c2.barrier() // bob is untouched

	require.NoError(t, auth.DenyUser(ts.deny, "bob", time.Now().Add(time.Second)))
	e = c2.expectRefusalClose(syncproto.CodeUnauthorized)
	require.Contains(t, e.Message, "the user's tokens issued before")
}

func TestJWTKeyRotationDropsNoSession(t *testing.T) {
	ts := startJWTServer(t, server.Config{TokenRecheck: 50 * time.Millisecond}, func(c *auth.JWTConfig) {
		c.MinRefreshInterval = time.Millisecond
		c.RefreshInterval = 50 * time.Millisecond
	})
	old := ts.idp.Key("ES256")
	c1, clock1 := session(t, ts.testServer, ts.idp.Token("ES256", "alice", "acme", time.Minute), "alice:phone")

	fresh := ts.idp.Rotate("ES256", old)
	c2, clock2 := session(t, ts.testServer, ts.idp.Token("ES256", "alice", "acme", time.Minute), "alice:laptop")
	require.NotEqual(t, old.Kid, fresh.Kid)

	// The old key retires: once the background refresh saw it, new
	// sessions need the new key; the open one keeps syncing until its
	// token expires.
	ts.idp.Publish(fresh)
	oldTok, err := old.Sign(authtest.Claims("alice", "acme", time.Now(), time.Minute, nil))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		c, resp, err := tryDial(ts.testServer, dialOptions(oldTok))
		if err == nil {
			c.conn.CloseNow()
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusUnauthorized
	}, ioTimeout, 20*time.Millisecond, "the retired key's tokens are refused after a refresh")
	requireApplied(t, c1.push("p1", put(t, clock1, "notes", "a", `1`)))
	requireApplied(t, c2.push("p1", put(t, clock2, "notes", "b", `2`)))
}

func TestJWTFromABrowserSubprotocol(t *testing.T) {
	ts := startJWTServer(t, server.Config{}, nil)
	tok := ts.idp.Token("RS256", "alice", "acme", time.Minute)
	c := dialWith(t, ts.testServer, &websocket.DialOptions{
		Subprotocols: []string{syncproto.Subprotocol, server.BearerSubprotocolPrefix + tok},
		HTTPHeader:   http.Header{"Origin": {ts.url}},
	})
	require.Equal(t, syncproto.Subprotocol, c.conn.Subprotocol(), "the token is not echoed")
	w := c.hello("alice:browser", 0, syncproto.NewClock("alice:browser", nil))
	require.Equal(t, "alice", w.User)
}
