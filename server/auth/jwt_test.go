package auth_test

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/fakeclock"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/server/auth/authtest"
	"github.com/syncd-dev/syncd/syncproto"
)

var algs = []string{"RS256", "ES256", "EdDSA"}

// syncBuffer is a log sink safe for the refresh goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

type jwtEnv struct {
	p     *authtest.Provider
	a     *auth.Authenticator
	clock *fakeclock.Clock
	reg   *prometheus.Registry
	logs  *syncBuffer
	deny  string
}

// newJWTEnv is an authenticator trusting a provider of RS256, ES256 and
// EdDSA keys, on a fake clock, with its metrics and logs at hand.
func newJWTEnv(t *testing.T, tune func(*auth.JWTConfig)) *jwtEnv {
	t.Helper()
	e := &jwtEnv{p: authtest.NewProvider(t, algs...), clock: fakeclock.New(time.Now()), reg: prometheus.NewRegistry(), logs: &syncBuffer{}}
	cfg := e.p.Config()
	if tune != nil {
		tune(cfg)
	}
	e.deny = filepath.Join(t.TempDir(), "deny.json")
	a, err := auth.New(auth.Config{JWT: cfg, DenyFile: e.deny, Now: e.clock.Now, Registerer: e.reg, Logger: slog.New(slog.NewTextHandler(e.logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	e.a = a
	return e
}

func (e *jwtEnv) claims(extra map[string]any) map[string]any {
	return authtest.Claims("alice", "acme", e.clock.Now(), 5*time.Minute, extra)
}

func (e *jwtEnv) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := true
			for i, l := range m.GetLabel() {
				if i < len(labels) && l.GetValue() != labels[i] {
					match = false
				}
			}
			if match {
				if m.Counter != nil {
					return m.Counter.GetValue()
				}
				return m.Gauge.GetValue()
			}
		}
	}
	return 0
}

func TestJWTFromJWKSOverHTTPSAccepted(t *testing.T) {
	e := newJWTEnv(t, nil)
	for _, alg := range algs {
		t.Run(alg, func(t *testing.T) {
			tok := e.p.Sign(alg, e.claims(map[string]any{"jti": "t-" + alg, "read": "notes todos", "write": []string{"notes"},
				"scopes": map[string]any{"project": []string{"p1", "p2"}}}))
			p, err := e.a.Authenticate(tok)
			require.NoError(t, err)
			require.Equal(t, "alice", p.User)
			require.Equal(t, "acme", p.Tenant)
			require.Equal(t, "jwt:alice", p.TokenID)
			require.Equal(t, "t-"+alg, p.JTI)
			require.Equal(t, []string{"notes", "todos"}, p.Read)
			require.Equal(t, []string{"notes"}, p.Write)
			require.Equal(t, map[string][]string{"project": {"p1", "p2"}}, p.Scopes)
			require.Empty(t, p.ClientID, "the device chooses its client id in hello")
			require.Equal(t, "alice:", p.ClientIDPrefix)
			require.NoError(t, e.a.Check(p))
		})
	}
	require.Equal(t, float64(len(algs)), e.metric(t, "syncd_jwt_verifications_total", "ok"))
	require.Equal(t, float64(3), e.metric(t, "syncd_jwks_keys"))
}

func TestJWTFromHS256SecretAccepted(t *testing.T) {
	secret := []byte(strings.Repeat("s3cr3t-", 6))
	path := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(path, append(secret, '\n'), 0o600))
	a, err := auth.New(auth.Config{JWT: &auth.JWTConfig{HS256SecretFile: path, Issuer: authtest.Issuer, Audience: authtest.Audience}})
	require.NoError(t, err)
	defer a.Close()
	tok, err := auth.SignHS256(secret, authtest.Claims("bob", "acme", time.Now(), time.Minute, map[string]any{"device": "bob:tablet"}))
	require.NoError(t, err)
	p, err := a.Authenticate(tok)
	require.NoError(t, err)
	require.Equal(t, "bob", p.User)

	// An RS256 token is refused: with a secret, HS256 is the only algorithm.
	k, err := auth.GenerateSigningKey("RS256")
	require.NoError(t, err)
	rs, err := k.Sign(authtest.Claims("bob", "acme", time.Now(), time.Minute, nil))
	require.NoError(t, err)
	_, err = a.Authenticate(rs)
	require.ErrorIs(t, err, auth.ErrUnauthorized)
	require.ErrorContains(t, err, "algorithm RS256 is not accepted")

	short := filepath.Join(t.TempDir(), "short")
	require.NoError(t, os.WriteFile(short, []byte("too short"), 0o600))
	_, err = auth.New(auth.Config{JWT: &auth.JWTConfig{HS256SecretFile: short, Issuer: "i", Audience: "a"}})
	require.ErrorContains(t, err, "want at least 32")
}

// noneToken is an unsigned token (alg none) over claims.
func noneToken(t *testing.T, claims map[string]any) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]any{"alg": "none", "typ": "JWT"}) + "." + enc(claims) + "."
}

func TestJWTRefusals(t *testing.T) {
	e := newJWTEnv(t, func(c *auth.JWTConfig) { c.MinRefreshInterval = time.Second })
	rsa := e.p.Key("RS256")
	pubDER, err := x509.MarshalPKIXPublicKey(rsa.Private.Public())
	require.NoError(t, err)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	confused, err := auth.SignHS256(pubPEM, e.claims(nil))
	require.NoError(t, err)
	good := e.p.Sign("ES256", e.claims(nil))
	parts := strings.Split(good, ".")
	tamperedClaims := e.claims(map[string]any{"tenant": "other"})
	b, err := json.Marshal(tamperedClaims)
	require.NoError(t, err)
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(b) + "." + parts[2]
	stranger, err := auth.GenerateSigningKey("ES256")
	require.NoError(t, err)
	unknownKid, err := stranger.Sign(e.claims(nil))
	require.NoError(t, err)
	e.clock.Advance(time.Second) // an unknown kid may cause a refresh
	now := e.clock.Now()

	cases := []struct {
		name, token, result, says string
		expired                   bool
	}{
		{name: "expired", token: e.p.Sign("RS256", authtest.Claims("alice", "acme", now.Add(-time.Hour), time.Minute, nil)), result: "expired", says: "token is expired", expired: true},
		{name: "not yet valid", token: e.p.Sign("RS256", e.claims(map[string]any{"nbf": now.Add(time.Hour).Unix()})), result: "not_yet_valid", says: "not valid yet"},
		{name: "issued in the future", token: e.p.Sign("RS256", e.claims(map[string]any{"iat": now.Add(time.Hour).Unix(), "exp": now.Add(2 * time.Hour).Unix()})), result: "issued_in_future", says: "used before issued"},
		{name: "wrong issuer", token: e.p.Sign("RS256", e.claims(map[string]any{"iss": "https://evil.example/"})), result: "bad_issuer", says: "invalid issuer"},
		{name: "wrong audience", token: e.p.Sign("RS256", e.claims(map[string]any{"aud": "another-app"})), result: "bad_audience", says: "invalid audience"},
		{name: "alg none", token: noneToken(t, e.claims(nil)), result: "bad_algorithm", says: "algorithm none is not accepted"},
		{name: "algorithm confusion", token: confused, result: "bad_algorithm", says: "algorithm HS256 is not accepted"},
		{name: "unknown kid", token: unknownKid, result: "unknown_kid", says: "after a refresh"},
		{name: "tampered payload", token: tampered, result: "bad_signature", says: "signature is invalid"},
		{name: "oversized", token: e.p.Sign("RS256", e.claims(map[string]any{"pad": strings.Repeat("x", auth.DefaultMaxJWTBytes)})), result: "too_large", says: "over the 8192-byte limit"},
		{name: "too long lived", token: e.p.Sign("RS256", authtest.Claims("alice", "acme", now, 48*time.Hour, nil)), result: "too_long_lived", says: "over the 24h0m0s limit"},
		{name: "no exp", token: e.p.Sign("RS256", e.claims(map[string]any{"exp": nil})), result: "bad_claims", says: "exp claim is required"},
		{name: "no sub", token: e.p.Sign("RS256", e.claims(map[string]any{"sub": nil})), result: "bad_claims", says: "sub must name the user"},
		{name: "no tenant", token: e.p.Sign("RS256", e.claims(map[string]any{"tenant": nil})), result: "bad_claims", says: "(tenant)"},
		{name: "bad model", token: e.p.Sign("RS256", e.claims(map[string]any{"write": []any{"Notes!"}})), result: "bad_claims", says: `claim "write"`},
		{name: "bad scopes", token: e.p.Sign("RS256", e.claims(map[string]any{"scopes": []string{"x"}})), result: "bad_claims", says: `claim "scopes"`},
		{name: "not a jwt", token: "hello", result: "malformed", says: "malformed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.metric(t, "syncd_jwt_verifications_total", c.result)
			_, err := e.a.Authenticate(c.token)
			require.Error(t, err)
			if c.expired {
				require.ErrorIs(t, err, auth.ErrTokenExpired)
			} else {
				require.ErrorIs(t, err, auth.ErrUnauthorized)
			}
			require.ErrorContains(t, err, c.says)
			require.Equal(t, before+1, e.metric(t, "syncd_jwt_verifications_total", c.result), "counted as %s", c.result)
		})
	}
	require.Equal(t, int64(2), e.p.Fetches(), "the unknown kid caused exactly one refresh beyond the first fetch")
}

func TestUnknownKidRefreshesAtMostOncePerInterval(t *testing.T) {
	e := newJWTEnv(t, func(c *auth.JWTConfig) { c.MinRefreshInterval = time.Minute })
	stranger, err := auth.GenerateSigningKey("EdDSA")
	require.NoError(t, err)
	for range 20 {
		tok, err := stranger.Sign(e.claims(nil))
		require.NoError(t, err)
		_, err = e.a.Authenticate(tok)
		require.ErrorContains(t, err, "no key with kid")
	}
	require.Equal(t, int64(1), e.p.Fetches(), "the start's fetch is within the interval: no refresh yet")
	e.clock.Advance(time.Minute)
	for range 20 {
		tok, err := stranger.Sign(e.claims(nil))
		require.NoError(t, err)
		_, err = e.a.Authenticate(tok)
		require.Error(t, err)
	}
	require.Equal(t, int64(2), e.p.Fetches(), "one refresh for twenty unknown kids")
}

func TestRotationKeepsOldTokensUntilTheyExpire(t *testing.T) {
	e := newJWTEnv(t, func(c *auth.JWTConfig) {
		c.MinRefreshInterval = time.Second
		c.RefreshInterval = 20 * time.Millisecond
	})
	old := e.p.Key("ES256")
	oldTok := e.p.Sign("ES256", e.claims(nil))
	p, err := e.a.Authenticate(oldTok)
	require.NoError(t, err)

	e.clock.Advance(time.Second)
	fresh := e.p.Rotate("ES256", old)
	newTok := e.p.Sign("ES256", e.claims(nil))
	require.NotEqual(t, old.Kid, fresh.Kid)
	_, err = e.a.Authenticate(newTok)
	require.NoError(t, err, "the new kid is fetched on first sight")
	_, err = e.a.Authenticate(oldTok)
	require.NoError(t, err, "the old key is still published")
	require.NoError(t, e.a.Check(p))

	// The provider retires the old key: tokens it signed are refused once
	// the background refresh picked that up; the sessions they opened end
	// at exp.
	e.p.Publish(fresh)
	require.Eventually(t, func() bool {
		_, err := e.a.Authenticate(oldTok)
		return err != nil && strings.Contains(err.Error(), "no key with kid")
	}, 10*time.Second, 10*time.Millisecond, "the background refresh drops the retired key")
	_, err = e.a.Authenticate(e.p.Sign("ES256", e.claims(nil)))
	require.NoError(t, err)
	require.NoError(t, e.a.Check(p), "an open session keeps going until its token's exp")
	e.clock.Advance(5 * time.Minute)
	require.ErrorIs(t, e.a.Check(p), auth.ErrTokenExpired)
}

func TestJWKSOutageKeepsTheLastGoodKeys(t *testing.T) {
	for _, fault := range []struct {
		name string
		f    authtest.Fault
	}{{"hang", authtest.Hang}, {"500", authtest.ServerError}, {"garbage", authtest.Garbage}} {
		t.Run(fault.name, func(t *testing.T) {
			e := newJWTEnv(t, func(c *auth.JWTConfig) { c.MinRefreshInterval = time.Second })
			tok := e.p.Sign("RS256", e.claims(nil))
			_, err := e.a.Authenticate(tok)
			require.NoError(t, err)
			require.Equal(t, float64(0), e.metric(t, "syncd_jwks_stale"))

			e.p.SetFault(fault.f)
			e.clock.Advance(time.Second)
			stranger, err := auth.GenerateSigningKey("RS256")
			require.NoError(t, err)
			unknown, err := stranger.Sign(e.claims(nil))
			require.NoError(t, err)
			_, err = e.a.Authenticate(unknown)
			require.ErrorContains(t, err, "no key with kid", "an unknown kid forces a refresh, which fails")

			_, err = e.a.Authenticate(tok)
			require.NoError(t, err, "the last good keys stay in force")
			require.Equal(t, float64(1), e.metric(t, "syncd_jwks_stale"))
			require.Equal(t, float64(1), e.metric(t, "syncd_jwks_fetches_total", "error"))
			require.Equal(t, float64(3), e.metric(t, "syncd_jwks_keys"))
			require.Contains(t, e.logs.String(), "the last good keys stay in force")

			e.p.SetFault(authtest.Healthy)
			e.clock.Advance(time.Second)
			_, err = e.a.Authenticate(unknown)
			require.Error(t, err)
			require.Equal(t, float64(0), e.metric(t, "syncd_jwks_stale"), "a good fetch clears the stale mark")
			require.Contains(t, e.logs.String(), "JWKS refresh succeeded again")
		})
	}
}

func TestDenyListRevokesByJTIAndByUser(t *testing.T) {
	e := newJWTEnv(t, nil)
	tok := e.p.Sign("EdDSA", e.claims(map[string]any{"jti": "token-1"}))
	p, err := e.a.Authenticate(tok)
	require.NoError(t, err)

	require.NoError(t, auth.DenyJTI(e.deny, "token-1", p.ExpiresAt, e.clock.Now()))
	e.clock.Advance(time.Second)
	require.ErrorIs(t, e.a.Check(p), auth.ErrUnauthorized)
	_, err = e.a.Authenticate(tok)
	require.ErrorContains(t, err, "jti token-1) was revoked")

	other := e.p.Sign("EdDSA", e.claims(map[string]any{"jti": "token-2"}))
	q, err := e.a.Authenticate(other)
	require.NoError(t, err)
	require.NoError(t, auth.DenyUser(e.deny, "alice", e.clock.Now()))
	e.clock.Advance(time.Second)
	require.ErrorContains(t, e.a.Check(q), "the user's tokens issued before")
	later := e.p.Sign("EdDSA", e.claims(nil))
	_, err = e.a.Authenticate(later)
	require.NoError(t, err, "a token issued after the revocation is accepted")
}

func TestJWTClientIDClaimBindsTheClientID(t *testing.T) {
	e := newJWTEnv(t, func(c *auth.JWTConfig) { c.ClientIDClaim = "device_id" })
	p, err := e.a.Authenticate(e.p.Sign("RS256", e.claims(map[string]any{"device_id": "dev-42"})))
	require.NoError(t, err)
	require.Equal(t, "dev-42", p.ClientID)
	_, err = e.a.Authenticate(e.p.Sign("RS256", e.claims(nil)))
	require.ErrorContains(t, err, `claim "device_id" (client id)`)
}

func TestJWTConfigRefusals(t *testing.T) {
	p := authtest.NewProvider(t, "RS256")
	for name, tc := range map[string]struct {
		tune func(*auth.JWTConfig)
		says string
	}{
		"none allowed":       {func(c *auth.JWTConfig) { c.Algorithms = []string{"none"} }, `algorithm "none" is not allowed`},
		"hmac with jwks":     {func(c *auth.JWTConfig) { c.Algorithms = []string{"RS256", "HS256"} }, `algorithm "HS256" is not allowed`},
		"secret and jwks":    {func(c *auth.JWTConfig) { c.HS256SecretFile = "x" }, "exactly one"},
		"plain http":         {func(c *auth.JWTConfig) { c.JWKSURL = "http://id.example/jwks" }, "want an https:// URL"},
		"no issuer":          {func(c *auth.JWTConfig) { c.Issuer = "" }, "issuer and the audience are required"},
		"leeway beyond 5m":   {func(c *auth.JWTConfig) { c.Leeway = time.Hour }, "want 0 to 5m0s"},
		"bad default tenant": {func(c *auth.JWTConfig) { c.DefaultTenant = "a b" }, "default tenant"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := p.Config()
			tc.tune(cfg)
			_, err := auth.New(auth.Config{JWT: cfg})
			require.ErrorContains(t, err, tc.says)
		})
	}
}

func TestDeviceNamespaces(t *testing.T) {
	require.Equal(t, "alice:", syncproto.DeviceNamespace("alice"))
	hashed := syncproto.DeviceNamespace("auth0|5f3a")
	require.True(t, strings.HasPrefix(hashed, "_") && len(hashed) == 26, hashed)
	require.NotEqual(t, hashed, syncproto.DeviceNamespace("auth0|5f3b"))
	require.NotEqual(t, "_x:", syncproto.DeviceNamespace("_x"), "a plain user never starts with _")
	id, err := syncproto.DeviceClientID("alice", "phone")
	require.NoError(t, err)
	require.Equal(t, "alice:phone", id)
	require.True(t, syncproto.InDeviceNamespace("alice:phone", "alice:"))
	require.False(t, syncproto.InDeviceNamespace("alice:", "alice:"), "the device part is required")
	require.False(t, syncproto.InDeviceNamespace("alicex:phone", "alice:"))
	require.False(t, syncproto.InDeviceNamespace("bob:phone", "alice:"))
	_, err = syncproto.DeviceClientID("alice", strings.Repeat("d", 64))
	require.Error(t, err)
}

func TestSigningKeyRoundTripsThroughPEM(t *testing.T) {
	for _, alg := range algs {
		k, err := auth.GenerateSigningKey(alg)
		require.NoError(t, err)
		b, err := auth.MarshalSigningKey(k)
		require.NoError(t, err)
		back, err := auth.ParseSigningKey(b)
		require.NoError(t, err)
		require.Equal(t, k.Kid, back.Kid)
		require.Equal(t, k.Alg, back.Alg)
		require.True(t, back.Private.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(k.Private.Public()))
	}
	_, err := auth.ParseSigningKey([]byte("nope"))
	require.Error(t, err)
}
