package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/internal/loopback"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/server/auth/authtest"
	"github.com/syncd-dev/syncd/syncdtest"
)

func TestJWTKeygenSignVerifyAndRevoke(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "jwt")
	c := newCLI(t, nil)
	c.now = time.Now
	out := c.ok("jwt", "keygen", "--dir", dir, "--alg", "EdDSA")
	require.Contains(t, out, "--jwt-jwks-file "+filepath.Join(dir, "jwks.json")+" --jwt-issuer syncd-dev --jwt-audience syncd")
	st, err := os.Stat(filepath.Join(dir, "signing-key.pem"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the private key is private")

	a, err := auth.New(auth.Config{JWT: &auth.JWTConfig{JWKSFile: filepath.Join(dir, "jwks.json"), Issuer: "syncd-dev", Audience: "syncd", MinRefreshInterval: time.Millisecond},
		DenyFile: filepath.Join(dir, "deny.json")})
	require.NoError(t, err)
	defer a.Close()

	r := c.run("jwt", "sign", "--key", filepath.Join(dir, "signing-key.pem"), "--sub", "alice", "--tenant", "dev",
		"--write", "notes", "--jti", "t1", "--device", "phone", "--claim", `scopes={"project":["p1"]}`)
	require.NoError(t, r.err, r.stderr)
	require.Equal(t, "client id of device phone: alice:phone\n", r.stderr)
	p, err := a.Authenticate(strings.TrimSpace(r.stdout))
	require.NoError(t, err)
	require.Equal(t, "alice", p.User)
	require.Equal(t, "dev", p.Tenant)
	require.Equal(t, []string{"*"}, p.Read)
	require.Equal(t, []string{"notes"}, p.Write)
	require.Equal(t, map[string][]string{"project": {"p1"}}, p.Scopes)

	// A second keygen rotates: the first key stays published.
	first := strings.TrimSpace(r.stdout)
	c.ok("jwt", "keygen", "--dir", dir, "--alg", "RS256")
	var doc struct {
		Keys []map[string]any `json:"keys"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "jwks.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &doc))
	require.Len(t, doc.Keys, 2)
	require.Equal(t, uint64(2), auth.Generation(b), "every keygen is the JWKS file's next generation")
	second := strings.TrimSpace(c.ok("jwt", "sign", "--key", filepath.Join(dir, "signing-key.pem"), "--sub", "bob", "--tenant", "dev"))
	_, err = a.Authenticate(second)
	require.NoError(t, err, "the new kid is read from the file on first sight")
	_, err = a.Authenticate(first)
	require.NoError(t, err)

	c.ok("jwt", "revoke", "--deny-file", filepath.Join(dir, "deny.json"), "--jti", "t1")
	require.Eventually(t, func() bool { return a.Check(p) != nil }, ioTimeout, 50*time.Millisecond, "the deny list is re-read within a second")
	require.ErrorIs(t, a.Check(p), auth.ErrUnauthorized)
}

func TestJWTCommandsRefuseBadInput(t *testing.T) {
	c := newCLI(t, nil)
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"jwt", "keygen", "--dir", dir, "--alg", "HS256"}, exitUsage, "want RS256, ES256 or EdDSA"},
		{[]string{"jwt", "sign", "--key", filepath.Join(dir, "missing.pem"), "--sub", "a", "--tenant", "t"}, exitNotFound, "syncctl jwt keygen"},
		{[]string{"jwt", "sign", "--tenant", "t"}, exitUsage, "sub"},
		{[]string{"jwt", "revoke", "--deny-file", filepath.Join(dir, "d.json")}, exitUsage, "jti user"},
		{[]string{"jwt", "revoke", "--deny-file", filepath.Join(dir, "d.json"), "--jti", "x", "--user", "y"}, exitUsage, "none of the others"},
		{[]string{"jwt", "revoke", "--deny-file", filepath.Join(dir, "d.json"), "--jti", "x", "--expires", "soon"}, exitUsage, "--expires"},
	} {
		r := c.run(tc.args...)
		require.Error(t, r.err, "%v", tc.args)
		require.Equal(t, tc.code, r.code, "%v: %v", tc.args, r.err)
		require.Contains(t, r.err.Error(), tc.says)
	}
	c.ok("jwt", "keygen", "--dir", dir)
	r := c.run("jwt", "sign", "--key", filepath.Join(dir, "signing-key.pem"), "--sub", "a", "--tenant", "t", "--claim", "x=not json")
	require.Equal(t, exitUsage, r.code)
	_, err := os.Stat(filepath.Join(dir, "d.json"))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing was written")
}

// TestJWTKeygenBumpsTheJWKSGeneration: keygen over a JWKS file without a
// generation (an identity provider's, or one written before generations)
// keeps its keys and writes generation 1; over a file at the largest
// generation it refuses and writes nothing, never wrapping to 0.
func TestJWTKeygenBumpsTheJWKSGeneration(t *testing.T) {
	c := newCLI(t, nil)
	dir := t.TempDir()
	jwks := filepath.Join(dir, "jwks.json")
	k, err := auth.GenerateSigningKey("ES256")
	require.NoError(t, err)
	provider, err := auth.JWKS(k)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(jwks, provider, 0o644))
	require.Zero(t, auth.Generation(provider))
	c.ok("jwt", "keygen", "--dir", dir)
	b, err := os.ReadFile(jwks)
	require.NoError(t, err)
	require.Equal(t, uint64(1), auth.Generation(b))
	var doc struct {
		Keys []map[string]any `json:"keys"`
	}
	require.NoError(t, json.Unmarshal(b, &doc))
	require.Len(t, doc.Keys, 2, "the provider's key stays")
	require.Equal(t, k.Kid, doc.Keys[0]["kid"])

	top := `{"generation":18446744073709551615,"keys":[]}`
	require.NoError(t, os.WriteFile(jwks, []byte(top), 0o644))
	r := c.run("jwt", "keygen", "--dir", dir)
	require.Equal(t, exitFailure, r.code, "%v", r.err)
	require.ErrorContains(t, r.err, "is the largest there is")
	b, err = os.ReadFile(jwks)
	require.NoError(t, err)
	require.Equal(t, top, string(b), "nothing written")
}

// TestJWTRevokeThroughTheAdminAPI: with --server, jwt revoke, denied and
// allow go through syncd's admin API: the revoked token's open session is
// closed before the command returns, and allow lets it in again.
func TestJWTRevokeThroughTheAdminAPI(t *testing.T) {
	idp := authtest.NewProvider(t, "ES256")
	dir := t.TempDir()
	tokens, deny := filepath.Join(dir, "tokens.json"), filepath.Join(dir, "deny.json")
	admin, err := auth.Issue(tokens, auth.Principal{Admin: true}, time.Now())
	require.NoError(t, err)
	a, err := auth.New(auth.Config{TokenFile: tokens, JWT: idp.Config(), DenyFile: deny})
	require.NoError(t, err)
	defer a.Close()
	s := syncdtest.Start(t, server.Config{Authenticator: a, TokenRecheck: time.Hour})
	ts := &testServer{srv: s.Server, url: s.URL, adminURL: s.AdminURL, tokenPath: tokens, admin: admin}
	tok := idp.Sign("ES256", authtest.Claims("alice", tenant, time.Now(), time.Minute, map[string]any{"jti": "j-1"}))
	sess := ts.dialAs(t, tok, "alice:phone", 0)

	c := newCLI(t, map[string]string{"SYNCCTL_TOKEN": admin})
	out := c.ok("jwt", "revoke", "--server", s.AdminURL, "--jti", "j-1", "--until", "2099-01-01T00:00:00Z")
	require.Equal(t, "denied token j-1 until 2099-01-01T00:00:00Z; syncd closed 1 session\n", out)
	ctx, cancel := context.WithTimeout(t.Context(), ioTimeout)
	defer cancel()
	_, frame, err := sess.conn.Read(ctx)
	require.NoError(t, err, "the refusal arrives before the close")
	require.Contains(t, string(frame), `"code":"unauthorized"`)

	require.Regexp(t, `(?m)^jti\s+j-1\s+-\s+2099-01-01T00:00:00Z$`, c.ok("jwt", "denied", "--server", s.AdminURL))
	var list adminapi.DenyList
	decodeStrict(t, c.ok("jwt", "denied", "--deny-file", deny, "--json"), &list)
	require.Equal(t, []adminapi.DeniedJTI{{JTI: "j-1", ExpiresAt: time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)}}, list.JTIs, "the file holds what the API wrote")

	require.Equal(t, "token j-1 is no longer denied\n", c.ok("jwt", "allow", "--server", s.AdminURL, "--jti", "j-1"))
	ts.dialAs(t, tok, "alice:phone", 0)
	r := c.run("jwt", "allow", "--server", s.AdminURL, "--jti", "j-1")
	require.Equal(t, exitNotFound, r.code, "%v", r.err)
	r = c.run("jwt", "allow", "--deny-file", deny, "--user", "nobody")
	require.Equal(t, exitNotFound, r.code, "%v", r.err)
	r = c.run("jwt", "revoke", "--server", s.AdminURL, "--deny-file", deny, "--jti", "x")
	require.Equal(t, exitUsage, r.code, "%v", r.err)
}

// TestJWTRevokeThroughSeveralServersDatesTheUserOnce: jwt revoke --user
// with every node's admin API in one --server list writes the same entry
// on each node's own deny list (dated once, by syncctl), so a cluster's
// lists stay equal; allow removes it from each. A server that fails does
// not stop the others, and the error names it; jwt denied reads one node.
func TestJWTRevokeThroughSeveralServersDatesTheUserOnce(t *testing.T) {
	idp := authtest.NewProvider(t, "ES256")
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.json")
	admin, err := auth.Issue(tokens, auth.Principal{Admin: true}, time.Now())
	require.NoError(t, err)
	var urls, denyFiles []string
	for i := range 2 {
		deny := filepath.Join(dir, fmt.Sprint("deny", i, ".json"))
		a, err := auth.New(auth.Config{TokenFile: tokens, JWT: idp.Config(), DenyFile: deny})
		require.NoError(t, err)
		t.Cleanup(func() { a.Close() })
		s := syncdtest.Start(t, server.Config{Authenticator: a, TokenRecheck: time.Hour})
		urls, denyFiles = append(urls, s.AdminURL), append(denyFiles, deny)
	}
	c := newCLI(t, map[string]string{"SYNCCTL_TOKEN": admin})
	c.now = func() time.Time { return time.Now().Add(-time.Hour) } // the operator's clock, not the nodes'
	out := c.ok("jwt", "revoke", "--server", strings.Join(urls, ","), "--user", "alice")
	require.Equal(t, 2, strings.Count(out, "denied every token of user alice issued until now; syncd closed 0 sessions\n"), out)
	var lists []auth.DenyList
	for _, f := range denyFiles {
		l, err := auth.ReadDenyList(f)
		require.NoError(t, err)
		require.Len(t, l.Users, 1)
		lists = append(lists, l)
	}
	require.Equal(t, lists[0], lists[1], "both nodes wrote the same entry at the same generation")
	require.WithinDuration(t, time.Now().Add(-time.Hour), lists[0].Users[0].RevokedAt, time.Minute, "dated by syncctl")

	r := c.run("jwt", "denied", "--server", strings.Join(urls, ","))
	require.Equal(t, exitUsage, r.code, "%v", r.err)

	free, err := loopback.FreeAddr()
	require.NoError(t, err)
	down := "http://" + free
	r = c.run("jwt", "allow", "--server", urls[0]+","+down+","+urls[1], "--user", "alice")
	require.Equal(t, exitUnreachable, r.code, "%v", r.err)
	require.ErrorContains(t, r.err, "jwt allow failed on 1 of 3 servers (the others made the change): "+down)
	require.Equal(t, 2, strings.Count(r.stdout, "user alice is no longer denied\n"), r.stdout)
	for _, f := range denyFiles {
		l, err := auth.ReadDenyList(f)
		require.NoError(t, err)
		require.Empty(t, l.Users)
	}
}
