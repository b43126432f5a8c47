package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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
// JWTs from a source that caches each token until it expired (so the
// client's early renewals get the same token back and wait). The server
// ends each session at exp (token_expired); the client asks its source and
// reconnects. Every write is decided exactly once, and none is charged for
// an expiry: with a retry budget of one attempt, a charged write would be
// dead-lettered.
func TestTokenSourceCarriesQueuedWritesThroughExpiries(t *testing.T) {
	idp := authtest.NewProvider(t, "ES256")
	s := startJWTSyncd(t, idp, server.Config{TokenRecheck: 100 * time.Millisecond})
	var asked, minted atomic.Int64
	var cached atomic.Pointer[cachedToken]
	source := func(context.Context) (string, error) {
		asked.Add(1)
		if c := cached.Load(); c != nil && time.Now().Before(c.exp) {
			return c.token, nil
		}
		minted.Add(1)
		c := &cachedToken{token: idp.Token("ES256", "alice", tenant, 5*time.Second), exp: time.Now().Add(5 * time.Second)}
		cached.Store(c)
		return c.token, nil
	}
	d := openDevice(t, s, s.proxy(t), t.TempDir(), "alice:phone", deviceOptions{tweak: func(c *client.Config) {
		c.Token, c.TokenSource, c.MaxAttempts = "", source, 1
	}})
	ops := queueAndKeepWriting(t, d, func() bool {
		return metric(t, s.Registry, "syncd_protocol_errors_total", "code=token_expired") >= 3
	})
	s.requireAppliedOnce(t, ops)
	st := d.status(t)
	require.Zero(t, st.DeadLetters, "no write was charged for an expiry")
	require.GreaterOrEqual(t, minted.Load(), int64(4), "a new token for each session")
	require.Zero(t, metric(t, d.registry, "syncd_client_token_renewals_total"), "the source never had a new token early")
	t.Logf("%d writes, %d tokens minted, source asked %d times", len(ops), minted.Load(), asked.Load())
}

// cachedToken is a token source's cache.
type cachedToken struct {
	token string
	exp   time.Time
}

// TestTokenSourceRenewsBeforeExpiry: a device signs in with 6-second JWTs
// from a source that mints a new one whenever asked. The client renews
// each token before its exp and reconnects with the new one, so the
// server never has to end a session for an expired token: writes keep
// flowing across several expiries, none is lost or charged, no
// token_expired reaches the device, and Status says why it reconnects
// (the first renewal's websocket upgrade is held until the test saw it).
func TestTokenSourceRenewsBeforeExpiry(t *testing.T) {
	idp := authtest.NewProvider(t, "EdDSA")
	s := startJWTSyncd(t, idp, server.Config{TokenRecheck: 100 * time.Millisecond})
	var asked atomic.Int64
	gate := &upgradeGate{open: make(chan struct{})}
	source := func(context.Context) (string, error) {
		if asked.Add(1) == 2 {
			gate.closed.Store(true) // the first renewal's reconnect waits
		}
		return idp.Token("EdDSA", "carol", tenant, 6*time.Second), nil
	}
	d := openDevice(t, s, s.proxy(t), t.TempDir(), "carol:laptop", deviceOptions{tweak: func(c *client.Config) {
		c.Token, c.TokenSource, c.MaxAttempts = "", source, 1
		c.HTTPClient = &http.Client{Transport: gate}
	}})
	renewals := func() float64 { return metric(t, d.registry, "syncd_client_token_renewals_total") }
	var sawRefresh bool
	ops := queueAndKeepWriting(t, d, func() bool {
		// The renewal says so from the moment it starts; the old session
		// then ends, and the new one waits at the gate.
		if st := d.status(t); !sawRefresh && st.TokenRefresh && !st.Connected {
			require.NotEqual(t, client.StateOffline, st.State, "renewing is not being offline")
			sawRefresh = true
			close(gate.open)
		}
		return renewals() >= 3
	})
	require.True(t, sawRefresh, "Status said why the client reconnected")
	s.requireAppliedOnce(t, ops)
	st := d.status(t)
	require.Zero(t, st.DeadLetters, "no write was charged for a renewal")
	require.False(t, st.TokenRefresh, "the renewal is over once connected")
	require.Zero(t, metric(t, s.Registry, "syncd_protocol_errors_total", "code=token_expired"), "no session outlived its token")
	t.Logf("%d writes, %v renewals, source asked %d times", len(ops), renewals(), asked.Load())
}

// upgradeGate is an HTTP transport that holds websocket upgrades, once
// closed, until open is closed (or the request ends); every other request
// passes.
type upgradeGate struct {
	closed atomic.Bool
	open   chan struct{}
}

func (g *upgradeGate) RoundTrip(r *http.Request) (*http.Response, error) {
	if g.closed.Load() && r.Header.Get("Upgrade") == "websocket" {
		select {
		case <-g.open:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	return http.DefaultTransport.RoundTrip(r)
}

// queueAndKeepWriting queues 1,000 writes offline, brings the device
// online and keeps writing until done reports true (bounded in count and
// time); it returns every op once all are applied and the device synced.
func queueAndKeepWriting(t *testing.T, d *device, done func() bool) []string {
	t.Helper()
	d.offline()
	d.waitOffline(t)
	var ops []string
	for i := range 1000 {
		ops = append(ops, d.put(t, "notes", fmt.Sprintf("q-%d", i), `{"n":1}`))
	}
	d.online()
	deadline := time.Now().Add(waitFor)
	for i := 0; !done(); i++ {
		require.True(t, time.Now().Before(deadline), "done within %s", waitFor)
		require.Less(t, i, 5000, "bounded")
		ops = append(ops, d.put(t, "notes", fmt.Sprintf("live-%d", i), `{"n":2}`))
		time.Sleep(10 * time.Millisecond)
	}
	d.requireApplied(t, ops)
	d.waitSynced(t)
	return ops
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
