package offlinequeue

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
)

// TestSQLiteCheckpointsBesideTheCommitter: no connection checkpoints on
// commit (wal_autocheckpoint is 0 on each), yet the log does not keep
// growing: the checkpointer copies it back, and the log is reused from its
// start. Without the checkpointer the log would hold every page written.
func TestSQLiteCheckpointsBesideTheCommitter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.db")
	q := openTestSQLite(t, path, SQLiteOptions{Synchronous: SyncNormal}, sqliteHooks{})
	ctx := t.Context()

	conns := make([]interface{ Close() error }, 0, 3)
	for range 3 { // several pool connections, not only the first
		c, err := q.db.Conn(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
		var pages int
		require.NoError(t, c.QueryRowContext(ctx, `PRAGMA wal_autocheckpoint`).Scan(&pages))
		require.Zero(t, pages, "a commit never checkpoints")
	}
	for _, c := range conns {
		require.NoError(t, c.Close())
	}

	const writes = 160 * sqlitedb.DefaultCheckpointEvery
	enqueueStream(t, q, writes, 2000) // about a page per item
	wal, err := os.Stat(path + "-wal")
	require.NoError(t, err)
	// Each write adds three pages or more to the log (the item's, its
	// key's, the id sequence's): unchecked, the log would exceed 3*writes
	// pages (240 MiB). Checked, it peaks near sqlitedb.DefaultMaxLogPages (16 MiB) plus
	// what the committer wrote while the checkpointer ran late: 20 to
	// 50 MiB on a loaded 2-core machine. Fewer bytes than one page per
	// write says the log was reused.
	t.Logf("log peaked at %d bytes", wal.Size())
	require.Less(t, wal.Size(), int64(writes*4096), "the log was checkpointed and reused")
}

// TestSQLiteLogStartsOverNearMaxLogPages: under a stream of enqueues (the
// background checkpoints never leave the log all copied) the log starts
// over once it passed maxLogPages, so its file stops growing near there
// and later commits overwrite frames instead of extending it. With
// sqlitedb's default bound (4,000 pages) the same stream grows it past
// 4,000 pages.
func TestSQLiteLogStartsOverNearMaxLogPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.db")
	q := openTestSQLite(t, path, SQLiteOptions{Synchronous: SyncNormal}, sqliteHooks{})
	const writes = 2000
	enqueueStream(t, q, writes, 200) // the size of a short queued write
	wal, err := os.Stat(path + "-wal")
	require.NoError(t, err)
	pages := wal.Size() / (4096 + 24) // a frame is a page and its header
	t.Logf("log file: %d frames after %d enqueues", pages, writes)
	// Each write adds 3 or more frames; the log starts over after the
	// checkpoint round that found it past maxLogPages, so it holds at most
	// maxLogPages and what the rounds until then added.
	require.Less(t, pages, int64(3*maxLogPages), "the log started over near maxLogPages")
}

// enqueueStream enqueues n items of size bytes with distinct keys, one
// after the other.
func enqueueStream(t *testing.T, q *SQLite, n, size int) {
	t.Helper()
	payload := make([]byte, size)
	for i := range n {
		payload[0] = byte(i)
		_, err := q.Enqueue(t.Context(), payload, fmt.Sprintf("key-%d", i))
		require.NoError(t, err)
	}
}
