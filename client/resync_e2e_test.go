package client_test

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncproto"
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

// Config.SnapshotTimeout bounds a snapshot download: a body that stops
// arriving (the server or the path to it went silent mid-download, with
// the link still up) is abandoned when the bound runs out, and the next
// attempt loads the snapshot. Without the bound the first download would
// hold the device for good.
func TestStalledSnapshotIsAbandonedAtItsTimeout(t *testing.T) {
	s := startSyncd(t, server.Config{
		Retention:         server.Retention{Oplog: replication.Retention{MaxEntries: 1, MaxAge: -1}},
		RetentionInterval: 20 * time.Millisecond,
	})
	writer := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-w", deviceOptions{})
	var ops []string
	for _, k := range []string{"a", "b", "c"} {
		ops = append(ops, writer.put(t, "notes", k, `{"n":1}`))
	}
	writer.requireApplied(t, ops)
	require.Eventually(t, func() bool {
		var st struct {
			OplogOldest uint64 `json:"oplog_oldest"`
		}
		s.Admin(t, "/v1/admin/status", &st)
		return st.OplogOldest > 1
	}, waitFor, pollTick, "the oplog was never compacted: a new device would not need a snapshot")

	stall := &stallFirstSnapshot{base: http.DefaultTransport.(*http.Transport).Clone(), cut: make(chan struct{})}
	d := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-new", deviceOptions{tweak: func(c *client.Config) {
		c.HTTPClient = &http.Client{Transport: stall}
		c.SnapshotTimeout = 300 * time.Millisecond
	}})
	select {
	case <-stall.cut:
	case <-time.After(waitFor):
		t.Fatal("the stalled snapshot download was never abandoned")
	}
	require.Eventually(t, func() bool { return d.convergesWithServer(t, s, "notes") }, waitFor, pollTick)
	d.requireMatchesServer(t, s, "notes")
}

// stallFirstSnapshot is an http.RoundTripper that passes every request to
// base, except that the body of the first snapshot never delivers a byte:
// its reads block until the request's context ends, then close cut.
type stallFirstSnapshot struct {
	base    http.RoundTripper
	cut     chan struct{}
	stalled atomic.Bool
}

func (s *stallFirstSnapshot) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.base.RoundTrip(req)
	if err != nil || req.URL.Path != syncproto.SnapshotPath || !s.stalled.CompareAndSwap(false, true) {
		return resp, err
	}
	resp.Body = &stalledBody{ReadCloser: resp.Body, ctx: req.Context(), cut: s.cut}
	return resp, nil
}

type stalledBody struct {
	io.ReadCloser
	ctx  context.Context
	cut  chan struct{}
	once sync.Once
}

func (b *stalledBody) Read([]byte) (int, error) {
	<-b.ctx.Done()
	b.once.Do(func() { close(b.cut) })
	return 0, b.ctx.Err()
}
