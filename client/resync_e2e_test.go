package client_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/server"
)

// A replica synced from one server, opened against a server that never
// reached its cursor (a restore from an older backup, another database),
// is answered cursor_ahead: the client resyncs from that server's snapshot
// by itself instead of retrying the same hello forever.
func TestCursorAheadResyncsByItself(t *testing.T) {
	dir := t.TempDir()
	old := startSyncd(t, server.Config{})
	d := openDevice(t, old, old.proxy(t), dir, "phone-1", deviceOptions{})
	var ops []string
	for _, k := range []string{"a", "b", "c"} {
		ops = append(ops, d.put(t, "notes", k, `{"n":1}`))
	}
	d.requireApplied(t, ops)
	d.waitStatus(t, "cursor at 3", func(st client.Status) bool { return st.Cursor == 3 })
	require.NoError(t, d.Close())

	restored := startSyncd(t, server.Config{})
	other := openDevice(t, restored, restored.proxy(t), t.TempDir(), "phone-2", deviceOptions{})
	other.requireApplied(t, []string{other.put(t, "notes", "z", `{"n":2}`)})

	again := openDevice(t, restored, restored.proxy(t), dir, "phone-1", deviceOptions{})
	sub := again.Changes()
	defer sub.Close()
	again.waitStatus(t, "resynced to the restored server's head", func(st client.Status) bool {
		return st.Connected && st.Cursor == 1
	})
	again.requireMatchesServer(t, restored, "notes")
	_, found, err := again.Get(t.Context(), "notes", "a")
	require.NoError(t, err)
	require.False(t, found, "records of the other history are gone")
	timeout := time.After(10 * time.Second)
	for sawResync := false; !sawResync; {
		select {
		case ev := <-sub.C:
			sawResync = ev.Resync
		case <-timeout:
			t.Fatal("no Resync change event")
		}
	}
}
