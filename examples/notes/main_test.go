package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
)

// TestOfflineThenSync writes a note while no server listens, then starts
// syncd on that address and syncs.
func TestOfflineThenSync(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	addr := syncdtest.FreeAddr(t) // nobody listens: the device is offline

	tokens := filepath.Join(dir, "tokens.json")
	token, err := auth.Issue(tokens, auth.Principal{Tenant: "dev", ClientID: "laptop", Read: []string{"*"}, Write: []string{"*"}}, time.Now())
	require.NoError(t, err)
	notes := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		base := []string{"--server", "http://" + addr, "--token", token, "--client-id", "laptop", "--dir", filepath.Join(dir, "device"), "--wait", "30s"}
		require.NoError(t, run(ctx, append(base, args...), &out))
		return out.String()
	}

	added := notes("add", "shopping", "milk, eggs")
	require.Contains(t, added, "saved shopping")
	require.Contains(t, added, "offline: it syncs when the server is reachable")
	hostile := notes("add", "trap", "\x1b]0;pwned\x07\x1b[2J")
	require.NotContains(t, hostile, "\x1b", "a note's text never reaches the terminal raw")
	listed := notes("ls")
	require.Contains(t, listed, "(not synced)")
	require.NotContains(t, listed, "\x1b")
	require.Contains(t, listed, `\x1b]0;pwned\x07`)
	require.Contains(t, notes("status"), "pending 2")

	authn, err := auth.NewAuthenticator(tokens, nil)
	require.NoError(t, err)
	syncdtest.StartAt(t, addr, server.Config{DataPath: filepath.Join(dir, "syncd.db"), Authenticator: authn})

	require.Contains(t, notes("sync"), "pending 0, dead letters 0")
	out := notes("ls")
	require.Contains(t, out, "milk, eggs")
	require.NotContains(t, out, "not synced")
}

// --help lists the commands and is no error (exit status 0).
func TestHelpListsTheCommands(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"--help"}, &out))
	for _, cmd := range []string{"add KEY TEXT", "rm KEY", "ls", "sync", "status", "share NOTEBOOK USER", "unshare NOTEBOOK USER", "-notebook", "-credential", "-wait"} {
		require.Contains(t, out.String(), cmd)
	}
}

// notesServer starts syncd with a token file holding one token for
// laptop, and returns the server and that token.
func notesServer(t *testing.T) (*syncdtest.Server, string) {
	t.Helper()
	s := syncdtest.Start(t, server.Config{})
	return s, s.Issue(t, auth.Principal{Tenant: "dev", ClientID: "laptop", Read: []string{"*"}, Write: []string{"*"}})
}

// Online, add pushes the note and says how the server decided; a device
// credential is all the configuration it needs.
func TestAddPushesWhenOnline(t *testing.T) {
	s, token := notesServer(t)
	var out bytes.Buffer
	args := []string{"--server", s.URL, "--credential", client.FormatCredential("laptop", token), "--dir", t.TempDir(), "--wait", "30s"}
	require.NoError(t, run(t.Context(), append(args, "add", "shopping", "milk"), &out))
	require.Contains(t, out.String(), "synced: applied as version 1")
	require.Len(t, s.Oplog(t, "&tenant=dev"), 1, "the note reached the server")
}

// A device the server refuses is told why at once: add and sync fail with
// the typed refusal within the fail-fast bound, not "not reachable" after
// the wait.
func TestRefusedDeviceIsToldWhy(t *testing.T) {
	s, token := notesServer(t)
	for _, tc := range []struct {
		name, token, clientID string
		want                  error
	}{
		{"bad token", "sdk_000000000000_nope", "laptop", client.ErrUnauthorized},
		{"token of another client id", token, "phone", client.ErrWrongClientID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, cmd := range [][]string{{"add", "k", "v"}, {"sync"}} {
				var out bytes.Buffer
				args := []string{"--server", s.URL, "--token", tc.token, "--client-id", tc.clientID, "--dir", dir, "--wait", "2s"}
				err := run(t.Context(), append(args, cmd...), &out)
				require.ErrorIs(t, err, tc.want, "%s: %s", cmd[0], out.String())
				var re *client.RefusedError
				require.ErrorAs(t, err, &re)
			}
			var out bytes.Buffer
			require.NoError(t, run(t.Context(), []string{"--server", s.URL, "--token", tc.token, "--client-id", tc.clientID, "--dir", dir, "ls"}, &out))
			require.Contains(t, out.String(), "(not synced)", "the note stays queued")
		})
	}
}

// With --jwt the app signs in with a JWT from a file, as a device of the
// token's user.
func TestAddWithAJWT(t *testing.T) {
	dir := t.TempDir()
	key, err := auth.GenerateSigningKey("ES256")
	require.NoError(t, err)
	jwks, err := auth.JWKS(key)
	require.NoError(t, err)
	jwksPath, jwtPath := filepath.Join(dir, "jwks.json"), filepath.Join(dir, "alice.jwt")
	require.NoError(t, os.WriteFile(jwksPath, jwks, 0o600))
	a, err := auth.New(auth.Config{JWT: &auth.JWTConfig{JWKSFile: jwksPath, Issuer: "syncd-dev", Audience: "syncd"}})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	s := syncdtest.Start(t, server.Config{Authenticator: a})
	now := time.Now()
	tok, err := key.Sign(map[string]any{"iss": "syncd-dev", "aud": "syncd", "sub": "alice", "tenant": "dev",
		"read": "*", "write": "*", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(jwtPath, []byte(tok+"\n"), 0o600))
	var out bytes.Buffer
	args := []string{"--server", s.URL, "--jwt", jwtPath, "--client-id", "alice:laptop", "--dir", t.TempDir(), "--wait", "30s"}
	require.NoError(t, run(t.Context(), append(args, "add", "shopping", "milk"), &out))
	require.Contains(t, out.String(), "synced: applied as version 1")
}

// Shared notebooks: alice founds a notebook, writes into it and shares it
// with bob, whose device then holds it; when she unshares it, it leaves
// bob's device on its next sync.
func TestSharedNotebookLeavesTheDeviceOfWhoLostIt(t *testing.T) {
	sc := &replication.Scopes{}
	require.NoError(t, sc.Set("notebook=notes.notebook,members.notebook"))
	require.NoError(t, sc.SetMembership("notebook=members:user"))
	s := syncdtest.Start(t, server.Config{Scopes: sc})
	device := func(user string) func(args ...string) string {
		token := s.Issue(t, auth.Principal{Tenant: "dev", ClientID: user + "-laptop", User: user, Read: []string{"*"}, Write: []string{"*"}})
		dir := t.TempDir()
		return func(args ...string) string {
			t.Helper()
			var out bytes.Buffer
			base := []string{"--server", s.URL, "--credential", client.FormatCredential(user+"-laptop", token), "--dir", dir, "--wait", "30s"}
			require.NoError(t, run(t.Context(), append(base, args...), &out))
			return out.String()
		}
	}
	alice, bob := device("alice"), device("bob")
	require.Contains(t, alice("share", "trip", "alice"), "synced: applied")
	require.Contains(t, alice("--notebook", "trip", "add", "day1", "museum"), "synced: applied")
	require.Contains(t, alice("share", "trip", "bob"), "synced: applied")
	require.NotContains(t, bob("ls"), "museum", "not synced yet")

	require.Eventually(t, func() bool {
		bob("sync")
		return strings.Contains(bob("ls"), "museum")
	}, 30*time.Second, 100*time.Millisecond, "the shared notebook reaches bob's device")
	require.Contains(t, bob("ls"), "[trip]")
	require.Contains(t, bob("status"), "notebook trip: ready")

	require.Contains(t, alice("unshare", "trip", "bob"), "synced: applied")
	require.Eventually(t, func() bool {
		bob("sync")
		return !strings.Contains(bob("ls"), "museum")
	}, 30*time.Second, 100*time.Millisecond, "the notebook leaves bob's device")
	require.Contains(t, bob("status"), "notebook trip: revoked")
	require.Contains(t, alice("ls"), "museum", "alice keeps her notebook")
}
