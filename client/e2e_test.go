package client_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
)

// syncd is a real server on a loopback port for client tests.
type syncd struct {
	url       string
	tokenPath string
}

func startSyncd(t *testing.T, cfg server.Config) *syncd {
	t.Helper()
	dir := t.TempDir()
	s := &syncd{tokenPath: filepath.Join(dir, "tokens.json")}
	_, err := auth.Issue(s.tokenPath, auth.Principal{Admin: true}, time.Now())
	require.NoError(t, err)
	a, err := auth.NewAuthenticator(s.tokenPath, nil)
	require.NoError(t, err)
	cfg.Authenticator = a
	if cfg.DataPath == "" {
		cfg.DataPath = filepath.Join(dir, "syncd.db")
	}
	srv, err := server.New(context.Background(), cfg)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := &http.Server{Handler: srv.Handler()}
	go hs.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		hs.Close()
		srv.Close()
	})
	s.url = "http://" + ln.Addr().String()
	return s
}

func (s *syncd) token(t *testing.T, tenant, clientID string) string {
	t.Helper()
	tok, err := auth.Issue(s.tokenPath, auth.Principal{Tenant: tenant, ClientID: clientID, Read: []string{"*"}, Write: []string{"*"}}, time.Now())
	require.NoError(t, err)
	return tok
}

// openClient opens a client over a fresh SQLite queue and replica in dir.
func openClient(t *testing.T, s *syncd, dir, clientID string, tweak func(*client.Config)) *client.Client {
	t.Helper()
	q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
	require.NoError(t, err)
	cfg := client.Config{
		ServerURLs: []string{s.url}, Token: s.token(t, "acme", clientID), ClientID: clientID,
		Queue: q, ReplicaPath: filepath.Join(dir, "replica.db"),
		ProbeInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond, MaxRetryInterval: 200 * time.Millisecond,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := client.Open(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestPutAwaitAndFeed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := startSyncd(t, server.Config{})
	a := openClient(t, s, t.TempDir(), "phone-a", nil)
	b := openClient(t, s, t.TempDir(), "phone-b", nil)

	op, err := a.Put(ctx, "notes", "n1", json.RawMessage(`{"text":"hello"}`))
	require.NoError(t, err)
	rec, found, err := a.Get(ctx, "notes", "n1")
	require.NoError(t, err)
	require.True(t, found, "read your own write at once")
	require.True(t, rec.Pending)

	o, err := a.Await(ctx, op)
	require.NoError(t, err)
	require.Equal(t, client.StatusApplied, o.Status)
	require.Equal(t, uint64(1), o.Version)

	require.Eventually(t, func() bool {
		rec, found, err := b.Get(ctx, "notes", "n1")
		return err == nil && found && !rec.Pending && string(rec.Value) == `{"text":"hello"}`
	}, 20*time.Second, 20*time.Millisecond, "b sees a's write through the feed")
}
