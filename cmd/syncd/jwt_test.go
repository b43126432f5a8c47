package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// With JWT verification configured, syncd needs no token file: it serves
// JWTs only.
func TestJWTOnlyNeedsNoTokenFile(t *testing.T) {
	dir := t.TempDir()
	key, err := auth.GenerateSigningKey("RS256")
	require.NoError(t, err)
	jwks, err := auth.JWKS(key)
	require.NoError(t, err)
	jwksPath := filepath.Join(dir, "jwks.json")
	require.NoError(t, os.WriteFile(jwksPath, jwks, 0o600))
	logs := &syncdtest.Buffer{}
	addr, stop := startRun(t, []string{"--listen", "127.0.0.1:0", "--admin-listen", "", "--data", filepath.Join(dir, "syncd.db"),
		"--tokens", filepath.Join(dir, "absent.json"), "--jwt-jwks-file", jwksPath, "--jwt-issuer", "https://id.example/", "--jwt-audience", "app",
		"--jwt-deny-file", filepath.Join(dir, "deny.json")}, logs)
	defer stop()
	require.Contains(t, logs.String(), "JWTs only")

	now := time.Now()
	tok, err := key.Sign(map[string]any{"iss": "https://id.example/", "aud": "app", "sub": "alice", "tenant": "acme", "read": "*",
		"iat": now.Unix(), "exp": now.Add(time.Minute).Unix()})
	require.NoError(t, err)
	for bearer, want := range map[string]int{tok: http.StatusOK, "sdk_000000000000_nope": http.StatusUnauthorized} {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+syncproto.SnapshotPath, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+bearer)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode)
	}
	metrics, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(metrics.Body)
	metrics.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(body), `syncd_jwt_verifications_total{result="ok"} 1`)
}

func TestJWTFlagsRefuseBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--jwt-jwks-file", "x.json"}, "the issuer and the audience are required"},
		{[]string{"--jwt-jwks-file", "x.json", "--jwt-hs256-secret-file", "s", "--jwt-issuer", "i", "--jwt-audience", "a"}, "exactly one"},
		{[]string{"--jwt-jwks-url", "http://id.example/jwks", "--jwt-issuer", "i", "--jwt-audience", "a"}, "https://"},
		{[]string{"--jwt-jwks-file", "x.json", "--jwt-issuer", "i", "--jwt-audience", "a", "--jwt-algorithms", "HS256"}, `"HS256" is not allowed`},
		{[]string{"--jwt-jwks-file", "x.json", "--jwt-issuer", "i", "--jwt-audience", "a", "--jwt-jwks-ca", filepath.Join(dir, "none.pem")}, "--jwt-jwks-ca"},
	} {
		args := append([]string{"--listen", "127.0.0.1:0", "--admin-listen", "", "--data", filepath.Join(dir, "syncd.db"), "--tokens", filepath.Join(dir, "absent.json")}, tc.args...)
		err := run(context.Background(), args, func(string) string { return "" }, io.Discard)
		require.ErrorContains(t, err, tc.says, "%v", tc.args)
	}
}
