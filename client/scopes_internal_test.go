package client

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/syncproto"
)

// openOffline opens a client of a server that is not there (a loopback
// port nobody listens on) over a SQLite queue in dir, as a device that
// was welcomed before: the replica holds that welcome's scopes and grants.
func openOffline(t *testing.T, dir string, cfg Config, w *scopeWelcome) *Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
	require.NoError(t, err)
	if w != nil {
		r, err := openReplica(t.Context(), q, "", offlinequeue.SyncFull, time.Now)
		require.NoError(t, err)
		require.NoError(t, r.setWelcomeScopes(t.Context(), *w))
		require.NoError(t, r.close())
	}
	cfg.ServerURLs, cfg.Token, cfg.ClientID, cfg.Queue = []string{url}, "token", "phone-1", q
	c, err := Open(t.Context(), cfg)
	require.NoError(t, err)
	return c
}

var testWelcome = &scopeWelcome{Scopes: testScopes, Grants: syncproto.ScopeSet{"project": {"p1", "p2"}}}

func TestSetScopesChecksTheLastWelcome(t *testing.T) {
	dir := t.TempDir()
	c := openOffline(t, dir, Config{}, testWelcome)
	ctx := t.Context()

	var se *ScopeError
	err := c.SetScopes(ctx, "team", "t1")
	require.ErrorAs(t, err, &se)
	require.ErrorIs(t, err, ErrScope)
	require.Equal(t, ScopeError{Scope: "team", Reason: ScopeUndeclared}, *se)
	err = c.SetScopes(ctx, "project", "p1", "p3")
	require.ErrorAs(t, err, &se)
	require.Equal(t, ScopeError{Scope: "project", Value: "p3", Reason: syncproto.EvictNotGranted}, *se)
	var pe *syncproto.Error
	require.ErrorAs(t, c.SetScopes(ctx, "project", "p1", "*"), &pe)
	require.Equal(t, syncproto.CodeInvalidScope, pe.Code)
	require.ErrorAs(t, c.SetScopes(ctx, "project", ""), &pe)
	require.Equal(t, syncproto.CodeInvalidScopeValue, pe.Code)
	want, err := c.replica.scopeWant(ctx)
	require.NoError(t, err)
	require.Nil(t, want, "a refused request stores nothing")

	require.NoError(t, c.SetScopes(ctx, "project", "p2", "p1", "p2"))
	require.Eventually(t, func() bool {
		st, err := c.Status(ctx)
		require.NoError(t, err)
		return len(st.Scopes) == 2
	}, 10*time.Second, 5*time.Millisecond)
	st, err := c.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, []ScopeStatus{{Scope: "project", Value: "p1", State: ScopeBackfilling}, {Scope: "project", Value: "p2", State: ScopeBackfilling}}, st.Scopes)

	// WaitScope: a value not requested is refused at once; a requested
	// one waits for its backfill (here: for ctx).
	err = c.WaitScope(ctx, "project", "p3")
	require.ErrorAs(t, err, &se)
	require.Equal(t, syncproto.EvictUnsubscribed, se.Reason)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, c.WaitScope(short, "project", "p1"), context.DeadlineExceeded)

	// The request is durable: a reopened client sends it, not the default.
	require.NoError(t, c.Close())
	c = openOffline(t, dir, Config{Scopes: syncproto.ScopeSet{"project": {"*"}}}, nil)
	defer c.Close()
	got, err := c.wantFor(ctx, testScopes)
	require.NoError(t, err)
	require.Equal(t, syncproto.ScopeSet{"project": {"p1", "p2"}}, got)
	st, err = c.Status(ctx)
	require.NoError(t, err)
	require.Len(t, st.Scopes, 2, "a reopened client reports its request before it connects")
	require.True(t, errors.Is(c.WaitScope(ctx, "project", "p3"), ErrScope))
}

func TestScopesDefaultToEveryGrant(t *testing.T) {
	c := openOffline(t, t.TempDir(), Config{Scopes: syncproto.ScopeSet{"team": {"t1"}}}, testWelcome)
	defer c.Close()
	declared := map[string]syncproto.ScopeInfo{"project": testScopes["project"], "team": {Models: map[string]string{"boards": "team"}}}
	got, err := c.wantFor(t.Context(), declared)
	require.NoError(t, err)
	require.Equal(t, syncproto.ScopeSet{"project": {"*"}, "team": {"t1"}}, got, "a scope Config.Scopes does not name follows every grant")
	// SetScopes with no values follows none of the scope's rows.
	require.NoError(t, c.SetScopes(t.Context(), "project"))
	got, err = c.wantFor(t.Context(), declared)
	require.NoError(t, err)
	require.Equal(t, syncproto.ScopeSet{"project": {}, "team": {"t1"}}, got)
}

func TestConfigScopesAreValidated(t *testing.T) {
	q, err := offlinequeue.OpenSQLite(filepath.Join(t.TempDir(), "queue.db"), offlinequeue.SQLiteOptions{})
	require.NoError(t, err)
	_, err = Open(t.Context(), Config{ServerURLs: []string{"http://127.0.0.1:1"}, Token: "t", ClientID: "phone-1", Queue: q,
		Scopes: syncproto.ScopeSet{"Project": {"p1"}}})
	var pe *syncproto.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, syncproto.CodeInvalidScope, pe.Code)
}
