package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
)

// atDefaults opens devices with the library's own probe and retry
// intervals, as an app that sets none runs.
func atDefaults(c *client.Config) {
	c.ProbeInterval, c.OfflineProbeInterval, c.RetryInterval, c.MaxRetryInterval = 0, 0, 0, 0
}

// Sync right after Open, with the server up, waits for the connection the
// client is making instead of failing as offline.
func TestSyncRightAfterOpenWaitsForTheConnection(t *testing.T) {
	s := startSyncd(t, server.Config{})
	for i := range 3 {
		d := openDevice(t, s, s.proxy(t), t.TempDir(), fmt.Sprintf("phone-%d", i), deviceOptions{tweak: atDefaults})
		op := d.put(t, "notes", "a", `{"n":1}`)
		ctx, cancel := context.WithTimeout(t.Context(), waitFor)
		require.NoError(t, d.Sync(ctx), "Sync at once after Open")
		cancel()
		require.Equal(t, client.StatusApplied, d.await(t, op).Status)
	}
}

func TestWaitConnected(t *testing.T) {
	s := startSyncd(t, server.Config{})

	t.Run("returns once bound", func(t *testing.T) {
		d := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-1", deviceOptions{tweak: atDefaults})
		ctx, cancel := context.WithTimeout(t.Context(), waitFor)
		defer cancel()
		require.NoError(t, d.WaitConnected(ctx))
		require.True(t, d.status(t).Connected)
	})

	t.Run("waits through offline, honours its context", func(t *testing.T) {
		p := s.proxy(t)
		d := openDevice(t, s, p, t.TempDir(), "phone-2", deviceOptions{})
		require.NoError(t, d.WaitConnected(t.Context()))
		d.offline()
		d.waitOffline(t)
		require.ErrorIs(t, d.Sync(t.Context()), client.ErrOffline, "Sync fails as offline only when the monitor says so")
		short, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, d.WaitConnected(short), context.DeadlineExceeded)

		d.online()
		ctx, cancel := context.WithTimeout(t.Context(), waitFor)
		defer cancel()
		require.NoError(t, d.WaitConnected(ctx))
	})

	t.Run("a permanent refusal ends it", func(t *testing.T) {
		token := s.token(t, "phone-3")
		id, _, _ := strings.Cut(strings.TrimPrefix(token, "sdk_"), "_")
		require.NoError(t, auth.Revoke(s.TokenPath, id))
		d := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-3", deviceOptions{token: token})
		ctx, cancel := context.WithTimeout(t.Context(), waitFor)
		defer cancel()
		err := d.WaitConnected(ctx)
		var re *client.RefusedError
		require.ErrorAs(t, err, &re)
		require.ErrorIs(t, err, client.ErrUnauthorized)
	})

	t.Run("Close ends it", func(t *testing.T) {
		d := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-4", deviceOptions{})
		d.offline()
		errc := make(chan error, 1)
		go func() { errc <- d.WaitConnected(t.Context()) }()
		require.NoError(t, d.Close())
		select {
		case err := <-errc:
			require.True(t, errors.Is(err, client.ErrClosed), "WaitConnected after Close: %v", err)
		case <-time.After(waitFor):
			t.Fatal("WaitConnected outlived Close")
		}
	})
}

// At the library's defaults, the first write queued while the server was
// unreachable is replayed soon after it returns (DefaultOfflineProbeInterval
// is chosen for within a second; the bound here is generous, the time is
// logged, and BenchmarkReplayAfterTheServerReturns measures it).
func TestReplayStartsSoonAfterTheServerReturns(t *testing.T) {
	s := startSyncd(t, server.Config{})
	d := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-1", deviceOptions{tweak: atDefaults})
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	require.NoError(t, d.WaitConnected(ctx))
	t.Logf("back to applied after %s", replayAfterReturn(t, d))
}

// replayAfterReturn takes d's server away, queues a write, brings the server
// back and returns how long the write took to be applied from then.
func replayAfterReturn(t testing.TB, d *device) time.Duration {
	t.Helper()
	d.offline()
	d.waitOffline(t)
	op := d.put(t, "notes", "k", `{"queued":"offline"}`)
	back := time.Now()
	d.online()
	out := d.await(t, op)
	took := time.Since(back)
	require.Equal(t, client.StatusApplied, out.Status)
	return took
}
