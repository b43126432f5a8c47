package offlinequeue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// A SQLite queue's write without a sync (see unsynced.go) commits at
// synchronous=NORMAL on a connection of its own: its frames are in the
// write-ahead log, which the next commit at FULL syncs whole.

// unsyncedWriter owns the connection that commits without a sync and the
// syncLater that bounds how long such a commit stays unsynced.
type unsyncedWriter struct {
	q    *SQLite
	conn *sql.Conn // synchronous=NORMAL

	// pending says a commit on conn may not be synced yet; err is the
	// failure of the last sync, for Close. Both are owned by the holder of
	// q.writer.
	pending bool
	err     error

	later *syncLater
}

// startUnsynced pins a connection of q's pool at synchronous=NORMAL and
// starts the syncLater of what it commits.
func startUnsynced(q *SQLite) (*unsyncedWriter, error) {
	ctx := context.Background()
	conn, err := q.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("unsynced writer: %w", err)
	}
	var level int
	if _, err = conn.ExecContext(ctx, `PRAGMA synchronous = NORMAL`); err == nil {
		err = conn.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&level)
	}
	if err == nil && level != 1 {
		err = fmt.Errorf("synchronous reads back %d, not NORMAL (1)", level)
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("unsynced writer: %w", err)
	}
	u := &unsyncedWriter{q: q, conn: conn}
	u.later = startSyncLater(q.opts.UnsyncedWindow, u.syncPending)
	return u, nil
}

// MarkDoneUnsynced is MarkDoneWith without waiting for the disk (see
// unsynced.go): when it returns, the items are gone and with's rows are
// committed for every reader and survive a process crash; they survive a
// power cut once the log is synced, at the latest Options.UnsyncedWindow
// later. A power cut before that can roll the call back whole, never in
// part, and never a write committed before it. At SyncNormal it is
// MarkDoneWith.
func (s *SQLite) MarkDoneUnsynced(ctx context.Context, with Hook, ids ...ID) error {
	return s.submit(ctx, &writeRequest{op: "mark done in", unsynced: true, done: make(chan struct{}),
		apply: func(ctx context.Context, tx *sql.Tx) (counts, error) {
			if err := with(ctx, tx); err != nil {
				return counts{}, err
			}
			return s.markDone(ctx, tx, ids)
		}})
}

// committed records a commit on u.conn (the caller holds q.writer).
func (u *unsyncedWriter) committed() {
	u.pending = true
	u.later.wake()
}

// synced records a commit that synced the log (the caller holds q.writer):
// every commit before it is durable. Nil-safe (no writer at SyncNormal).
func (u *unsyncedWriter) synced() {
	if u != nil {
		u.pending = false
	}
}

// syncPending syncs the log if a commit on u.conn may not be: it fsyncs
// the write-ahead log file (a sync of the file covers every frame written
// to it, from any connection). A failed sync poisons the queue: what was
// written may be lost, so no later write may claim durability.
func (u *unsyncedWriter) syncPending() {
	q := u.q
	q.writer.Lock()
	defer q.writer.Unlock()
	if !u.pending {
		return
	}
	if err := syncFile(q.path + "-wal"); err != nil {
		u.err = fmt.Errorf("sync the write-ahead log: %w", err)
		q.poisoned = fmt.Errorf("offlinequeue: %s: %w (a sync of unsynced commits failed: %v)", q.path, ErrPoisoned, err)
		return
	}
	u.pending = false
	q.rec.deferredSynced()
	if q.hooks.deferredSync != nil {
		q.hooks.deferredSync()
	}
}

// syncFile fsyncs the file at path; a file that does not exist has
// nothing to sync (SQLite removes the log only after copying it into the
// database and syncing that).
func syncFile(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// close stops the syncLater, syncs what is left and releases the
// connection; it returns a sync's failure, if any. Nil-safe.
func (u *unsyncedWriter) close() error {
	if u == nil {
		return nil
	}
	u.later.close()
	u.syncPending()
	return errors.Join(u.err, u.conn.Close())
}
