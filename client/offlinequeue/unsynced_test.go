package offlinequeue

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// A window no test reaches: only writes and Close sync.
const neverWindow = time.Hour

// pendingIDs pages through q's pending items.
func pendingIDs(t *testing.T, q Queue) []ID {
	t.Helper()
	items, err := q.Peek(t.Context(), 0, 100)
	require.NoError(t, err)
	ids := []ID{}
	for _, it := range items {
		ids = append(ids, it.ID)
	}
	return ids
}

// File: an unsynced mark-done costs no fsync; the next enqueue's fsync
// covers it, and Close syncs what no enqueue covered. Reopened, the items
// are done.
func TestFileMarkDoneUnsyncedSyncsOnNextWrite(t *testing.T) {
	fsys := newFaultFS()
	path := filepath.Join(t.TempDir(), "queue.ndjson")
	q, err := OpenFile(path, FileOptions{FS: fsys, Options: Options{UnsyncedWindow: neverWindow}})
	require.NoError(t, err)
	a, err := q.Enqueue(t.Context(), []byte("a"), "ka")
	require.NoError(t, err)
	b, err := q.Enqueue(t.Context(), []byte("b"), "kb")
	require.NoError(t, err)

	syncs := fsys.count(fsSync)
	require.NoError(t, q.MarkDoneUnsynced(t.Context(), a))
	require.Equal(t, syncs, fsys.count(fsSync), "marked done without a sync")
	require.Equal(t, []ID{b}, pendingIDs(t, q))
	_, err = q.Enqueue(t.Context(), []byte("a"), "ka") // the key is released
	require.NoError(t, err)
	require.Equal(t, syncs+1, fsys.count(fsSync), "the enqueue's one sync covers the mark")

	require.NoError(t, q.MarkDoneUnsynced(t.Context(), b))
	syncs = fsys.count(fsSync)
	require.NoError(t, q.Close())
	require.Equal(t, syncs+1, fsys.count(fsSync), "Close syncs the unsynced mark")

	q, err = OpenFile(path, FileOptions{})
	require.NoError(t, err)
	defer q.Close()
	require.Len(t, pendingIDs(t, q), 1)
	require.NotContains(t, pendingIDs(t, q), a)
	require.NotContains(t, pendingIDs(t, q), b)
}

// File: with no write after it, an unsynced mark-done is synced by the
// queue within the window, counted by the deferred-sync metric.
func TestFileMarkDoneUnsyncedSyncedWithinWindow(t *testing.T) {
	fsys := newFaultFS()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	q, err := OpenFile(filepath.Join(t.TempDir(), "queue.ndjson"), FileOptions{FS: fsys, Options: Options{UnsyncedWindow: 5 * time.Millisecond, Metrics: m}})
	require.NoError(t, err)
	defer q.Close()
	a, err := q.Enqueue(t.Context(), []byte("a"), "")
	require.NoError(t, err)
	syncs := fsys.count(fsSync)
	require.NoError(t, q.MarkDoneUnsynced(t.Context(), a))
	// The metric counts a sync once it returned.
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.deferred) == 1 }, 30*time.Second, time.Millisecond)
	require.Equal(t, syncs+1, fsys.count(fsSync), "one deferred sync")
}

// File: a deferred sync that fails poisons the handle (what was written
// without a sync may be lost), and Close reports it.
func TestFileDeferredSyncFailurePoisons(t *testing.T) {
	fsys := newFaultFS()
	q, err := OpenFile(filepath.Join(t.TempDir(), "queue.ndjson"), FileOptions{FS: fsys, Options: Options{UnsyncedWindow: neverWindow}})
	require.NoError(t, err)
	a, err := q.Enqueue(t.Context(), []byte("a"), "")
	require.NoError(t, err)
	require.NoError(t, q.MarkDoneUnsynced(t.Context(), a))
	fsys.arm(fsSync, fsFault{err: syscall.EIO})
	q.syncDirty() // the window's end
	_, err = q.Enqueue(t.Context(), []byte("b"), "")
	require.ErrorIs(t, err, ErrPoisoned)
	require.ErrorIs(t, q.Close(), syscall.EIO)
}

// SQLite: an unsynced mark-done followed by an enqueue needs no sync of
// its own (the enqueue's commit synced the log); one with no write after
// it is synced by the queue within the window.
func TestSQLiteMarkDoneUnsynced(t *testing.T) {
	nothing := func(context.Context, *sql.Tx) error { return nil }
	t.Run("covered by the next enqueue", func(t *testing.T) {
		deferred := 0
		q := openTestSQLite(t, filepath.Join(t.TempDir(), "queue.db"), SQLiteOptions{Options: Options{UnsyncedWindow: neverWindow}},
			sqliteHooks{deferredSync: func() { deferred++ }})
		a, err := q.Enqueue(t.Context(), []byte("a"), "ka")
		require.NoError(t, err)
		require.NoError(t, q.MarkDoneUnsynced(t.Context(), nothing, a))
		require.Empty(t, pendingIDs(t, q))
		_, err = q.Enqueue(t.Context(), []byte("a"), "ka") // the key is released
		require.NoError(t, err)
		require.NoError(t, q.Close())
		require.Zero(t, deferred, "the enqueue's commit synced the log")
	})
	t.Run("synced within the window", func(t *testing.T) {
		synced := make(chan struct{}, 1)
		q := openTestSQLite(t, filepath.Join(t.TempDir(), "queue.db"), SQLiteOptions{Options: Options{UnsyncedWindow: 5 * time.Millisecond}},
			sqliteHooks{deferredSync: func() { synced <- struct{}{} }})
		a, err := q.Enqueue(t.Context(), []byte("a"), "")
		require.NoError(t, err)
		require.NoError(t, q.MarkDoneUnsynced(t.Context(), nothing, a))
		select {
		case <-synced:
		case <-time.After(30 * time.Second):
			t.Fatal("no deferred sync")
		}
	})
	t.Run("closed: synced by Close", func(t *testing.T) {
		deferred := 0
		path := filepath.Join(t.TempDir(), "queue.db")
		q, err := openSQLite(path, SQLiteOptions{Options: Options{UnsyncedWindow: neverWindow}}, sqliteHooks{deferredSync: func() { deferred++ }})
		require.NoError(t, err)
		a, err := q.Enqueue(t.Context(), []byte("a"), "")
		require.NoError(t, err)
		require.NoError(t, q.MarkDoneUnsynced(t.Context(), nothing, a))
		require.NoError(t, q.Close())
		require.Equal(t, 1, deferred)
		q = openTestSQLite(t, path, SQLiteOptions{}, sqliteHooks{})
		require.Empty(t, pendingIDs(t, q))
	})
	t.Run("a failing hook marks nothing", func(t *testing.T) {
		q := openTestSQLite(t, filepath.Join(t.TempDir(), "queue.db"), SQLiteOptions{}, sqliteHooks{})
		a, err := q.Enqueue(t.Context(), []byte("a"), "")
		require.NoError(t, err)
		refused := errors.New("refused by the test")
		err = q.MarkDoneUnsynced(t.Context(), func(context.Context, *sql.Tx) error { return refused }, a)
		require.ErrorIs(t, err, refused)
		require.Equal(t, []ID{a}, pendingIDs(t, q))
		require.NoError(t, q.MarkDoneUnsynced(t.Context(), nothing, a), "the handle keeps working")
		require.Empty(t, pendingIDs(t, q))
	})
}

// A negative window is refused at open.
func TestNegativeUnsyncedWindowRefused(t *testing.T) {
	dir := t.TempDir()
	_, err := OpenFile(filepath.Join(dir, "queue.ndjson"), FileOptions{Options: Options{UnsyncedWindow: -time.Second}})
	require.ErrorContains(t, err, "UnsyncedWindow")
	_, err = OpenSQLite(filepath.Join(dir, "queue.db"), SQLiteOptions{Options: Options{UnsyncedWindow: -time.Second}})
	require.ErrorContains(t, err, "UnsyncedWindow")
}
