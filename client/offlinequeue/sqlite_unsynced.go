package offlinequeue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// Writes committed without their own sync. A queue at SyncFull syncs its
// write-ahead log on every commit, so a call that returned survives a
// power cut. MarkDoneUnsynced is the one exception, for a caller whose
// write can be lost to a power cut and learned again (the client's record
// of a write's outcome: the server's ledger keeps it, and the write,
// still pending after the cut, is replayed and answered from the ledger).
// Such a write commits at synchronous=NORMAL on a connection of its own:
// it is in the log, so it survives a process crash at once, and it is
// durable as soon as the log is synced, by the next synced commit of the
// file (an enqueue syncs the whole log, this write's frames with it) or,
// when none comes within SQLiteOptions.UnsyncedWindow, by the queue, which
// then syncs the log itself.
//
// Order: the log is one file written in commit order and recovered as a
// prefix of whole commits, so an unsynced write is never durable before a
// write committed ahead of it (the enqueue of the item it marks done).

// unsyncedWriter owns the connection that commits without a sync and the
// goroutine that bounds how long such a commit stays unsynced.
type unsyncedWriter struct {
	q      *SQLite
	conn   *sql.Conn // synchronous=NORMAL
	window time.Duration

	// pending says a commit on conn may not be synced yet. It is read
	// and written by the holder of q.writer only.
	pending bool
	// err is the failure of the last sync, for Close (set under q.writer).
	err error

	kick    chan struct{} // a commit on conn is pending (buffered, one)
	stop    chan struct{} // closed by close
	stopped chan struct{} // closed when run returns
}

// startUnsynced pins a connection of q's pool at synchronous=NORMAL and
// starts the goroutine that syncs what it commits within the window.
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
	u := &unsyncedWriter{
		q:       q,
		conn:    conn,
		window:  q.opts.UnsyncedWindow,
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	if u.window == 0 {
		u.window = DefaultUnsyncedWindow
	}
	go u.run()
	return u, nil
}

// MarkDoneUnsynced is MarkDoneWith committed without waiting for the disk
// (see above): when it returns, the items are gone and with's rows are
// committed for every reader and survive a process crash; they survive a
// power cut once the log is synced, at the latest UnsyncedWindow later
// (counted by syncd_client_queue_deferred_syncs_total when the queue syncs
// it itself). A power cut before that can roll the call back whole, never
// in part, and never a write committed before it. At SyncNormal it is
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

// committed records a commit on u.conn (the caller holds q.writer) and
// wakes the goroutine that bounds its stay unsynced.
func (u *unsyncedWriter) committed() {
	u.pending = true
	select {
	case u.kick <- struct{}{}:
	default: // already woken
	}
}

// synced records a commit that synced the log (the caller holds q.writer):
// every commit before it is durable. Nil-safe (no writer at SyncNormal).
func (u *unsyncedWriter) synced() {
	if u != nil {
		u.pending = false
	}
}

// run syncs the log one window after an unsynced commit woke it, unless
// a synced commit came first; at close it syncs what is left.
func (u *unsyncedWriter) run() {
	defer close(u.stopped)
	for {
		select {
		case <-u.kick:
		case <-u.stop:
			u.syncPending()
			return
		}
		t := time.NewTimer(u.window)
		select {
		case <-t.C:
			u.syncPending()
		case <-u.stop:
			t.Stop()
			u.syncPending()
			return
		}
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

// close stops the goroutine after a last sync and releases the
// connection; it returns that sync's error, if any. Nil-safe.
func (u *unsyncedWriter) close() error {
	if u == nil {
		return nil
	}
	close(u.stop)
	<-u.stopped
	return errors.Join(u.err, u.conn.Close())
}
