package auth

import (
	"strings"
	"testing"
	"time"
)

// FuzzParseJWKS: any document either parses into usable keys or is
// refused; it never panics.
func FuzzParseJWKS(f *testing.F) {
	for _, alg := range []string{"RS256", "ES256", "EdDSA"} {
		k, err := GenerateSigningKey(alg)
		if err != nil {
			f.Fatal(err)
		}
		doc, err := JWKS(k)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(doc)
	}
	f.Add([]byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		keys, err := parseJWKS(doc)
		if err == nil && len(keys) == 0 {
			t.Fatal("a parsed JWKS holds at least one key")
		}
	})
}

// FuzzVerifyJWT: no string is accepted by an HS256 verifier unless it is
// signed with its secret; none panics it.
func FuzzVerifyJWT(f *testing.F) {
	secret := []byte(strings.Repeat("k", 32))
	now := time.Unix(1_800_000_000, 0)
	good, err := SignHS256(secret, map[string]any{"iss": "i", "aud": "a", "sub": "u", "tenant": "t", "iat": now.Unix(), "exp": now.Add(time.Minute).Unix()})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add("a.b.c")
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	cfg := JWTConfig{HS256SecretFile: "unused", Issuer: "i", Audience: "a"}
	if err := cfg.validate(); err != nil {
		f.Fatal(err)
	}
	a := &Authenticator{now: func() time.Time { return now }, denied: DenyList{Version: denyVersion}}
	a.jwt = newVerifier(cfg, secret, nil, a.now, newAuthMetrics(nil))
	f.Fuzz(func(t *testing.T, tok string) {
		p, err := a.Authenticate(tok)
		if err == nil && (p.User == "" || p.Tenant == "") {
			t.Fatalf("accepted %q without a user and tenant", tok)
		}
	})
}
