package main

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/syncdtest"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
)

// TestOfflineThenSync writes a note while no server listens, then starts
// syncd on that address and syncs.
func TestOfflineThenSync(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nobody listens: the device is offline

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

	require.Contains(t, notes("add", "shopping", "milk, eggs"), "saved shopping")
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
