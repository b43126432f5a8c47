package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/soak/faultproxy"
)

func TestPutAwaitAndFeed(t *testing.T) {
	s := startSyncd(t, server.Config{})
	a := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-a", deviceOptions{})
	b := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-b", deviceOptions{})

	op := a.put(t, "notes", "n1", `{"text":"hello"}`)
	rec, found, err := a.Get(t.Context(), "notes", "n1")
	require.NoError(t, err)
	require.True(t, found, "read your own write at once")
	require.True(t, rec.Pending)

	o := a.await(t, op)
	require.Equal(t, client.StatusApplied, o.Status)
	require.Equal(t, uint64(1), o.Version)

	require.Eventually(t, func() bool {
		rec, found, err := b.Get(t.Context(), "notes", "n1")
		return err == nil && found && !rec.Pending && string(rec.Value) == `{"text":"hello"}`
	}, waitFor, pollTick, "b sees a's write through the feed")
}

// Status says what the device knows: offline with writes pending, then
// connected, drained, synced to the server's head.
func TestStatus(t *testing.T) {
	s := startSyncd(t, server.Config{})
	p := s.proxy(t)
	p.SetMode(faultproxy.Refuse) // offline from the start: never synced
	d := openDevice(t, s, p, t.TempDir(), "phone-1", deviceOptions{})
	d.waitOffline(t)
	ops := []string{d.put(t, "notes", "a", `{"n":1}`), d.put(t, "notes", "b", `{"n":2}`)}
	st := d.status(t)
	require.Equal(t, client.Status{Pending: 2, State: client.StateOffline}, st, "offline, two writes pending, never synced")

	d.online()
	d.requireApplied(t, ops)
	var head struct {
		OplogHead uint64 `json:"oplog_head"`
	}
	s.Admin(t, "/v1/admin/status", &head)
	require.Equal(t, uint64(2), head.OplogHead)
	d.waitStatus(t, "synced to the head", func(st client.Status) bool {
		return st.Online && st.Connected && st.Pending == 0 && st.DeadLetters == 0 && st.Cursor == head.OplogHead && !st.LastSync.IsZero() && st.State == client.StateIdle
	})

	d.offline()
	d.waitOffline(t)
	st = d.status(t)
	require.False(t, st.LastSync.IsZero(), "the last sync is remembered offline")
	require.Equal(t, head.OplogHead, st.Cursor)
}

// A Changes subscription receives this device's writes as they are made
// and the server's (another device's) as the feed applies them.
func TestChangesLocalAndRemote(t *testing.T) {
	s := startSyncd(t, server.Config{})
	a := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-a", deviceOptions{})
	b := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-b", deviceOptions{})
	a.waitSynced(t)
	sub := a.Changes()
	defer sub.Close()

	next := func(what string, match func(client.ChangeEvent) bool) client.ChangeEvent {
		t.Helper()
		timeout := time.NewTimer(waitFor)
		defer timeout.Stop()
		for {
			select {
			case ev, ok := <-sub.C:
				require.True(t, ok, "subscription closed")
				require.False(t, ev.Lagged, "subscriber lagged")
				if match(ev) {
					return ev
				}
			case <-timeout.C:
				require.FailNow(t, "no change event", what)
			}
		}
	}
	a.put(t, "notes", "mine", `{"n":1}`)
	ev := next("local put", func(ev client.ChangeEvent) bool { return ev.Key == "mine" })
	require.Equal(t, client.ChangeEvent{Model: "notes", Key: "mine", Value: json.RawMessage(`{"n":1}`), Local: true}, ev, "a change carries its value")

	// A remote change says the seq the server read it at: its own.
	put := b.put(t, "notes", "theirs", `{"n":2}`)
	ev = next("remote put", func(ev client.ChangeEvent) bool { return ev.Key == "theirs" })
	require.Equal(t, client.ChangeEvent{Model: "notes", Key: "theirs", Version: 1, Value: json.RawMessage(`{"n":2}`), At: b.await(t, put).Seq}, ev)

	del, err := b.Delete(t.Context(), "notes", "theirs")
	require.NoError(t, err)
	ev = next("remote delete", func(ev client.ChangeEvent) bool { return ev.Key == "theirs" && ev.Deleted })
	require.Equal(t, client.ChangeEvent{Model: "notes", Key: "theirs", Version: 2, Deleted: true, At: b.await(t, del).Seq}, ev)

	sub.Close()
	_, open := <-sub.C
	require.False(t, open, "Close ends the subscription")
}

// List reads key ranges of the replica with the device's pending writes
// laid over the server's records, offline; after sync it lists the
// server's state.
func TestListWithPendingOverlay(t *testing.T) {
	s := startSyncd(t, server.Config{})
	a := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-a", deviceOptions{})
	b := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-b", deviceOptions{})
	var ops []string
	for _, k := range []string{"a/1", "a/2", "a_x", "abc", "b/1", "c/1"} {
		ops = append(ops, b.put(t, "notes", k, fmt.Sprintf(`{"k":%q}`, k)))
	}
	b.requireApplied(t, ops)
	require.Eventually(t, func() bool { return a.convergesWithServer(t, s, "notes") }, waitFor, pollTick)

	a.offline()
	a.put(t, "notes", "a/1", `{"k":"a/1 edited"}`) // overwrite of a server record
	a.put(t, "notes", "a/3", `{"k":"a/3"}`)        // new key
	_, err := a.Delete(t.Context(), "notes", "a/2")
	require.NoError(t, err)
	a.put(t, "notes", "b/2", `{"k":"b/2"}`)
	a.put(t, "other", "a/9", `{"k":"other model"}`)

	type row struct {
		Key     string
		Value   string
		Version uint64
		Pending bool
	}
	list := func(o client.ListOptions) []row {
		t.Helper()
		recs, err := a.List(t.Context(), "notes", o)
		require.NoError(t, err)
		rows := []row{}
		for _, r := range recs {
			var v struct{ K string }
			require.NoError(t, json.Unmarshal(r.Value, &v))
			rows = append(rows, row{r.Key, v.K, r.Version, r.Pending})
		}
		return rows
	}
	require.Equal(t, []row{
		{"a/1", "a/1 edited", 1, true},
		{"a/3", "a/3", 0, true},
	}, list(client.ListOptions{Prefix: "a/"}), "prefix: the pending delete hides a/2")
	require.Equal(t, []row{{"a_x", "a_x", 1, false}}, list(client.ListOptions{Prefix: "a_"}),
		"a prefix is literal, not a pattern")
	require.Equal(t, []row{
		{"a/3", "a/3", 0, true},
		{"a_x", "a_x", 1, false},
		{"abc", "abc", 1, false},
		{"b/1", "b/1", 1, false},
	}, list(client.ListOptions{Start: "a/2", End: "b/2"}), "range: start inclusive, end exclusive")
	require.Equal(t, []row{
		{"a/1", "a/1 edited", 1, true},
		{"a/3", "a/3", 0, true},
		{"a_x", "a_x", 1, false},
	}, list(client.ListOptions{Limit: 3}))
	require.Equal(t, []row{
		{"b/1", "b/1", 1, false},
		{"b/2", "b/2", 0, true},
	}, list(client.ListOptions{Prefix: "b", End: "c"}))
	_, found, err := a.Get(t.Context(), "notes", "a/2")
	require.NoError(t, err)
	require.False(t, found)

	a.online()
	a.waitSynced(t)
	require.Eventually(t, func() bool { return a.convergesWithServer(t, s, "notes") }, waitFor, pollTick)
	require.Equal(t, []row{
		{"a/1", "a/1 edited", 2, false},
		{"a/3", "a/3", 1, false},
	}, list(client.ListOptions{Prefix: "a/"}))
}

// Outcomes are kept on the device: after a restart, Await answers from
// disk with no network, and an op id the device never wrote is unknown.
func TestAwaitAfterRestart(t *testing.T) {
	s := startSyncd(t, server.Config{})
	p := s.proxy(t)
	dir := t.TempDir()
	d := openDevice(t, s, p, dir, "phone-1", deviceOptions{fileQueue: true})
	d.offline()
	op := d.put(t, "notes", "a", `{"n":1}`)
	require.NoError(t, d.Close())

	// Written offline, decided after a restart.
	d.online()
	d = openDevice(t, s, p, dir, "phone-1", deviceOptions{fileQueue: true})
	first := d.await(t, op)
	require.Equal(t, client.StatusApplied, first.Status)
	require.NoError(t, d.Close())

	d.offline()
	d = openDevice(t, s, p, dir, "phone-1", deviceOptions{fileQueue: true})
	again := d.await(t, op)
	require.Equal(t, first.Status, again.Status)
	require.Equal(t, first.Version, again.Version)
	require.Equal(t, first.Seq, again.Seq)
	looked, found, err := d.Lookup(t.Context(), op)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, first.Seq, looked.Seq)
	_, err = d.Await(t.Context(), "01938a5e-7b2c-7cde-8f01-23456789abcd")
	require.True(t, errors.Is(err, client.ErrUnknownOp), "got %v", err)
}

// A device that was offline while the server compacted its oplog past the
// device's cursor is told to resync when it comes back: it loads a
// snapshot, keeps its pending write, and converges to the server's state,
// deletes included.
func TestResyncAfterOplogCompaction(t *testing.T) {
	s := startSyncd(t, server.Config{
		Retention:         server.Retention{Oplog: replication.Retention{MaxEntries: 3, MaxAge: -1}},
		RetentionInterval: 20 * time.Millisecond,
	})
	a := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-a", deviceOptions{})
	b := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-b", deviceOptions{})
	gone := a.put(t, "notes", "gone", `{"n":0}`)
	a.requireApplied(t, []string{gone})
	b.waitStatus(t, "following the feed", func(st client.Status) bool { return st.Cursor >= 1 })

	b.offline()
	b.waitOffline(t)
	cursor := b.status(t).Cursor
	var ops []string
	for i := range 10 {
		ops = append(ops, a.put(t, "notes", fmt.Sprintf("k%d", i), fmt.Sprintf(`{"n":%d}`, i)))
	}
	del, err := a.Delete(t.Context(), "notes", "gone")
	require.NoError(t, err)
	a.requireApplied(t, append(ops, del))
	require.Eventually(t, func() bool {
		var st struct {
			OplogOldest uint64 `json:"oplog_oldest"`
		}
		s.Admin(t, "/v1/admin/status", &st)
		return st.OplogOldest > cursor+1
	}, waitFor, pollTick, "the oplog was never compacted past the offline device's cursor")
	mine := b.put(t, "notes", "mine", `{"n":"b"}`)

	resyncs := metric(t, b.registry, "syncd_client_resyncs_total") // b may have bootstrapped from a snapshot
	sub := b.Changes()
	defer sub.Close()
	b.online()
	b.requireApplied(t, []string{mine})
	require.Eventually(t, func() bool { return b.convergesWithServer(t, s, "notes") }, waitFor, pollTick)
	b.requireMatchesServer(t, s, "notes")
	_, found, err := b.Get(t.Context(), "notes", "gone")
	require.NoError(t, err)
	require.False(t, found, "a record deleted while the device was away is gone after the resync")
	require.Equal(t, resyncs+1, metric(t, b.registry, "syncd_client_resyncs_total"))
	resynced := false
	for len(sub.C) > 0 {
		ev := <-sub.C
		resynced = resynced || ev.Resync
	}
	require.True(t, resynced, "subscribers are told to re-read everything")
}
