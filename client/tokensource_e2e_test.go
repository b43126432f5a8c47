package client_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/server/auth/authtest"
)

// startJWTSyncd starts syncd verifying the provider's JWTs (and an admin
// token from a token file, for the test's admin reads).
func startJWTSyncd(t *testing.T, idp *authtest.Provider, cfg server.Config) *syncd {
	t.Helper()
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	admin, err := auth.Issue(tokens, auth.Principal{Admin: true}, time.Now())
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	a, err := auth.New(auth.Config{TokenFile: tokens, JWT: idp.Config(), Registerer: reg})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	cfg.Authenticator, cfg.Registry = a, reg
	s := startSyncd(t, cfg)
	s.TokenPath, s.AdminToken = tokens, admin
	return s
}

// TestTokenSourceCarriesQueuedWritesThroughExpiries: a device with 1,000
// queued writes, and more written while it syncs, signs in with 5-second
// JWTs from a token source. The server ends each session at exp
// (token_expired); the client asks its source and reconnects. Every write
// is decided exactly once, and none is charged for an expiry: with a retry
// budget of one attempt, a charged write would be dead-lettered.
func TestTokenSourceCarriesQueuedWritesThroughExpiries(t *testing.T) {
	idp := authtest.NewProvider(t, "ES256")
	s := startJWTSyncd(t, idp, server.Config{TokenRecheck: 100 * time.Millisecond})
	var asked atomic.Int64
	source := func(context.Context) (string, error) {
		asked.Add(1)
		return idp.Token("ES256", "alice", tenant, 5*time.Second), nil
	}
	d := openDevice(t, s, s.proxy(t), t.TempDir(), "alice:phone", deviceOptions{tweak: func(c *client.Config) {
		c.Token, c.TokenSource, c.MaxAttempts = "", source, 1
	}})
	d.offline()
	d.waitOffline(t)
	var ops []string
	for i := range 1000 {
		ops = append(ops, d.put(t, "notes", fmt.Sprintf("q-%d", i), `{"n":1}`))
	}
	d.online()

	// Keep writing while three sessions end at their token's exp.
	expired := func() float64 { return metric(t, s.Registry, "syncd_protocol_errors_total", "code=token_expired") }
	deadline := time.Now().Add(waitFor)
	for i := 0; expired() < 3; i++ {
		require.True(t, time.Now().Before(deadline), "three expiries within %s (saw %v)", waitFor, expired())
		require.Less(t, i, 5000, "bounded")
		ops = append(ops, d.put(t, "notes", fmt.Sprintf("live-%d", i), `{"n":2}`))
		time.Sleep(10 * time.Millisecond)
	}
	d.requireApplied(t, ops)
	d.waitSynced(t)
	s.requireAppliedOnce(t, ops)
	st := d.status(t)
	require.Zero(t, st.DeadLetters, "no write was charged for an expiry")
	require.GreaterOrEqual(t, asked.Load(), int64(4), "the source was asked for each session")
	t.Logf("%d writes, %v expiries, %d tokens asked", len(ops), expired(), asked.Load())
}

// TestFailingTokenSourceIsATypedErrorInStatus: a source that fails keeps
// the device offline with its writes queued, says why in Status, and the
// device syncs once the source recovers.
func TestFailingTokenSourceIsATypedErrorInStatus(t *testing.T) {
	idp := authtest.NewProvider(t, "EdDSA")
	s := startJWTSyncd(t, idp, server.Config{})
	var broken atomic.Bool
	broken.Store(true)
	source := func(context.Context) (string, error) {
		if broken.Load() {
			return "", errors.New("identity provider unreachable")
		}
		return idp.Token("EdDSA", "bob", tenant, time.Minute), nil
	}
	d := openDevice(t, s, s.proxy(t), t.TempDir(), "bob:tablet", deviceOptions{tweak: func(c *client.Config) {
		c.Token, c.TokenSource = "", source
	}})
	op := d.put(t, "notes", "k", `1`)
	d.waitStatus(t, "token source error", func(st client.Status) bool {
		var tse *client.TokenSourceError
		return errors.As(st.LastError, &tse) && !st.Connected && st.Pending == 1
	})
	broken.Store(false)
	d.requireApplied(t, []string{op})
	d.waitStatus(t, "error cleared", func(st client.Status) bool { return st.LastError == nil && st.Connected })
}

func TestTokenAndTokenSourceAreExclusive(t *testing.T) {
	_, err := client.Open(context.Background(), client.Config{ServerURLs: []string{"http://127.0.0.1:1"}, ClientID: "a",
		Token: "t", TokenSource: func(context.Context) (string, error) { return "", nil }, ReplicaPath: filepath.Join(t.TempDir(), "r.db")})
	require.Error(t, err)
}
