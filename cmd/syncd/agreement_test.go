package main

import (
	"flag"
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
// changes which tokens a node admits, but for the deny list (its own
// part), changes the "jwt" part, files by their contents (a key rotation
// a node missed); the fetch schedule does not, and a missing file stands
// by "missing" whatever its path.
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
		"jwks file contents": func(j *jwtOptions) {
			j.jwksFile = write("jwks2.json", `{"keys":[{"kid":"new"}]}`)
		},
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
	a.jwksFile, b.jwksFile = filepath.Join(dir, "a", "none.json"), filepath.Join(dir, "b", "none.json")
	require.Equal(t, a.agreement(), b.agreement(), "a missing JWKS file is missing wherever it was looked for")
	before := want.agreement()
	require.NoError(t, os.WriteFile(jwks, []byte(`{"keys":[{"kid":"rotated"}]}`), 0o600))
	require.NotEqual(t, before, want.agreement(), "the JWKS file is read afresh")

	// The deny list is a part of its own, judged by its generation
	// (TestAgreementPublishesTheDenyListsGeneration): not in "jwt".
	other := base()
	other.denyFile = write("deny2.json", `{"version":1,"generation":4,"jtis":[{"jti":"x"}],"users":[]}`)
	require.Equal(t, want.agreement(), other.agreement(), "another deny list leaves the jwt part alone")
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

// TestAgreementPublishesTheDenyListsGeneration: the "jwt_deny" part is
// the deny list's digest, read afresh, and "jwt_deny_generation" the
// generation in it, which every denial and allow bump (auth.Deny, as
// syncctl jwt revoke and the admin API write it); a list of a release
// before generations, and a missing one, are generation 0; with JWT
// verification off the part is "off" at generation 0. No other part
// moves with the deny list.
func TestAgreementPublishesTheDenyListsGeneration(t *testing.T) {
	dir := t.TempDir()
	var o options
	o.tokens = filepath.Join(dir, "tokens.json")
	o.jwt.secretFile = filepath.Join(dir, "secret")
	o.jwt.denyFile = filepath.Join(dir, "deny.json")
	parts := agreement(o)
	genPart := cluster.GenerationPart(partJWTDeny)
	require.Equal(t, "jwt_deny_generation", genPart)
	missing := parts()
	require.Equal(t, "0", missing[genPart], "no file yet")

	now := time.Now()
	_, err := auth.Deny(o.jwt.denyFile, auth.Denial{JTI: "stolen"}, now)
	require.NoError(t, err)
	first := parts()
	require.Equal(t, "1", first[genPart])
	require.NotEqual(t, missing[partJWTDeny], first[partJWTDeny])
	_, err = auth.Allow(o.jwt.denyFile, "stolen", "", now)
	require.NoError(t, err)
	second := parts()
	require.Equal(t, "2", second[genPart])
	require.NotEqual(t, first[partJWTDeny], second[partJWTDeny])
	for part, v := range missing {
		if part != partJWTDeny && part != genPart {
			require.Equal(t, v, second[part], "%s does not move with the deny list", part)
		}
	}

	require.NoError(t, os.WriteFile(o.jwt.denyFile, []byte(`{"version":1,"jtis":[{"jti":"old"}],"users":[]}`), 0o600))
	require.Equal(t, "0", parts()[genPart], "a list of a release before generations")

	var off options
	off.jwt.denyFile = o.jwt.denyFile
	got := agreement(off)()
	require.Equal(t, cluster.HashPart([]byte("off")), got[partJWTDeny], "no deny list is read without JWT verification")
	require.Equal(t, "0", got[genPart])
	require.Equal(t, []string{partTokens, partJWTDeny}, generationParts, "both files' parts carry a generation")
}
