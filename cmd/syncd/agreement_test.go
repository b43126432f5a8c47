package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
)

// TestJWTAgreementCoversWhatDecidesAdmission: every JWT setting that
// changes which tokens a node admits, but for the deny list and the JWKS
// file (parts of their own), changes the "jwt" part, the HS256 secret by
// its contents (a rotation a node missed); the fetch schedule does not,
// and a missing file stands by "missing" whatever its path.
func TestJWTAgreementCoversWhatDecidesAdmission(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(data), 0o600))
		return p
	}
	jwks := write("jwks.json", `{"keys":[]}`)
	deny := write("deny.json", `{"denied":[]}`)
	base := func() jwtOptions {
		var j jwtOptions
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		j.register(fs)
		require.NoError(t, fs.Parse([]string{"--jwt-jwks-file", jwks, "--jwt-deny-file", deny, "--jwt-issuer", "https://id.example"}))
		return j
	}
	want := base()
	again := base()
	require.Equal(t, want.agreement(), again.agreement(), "the same settings agree")

	differs := map[string]func(j *jwtOptions){
		"issuer":          func(j *jwtOptions) { j.issuer = "https://other.example" },
		"audience":        func(j *jwtOptions) { j.audience = "app" },
		"algorithms":      func(j *jwtOptions) { j.algorithms = "RS256" },
		"leeway":          func(j *jwtOptions) { j.leeway = time.Minute },
		"max lifetime":    func(j *jwtOptions) { j.maxLifetime = time.Hour },
		"max bytes":       func(j *jwtOptions) { j.maxBytes = 1024 },
		"tenant claim":    func(j *jwtOptions) { j.tenantClaim = "org" },
		"default tenant":  func(j *jwtOptions) { j.defaultTenant = "acme" },
		"read claim":      func(j *jwtOptions) { j.readClaim = "r" },
		"write claim":     func(j *jwtOptions) { j.writeClaim = "w" },
		"scopes claim":    func(j *jwtOptions) { j.scopesClaim = "s" },
		"client id claim": func(j *jwtOptions) { j.clientIDClaim = "device" },
		"jwks url":        func(j *jwtOptions) { j.jwksURL = "https://id.example/jwks"; j.jwksFile = "" },
		"hs256 secret": func(j *jwtOptions) {
			j.secretFile = write("secret", "0123456789abcdef0123456789abcdef")
			j.jwksFile = ""
		},
		"off": func(j *jwtOptions) { j.jwksFile = "" },
	}
	for name, change := range differs {
		j := base()
		change(&j)
		require.NotEqual(t, want.agreement(), j.agreement(), "%s must be part of the agreement", name)
	}

	same := base()
	same.refresh, same.minRefresh, same.timeout = time.Hour, time.Hour, time.Hour
	require.Equal(t, want.agreement(), same.agreement(), "the fetch schedule is each node's own")

	a, b := base(), base()
	a.secretFile, b.secretFile = filepath.Join(dir, "a", "none"), filepath.Join(dir, "b", "none")
	a.jwksFile, b.jwksFile = "", ""
	require.Equal(t, a.agreement(), b.agreement(), "a missing secret file is missing wherever it was looked for")
	secret := base()
	secret.jwksFile, secret.secretFile = "", write("secret", "0123456789abcdef0123456789abcdef")
	before := secret.agreement()
	require.NoError(t, os.WriteFile(secret.secretFile, []byte("fedcba9876543210fedcba9876543210"), 0o600))
	require.NotEqual(t, before, secret.agreement(), "the secret file is read afresh")

	// The deny list and the JWKS file are parts of their own, judged by
	// their generation (TestAgreementPublishesTheJWTFilesGenerations):
	// not in "jwt".
	other := base()
	other.denyFile = write("deny2.json", `{"version":1,"generation":4,"jtis":[{"jti":"x"}],"users":[]}`)
	other.jwksFile = write("jwks2.json", `{"generation":3,"keys":[{"kid":"rotated"}]}`)
	require.Equal(t, want.agreement(), other.agreement(), "another deny list or JWKS file leaves the jwt part alone")
}

// TestAgreementCoversScopes: nodes with other partial sync declarations
// differ in the "scopes" part, and only there.
func TestAgreementCoversScopes(t *testing.T) {
	var a, b options
	require.NoError(t, a.scopes.Set("project=tasks.project"))
	require.NoError(t, b.scopes.Set("project=tasks.project,notes.project"))
	pa, pb := agreement(a)(), agreement(b)()
	for part := range pa {
		if part == "scopes" {
			require.NotEqual(t, pa[part], pb[part])
			continue
		}
		require.Equal(t, pa[part], pb[part], part)
	}
	var c options
	require.NoError(t, c.scopes.Set("project=tasks.project"))
	require.NoError(t, c.scopes.SetMembership("project=tasks:owner"))
	require.NotEqual(t, pa["scopes"], agreement(c)()["scopes"], "the membership model too")
}

// TestAgreementPublishesTheTokenFilesGeneration: the "tokens" part is the
// file's digest, read afresh, and "tokens_generation" the generation in
// it, which an issue and a revocation bump; a file of a release before
// generations, and a missing file, are generation 0.
func TestAgreementPublishesTheTokenFilesGeneration(t *testing.T) {
	var o options
	o.tokens = filepath.Join(t.TempDir(), "tokens.json")
	parts := agreement(o)
	genPart := cluster.GenerationPart(partTokens)
	require.Equal(t, "0", parts()[genPart], "no file yet")
	missing := parts()[partTokens]

	bearer, err := auth.Issue(o.tokens, auth.Principal{Tenant: "acme", ClientID: "phone"}, time.Now())
	require.NoError(t, err)
	first := parts()
	require.Equal(t, "1", first[genPart])
	require.NotEqual(t, missing, first[partTokens])
	require.NoError(t, auth.Revoke(o.tokens, auth.TokenIDOf(bearer)))
	second := parts()
	require.Equal(t, "2", second[genPart])
	require.NotEqual(t, first[partTokens], second[partTokens])

	require.NoError(t, os.WriteFile(o.tokens, []byte(`{"version":1,"tokens":[]}`), 0o600))
	require.Equal(t, "0", parts()[genPart], "a file of a release before generations")
}

// TestClusterTokensGraceFlag: --cluster-tokens-grace (SYNCD_CLUSTER_TOKENS_GRACE)
// defaults to cluster.DefaultGenerationGrace, is listed by --help, and is
// refused outside (0, cluster.MaxGenerationGrace].
func TestClusterTokensGraceFlag(t *testing.T) {
	base := []string{"--cluster", "--cluster-secret", "s", "--replicas", "1"}
	none := func(string) string { return "" }
	o, err := parseFlags(base, none, io.Discard)
	require.NoError(t, err)
	require.Equal(t, cluster.DefaultGenerationGrace, o.cluster.tokensGrace)

	env := map[string]string{"SYNCD_CLUSTER_TOKENS_GRACE": "45s"}
	o, err = parseFlags(base, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 45*time.Second, o.cluster.tokensGrace)

	for _, bad := range []string{"0s", "-1s", (cluster.MaxGenerationGrace + time.Second).String()} {
		_, err := parseFlags(append(base, "--cluster-tokens-grace", bad), none, io.Discard)
		require.ErrorContains(t, err, "--cluster-tokens-grace "+bad+": want a positive duration up to "+cluster.MaxGenerationGrace.String())
	}
	var help syncdtest.Buffer
	_, err = parseFlags([]string{"--help"}, none, &help)
	require.Error(t, err)
	require.Contains(t, help.String(), "-cluster-tokens-grace")
}

// TestAgreementPublishesTheJWTFilesGenerations: the "jwt_deny" part is
// the deny list's digest, read afresh, and "jwt_deny_generation" the
// generation in it, which every denial and allow bump (auth.Deny, as
// syncctl jwt revoke and the admin API write it); "jwt_jwks" and
// "jwt_jwks_generation" are the JWKS file's, whose generation syncctl jwt
// keygen bumps (a "generation" member beside "keys"). A file of a release
// before generations (or an identity provider's JWKS), and a missing one,
// are generation 0; without JWT verification each part is "off", without
// the file configured "none", both at generation 0. No other part moves
// with either file.
func TestAgreementPublishesTheJWTFilesGenerations(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	for _, tc := range []struct {
		part   string
		set    func(o *options, path string)
		change func(t *testing.T, path string, n int)
		old    string
	}{
		{partJWTDeny, func(o *options, path string) { o.jwt.secretFile, o.jwt.denyFile = filepath.Join(dir, "secret"), path },
			func(t *testing.T, path string, n int) {
				if n%2 == 0 {
					_, err := auth.Deny(path, auth.Denial{JTI: "stolen"}, now)
					require.NoError(t, err)
					return
				}
				_, err := auth.Allow(path, "stolen", "", now)
				require.NoError(t, err)
			}, `{"version":1,"jtis":[{"jti":"old"}],"users":[]}`},
		{partJWTJWKS, func(o *options, path string) { o.jwt.jwksFile, o.jwt.denyFile = path, "" },
			func(t *testing.T, path string, _ int) {
				k, err := auth.GenerateSigningKey("EdDSA")
				require.NoError(t, err)
				keys, err := auth.JWKS(k)
				require.NoError(t, err)
				var doc struct {
					Keys []json.RawMessage `json:"keys"`
				}
				require.NoError(t, json.Unmarshal(keys, &doc))
				data, err := json.Marshal(map[string]any{"generation": auth.Generation(readForAgreement(path)) + 1, "keys": doc.Keys})
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(path, data, 0o600))
			}, `{"keys":[]}`},
	} {
		t.Run(tc.part, func(t *testing.T) {
			path := filepath.Join(dir, tc.part+".json")
			var o options
			o.tokens = filepath.Join(dir, "tokens.json")
			tc.set(&o, path)
			parts := agreement(o)
			genPart := cluster.GenerationPart(tc.part)
			require.Equal(t, tc.part+"_generation", genPart)
			missing := parts()
			require.Equal(t, "0", missing[genPart], "no file yet")
			prev := missing
			for n := range 2 {
				tc.change(t, path, n)
				got := parts()
				require.Equal(t, fmt.Sprint(n+1), got[genPart], "change %d", n+1)
				require.NotEqual(t, prev[tc.part], got[tc.part])
				for part, v := range missing {
					if part != tc.part && part != genPart {
						require.Equal(t, v, got[part], "%s does not move with %s", part, tc.part)
					}
				}
				prev = got
			}
			require.NoError(t, os.WriteFile(path, []byte(tc.old), 0o600))
			require.Equal(t, "0", parts()[genPart], "a file without a generation")

			var off options
			tc.set(&off, path)
			off.jwt.secretFile, off.jwt.jwksFile = "", ""
			got := agreement(off)()
			require.Equal(t, cluster.HashPart([]byte("off")), got[tc.part], "no file is read without JWT verification")
			require.Equal(t, "0", got[genPart])
		})
	}
	var o options
	o.jwt.secretFile = filepath.Join(dir, "secret")
	got := agreement(o)()
	require.Equal(t, cluster.HashPart([]byte("none")), got[partJWTJWKS], "no JWKS file configured")
	require.Equal(t, "0", got[cluster.GenerationPart(partJWTJWKS)])
	require.Equal(t, []string{partTokens, partJWTDeny, partJWTJWKS}, generationParts, "the three files' parts carry a generation")
}
