package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server/auth"
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
