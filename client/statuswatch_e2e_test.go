package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/server"
)

// nextStatus reads watch until a status satisfies cond, for at most
// within, and returns it.
func nextStatus(t *testing.T, watch <-chan client.Status, within time.Duration, what string, cond func(client.Status) bool) client.Status {
	t.Helper()
	deadline := time.After(within)
	var last client.Status
	for {
		select {
		case st, ok := <-watch:
			require.True(t, ok, "watch closed while waiting for %s (last %+v)", what, last)
			if cond(st) {
				return st
			}
			last = st
		case <-deadline:
			t.Fatalf("no status %s within %s (last %+v)", what, within, last)
		}
	}
}

// A refused token reaches a status watcher as the refused state with the
// typed error, within the fail-fast deadline.
func TestWatchStatusSeesRefusal(t *testing.T) {
	s := startSyncd(t, server.Config{})
	d := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-1", deviceOptions{token: "not-a-token"})
	watch := d.WatchStatus(t.Context())
	st := nextStatus(t, watch, refusalDeadline, "refused", func(st client.Status) bool { return st.State == client.StateRefused })
	require.ErrorIs(t, st.LastError, client.ErrUnauthorized)
	var re *client.RefusedError
	require.ErrorAs(t, st.LastError, &re)
}

// A watcher sees the device go idle, offline when its network goes, the
// pending count of a write made offline, and idle again once it is back;
// Close ends the channel with the closed state.
func TestWatchStatusFollowsTheNetwork(t *testing.T) {
	s := startSyncd(t, server.Config{})
	d := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-1", deviceOptions{})
	watch := d.WatchStatus(t.Context())
	idle := func(st client.Status) bool { return st.State == client.StateIdle && st.Connected && st.Pending == 0 }
	nextStatus(t, watch, waitFor, "idle", idle)

	d.offline()
	nextStatus(t, watch, waitFor, "offline", func(st client.Status) bool { return st.State == client.StateOffline && !st.Online })
	d.put(t, "notes", "a", `{"n":1}`)
	nextStatus(t, watch, waitFor, "offline with one pending", func(st client.Status) bool { return st.State == client.StateOffline && st.Pending == 1 })

	d.online()
	st := nextStatus(t, watch, waitFor, "idle after the write synced", idle)
	require.NoError(t, st.LastError)

	require.NoError(t, d.Close())
	st = nextStatus(t, watch, waitFor, "closed", func(st client.Status) bool { return st.State == client.StateClosed })
	require.Zero(t, st.Pending)
	_, ok := <-watch
	require.False(t, ok, "the channel is closed after the closed status")
	_, ok = <-d.WatchStatus(t.Context())
	require.False(t, ok, "a watch on a closed client is closed at once")
}

// A reader that never reads holds the client up in nothing: the channel
// keeps only the newest status, and ending the watch's context closes it.
func TestWatchStatusCoalescesAndEndsWithContext(t *testing.T) {
	s := startSyncd(t, server.Config{})
	d := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-1", deviceOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	slow := d.WatchStatus(ctx)
	d.offline()
	d.waitOffline(t)
	for i := range 50 {
		d.put(t, "notes", "k", fmt.Sprintf(`{"n":%d}`, i))
	}
	d.waitStatus(t, "50 pending", func(st client.Status) bool { return st.Pending == 50 })
	// Everything above happened while nobody read: the newest status is
	// delivered within the refresh bound, and only one is waiting.
	require.Eventually(t, func() bool { return len(slow) == 1 }, waitFor, pollTick)
	require.Eventually(t, func() bool {
		select {
		case st := <-slow:
			return st.Pending == 50
		default:
			return false
		}
	}, waitFor, pollTick)
	cancel()
	require.Eventually(t, func() bool {
		select {
		case _, ok := <-slow:
			return !ok
		default:
			return false
		}
	}, waitFor, pollTick, "ending the context closes the channel")
}
