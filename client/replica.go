package client

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/internal/crashpoint"
	"github.com/syncd-dev/syncd/internal/dirsync"
	"github.com/syncd-dev/syncd/internal/sqlitedb"
)

// replicaSchema is the local replica: the server's records as the change
// feed delivered them, the pending overlay of writes not yet decided, the
// durable outcome of every decided write, and the feed cursor.
const replicaSchema = `
CREATE TABLE IF NOT EXISTS records (
	model   TEXT NOT NULL,
	key     TEXT NOT NULL,
	value   BLOB,
	version INTEGER NOT NULL,
	hlc     TEXT NOT NULL,
	wall    INTEGER NOT NULL,
	deleted INTEGER NOT NULL,
	PRIMARY KEY (model, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pending (
	queue_id     INTEGER PRIMARY KEY,
	op_id        TEXT NOT NULL UNIQUE,
	model        TEXT NOT NULL,
	key          TEXT NOT NULL,
	op           TEXT NOT NULL,
	value        BLOB,
	base_version INTEGER,
	wall         INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS pending_by_key ON pending (model, key, queue_id);
CREATE TABLE IF NOT EXISTS outcomes (
	op_id      TEXT PRIMARY KEY,
	model      TEXT NOT NULL,
	key        TEXT NOT NULL,
	status     TEXT NOT NULL,
	version    INTEGER NOT NULL,
	seq        INTEGER NOT NULL,
	reason     TEXT NOT NULL,
	winner     BLOB,
	rebased_as TEXT NOT NULL,
	decided_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS outcomes_by_time ON outcomes (decided_at);
CREATE TABLE IF NOT EXISTS meta (
	name  TEXT PRIMARY KEY,
	value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta_text (
	name  TEXT PRIMARY KEY,
	value TEXT NOT NULL
) WITHOUT ROWID;
`

// meta names.
const (
	metaCursor    = "cursor"     // oplog seq the records reflect
	metaPendingHW = "pending_hw" // a queue id up to which every queued write is in pending (or decided)
	metaLastSync  = "last_sync"  // unix ms of the last completed replay
)

// replica is the client's local SQLite state. It is safe for concurrent use.
//
// Where it lives. With a queue that can share its SQLite file
// (offlinequeue.SQLite), the replica's tables live in the queue's database
// and every write to them goes through the queue's one committer: an
// offline Put is one commit (the queue's item and its overlay row,
// EnqueueWith), a decided batch is one commit (its outcomes and the removal
// of its items, MarkDoneWith), so is a dead-lettered write (its outcome and
// its dead letter, MoveToDeadLettersWith), and no two writers ever meet inside SQLite,
// where a waiter sleeps in the busy handler. Its durability is the queue's
// Synchronous level. With any other queue the replica has its own file at
// Config.ReplicaPath, at Config.ReplicaSynchronous, and its writers take
// turns on a mutex for the same reason.
//
// Reads run on the database's pool beside the writer (WAL).
type replica struct {
	db     *sql.DB     // reads; writes too when the replica has its own file
	shared sharedQueue // the queue whose file holds the replica, or nil
	queue  offlinequeue.Queue
	now    func() time.Time

	writeMu sync.Mutex // own file: one writer at a time
	stmts   stmtCache
	// handoffs gets the outcomes decideDone commits, for Await; echoes
	// the versions it folds into the records, for applyChanges.
	handoffs handoffs
	echoes   echoes
	// fields are the last welcome's scope declarations, by which records
	// of covered models get their scope value (replica_scopes.go).
	fields atomic.Pointer[scopeFields]

	// Meta values written lazily (see setLastSync, applyChanges): the
	// newest value, and when or whether it was committed.
	heldMu          sync.Mutex
	lastSyncSeen    time.Time // the newest time setLastSync was given
	lastSyncWritten time.Time // the newest it committed
	cursorHeld      uint64    // a feed cursor not yet committed; 0: none
	cursorWritten   time.Time // when applyChanges last committed a cursor
}

// sharedQueue is a queue whose SQLite database can hold the replica's
// tables and make their writes part of its own transactions.
type sharedQueue interface {
	offlinequeue.Queue
	EnqueueWith(ctx context.Context, payload []byte, key string, with func(ctx context.Context, tx *sql.Tx, id offlinequeue.ID) error) (offlinequeue.ID, error)
	EnqueueCommitting(ctx context.Context, payload []byte, key string, with func(ctx context.Context, tx *sql.Tx, id offlinequeue.ID) error, committing func(offlinequeue.ID)) (offlinequeue.ID, error)
	MarkDoneWith(ctx context.Context, with offlinequeue.Hook, ids ...offlinequeue.ID) error
	MarkDoneUnsynced(ctx context.Context, with offlinequeue.Hook, ids ...offlinequeue.ID) error
	MoveToDeadLettersWith(ctx context.Context, id offlinequeue.ID, reason string, with offlinequeue.Hook) error
	Update(ctx context.Context, fn offlinequeue.Hook) error
	DB() *sql.DB
}

var _ sharedQueue = (*offlinequeue.SQLite)(nil)

// replicaSharesQueue reports whether a replica over q lives in q's file.
func replicaSharesQueue(q offlinequeue.Queue) bool {
	_, ok := q.(sharedQueue)
	return ok
}

// openReplica opens the replica over q: in q's database when q can share
// it, else in its own file at path with the synchronous level sync.
func openReplica(ctx context.Context, q offlinequeue.Queue, path string, sync offlinequeue.Synchronous, now func() time.Time) (*replica, error) {
	if sq, ok := q.(sharedQueue); ok {
		r := &replica{db: sq.DB(), shared: sq, queue: q, now: now, stmts: stmtCache{db: sq.DB()}}
		if err := migrateShared(ctx, sq); err != nil {
			return nil, fmt.Errorf("replica schema: %w", newerReplica(err))
		}
		crashpoint.Reach("replica schema in the queue's file committed")
		if path != "" {
			if err := r.importFile(ctx, path); err != nil {
				return nil, fmt.Errorf("import the replica file %s: %w", path, newerReplica(err))
			}
		}
		return r, nil
	}
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{Synchronous: sync})
	if err != nil {
		return nil, err
	}
	if _, err := sqlitedb.Migrate(ctx, db, replicaMigrations); err != nil {
		db.Close()
		return nil, fmt.Errorf("replica schema: %w", newerReplica(err))
	}
	return &replica{db: db, queue: q, now: now, stmts: stmtCache{db: db}}, nil
}

// metaImported marks a replica in the queue's file that took over a
// replica file of its own (importFile).
const metaImported = "imported"

// replicaTables are the tables importFile copies.
var replicaTables = []string{"records", "pending", "outcomes", "meta", "meta_text"}

// importFile moves a replica file an earlier version kept at path (beside
// a SQLite queue) into the queue's file: every table's rows in one commit
// with the mark metaImported; once a checkpoint synced that commit, the
// old file's -wal, -shm and -journal and last the file itself are removed
// and the directory synced. A crash before the commit imports again on
// the next open; one after it only removes what is left
// (TestKillDuringDeviceMigration kills it at each step). A replica that
// was already imported, or a path with no file, is left alone.
func (r *replica) importFile(ctx context.Context, path string) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	imported, err := r.meta(ctx, r.db, metaImported)
	if err != nil {
		return err
	}
	if imported == 0 {
		old, err := sqlitedb.Open(ctx, path, sqlitedb.Options{Inspect: refuseNonReplica})
		if err != nil {
			return err
		}
		defer old.Close()
		tables, err := tablesOf(ctx, old)
		if err != nil {
			return err
		}
		if err := r.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
			for _, table := range replicaTables {
				if !tables[table] {
					continue // an older replica without it
				}
				if err := copyTable(ctx, old, tx, table); err != nil {
					return fmt.Errorf("copy %s: %w", table, err)
				}
				crashpoint.Reach("replica import: copied " + table + ", not committed")
			}
			return setMeta(ctx, tx, metaImported, 1)
		}); err != nil {
			return err
		}
		crashpoint.Reach("replica import committed")
		if err := old.Close(); err != nil {
			return err
		}
	}
	// At a synchronous level below FULL a commit is durable only once its
	// log is synced: the old file goes only after a checkpoint synced the
	// import, else the next open removes it.
	var busy, logPages, copied int64
	if err := r.db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(FULL)`).Scan(&busy, &logPages, &copied); err != nil {
		return fmt.Errorf("checkpoint the import: %w", err)
	}
	if busy != 0 {
		return nil
	}
	crashpoint.Reach("replica import checkpointed")
	// The file itself goes last: one whose path is gone has nothing
	// beside it left either.
	for _, f := range []string{path + "-wal", path + "-shm", path + "-journal", path} {
		err := os.Remove(f)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err == nil {
			crashpoint.Reach("replica import: removed " + filepath.Base(f))
		}
	}
	if err := dirsync.Sync(filepath.Dir(path)); err != nil {
		return err
	}
	crashpoint.Reach("replica import: directory synced")
	return nil
}

// refuseNonReplica is importFile's sqlitedb Options.Inspect: a database
// with tables but no replica records table, or a replica of a newer schema
// than this build's (*sqlitedb.NewerSchemaError), is not touched (not even
// switched to WAL), and not removed. An empty one (a replica whose first
// open was cut short) has nothing to import.
func refuseNonReplica(c *sqlite3.SQLiteConn) error {
	n, err := sqlitedb.QueryValue(c, `SELECT count(*) FROM sqlite_schema`)
	if err != nil {
		return err
	}
	if n == int64(0) {
		return nil
	}
	n, err = sqlitedb.QueryValue(c, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'records'`)
	if err != nil {
		return err
	}
	if n != int64(1) {
		return errors.New("not a syncd replica (no records table)")
	}
	v, err := sqlitedb.QueryValue(c, `PRAGMA user_version`)
	if err != nil {
		return err
	}
	if v, ok := v.(int64); ok && v > int64(len(replicaMigrations)) {
		return &sqlitedb.NewerSchemaError{File: int(v), Known: len(replicaMigrations)}
	}
	return nil
}

// tablesOf returns the names of db's tables.
func tablesOf(ctx context.Context, db *sql.DB) (map[string]bool, error) {
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_schema WHERE type = 'table'`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	tables := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		tables[name] = true
	}
	return tables, rows.Err()
}

// copyTable copies every row of table from src into tx's database, which
// holds the same table (replicaSchema), replacing rows with the same key.
func copyTable(ctx context.Context, src *sql.DB, tx *sql.Tx, table string) error {
	rows, err := src.QueryContext(ctx, `SELECT * FROM `+table)
	if err != nil {
		return err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	insert, err := tx.PrepareContext(ctx, `INSERT OR REPLACE INTO `+table+` (`+strings.Join(cols, ", ")+`) VALUES (?`+strings.Repeat(", ?", len(cols)-1)+`)`)
	if err != nil {
		return err
	}
	defer insert.Close()
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		if _, err := insert.ExecContext(ctx, vals...); err != nil {
			return err
		}
	}
	return rows.Err()
}

// close commits the meta values held back (flushHeld), then closes the
// replica's own file; a replica in the queue's file is closed with the
// queue (after this).
func (r *replica) close() error {
	err := errors.Join(r.flushHeld(), r.stmts.close())
	if r.shared != nil {
		return err
	}
	return errors.Join(err, r.db.Close())
}

// write runs fn in one transaction and commits it: the queue's committer's
// (Update) when the replica lives in the queue's file, else one of its own.
// fn must not keep tx.
func (r *replica) write(ctx context.Context, fn offlinequeue.Hook) error {
	if r.shared != nil {
		return r.shared.Update(ctx, fn)
	}
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(ctx, tx); err != nil {
		return err
	}
	return tx.Commit()
}

func (r *replica) meta(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, name string) (uint64, error) {
	var v int64
	err := q.QueryRowContext(ctx, `SELECT value FROM meta WHERE name = ?`, name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return uint64(v), err
}

func setMeta(ctx context.Context, tx *sql.Tx, name string, v uint64) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO meta (name, value) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`, name, int64(v))
	return err
}

// cursor is the oplog seq the records reflect: the newest the feed
// brought, committed or held (see applyChanges).
func (r *replica) cursor(ctx context.Context) (uint64, error) {
	r.heldMu.Lock()
	held := r.cursorHeld
	r.heldMu.Unlock()
	if held > 0 {
		return held, nil
	}
	return r.meta(ctx, r.db, metaCursor)
}

// heldMetaEvery bounds how often the replica commits a meta value it may
// hold in memory (the feed cursor of pages that changed nothing, the time
// of the last complete replay): a client that awaits each write would
// otherwise pay a commit per write for each.
const heldMetaEvery = time.Second

// setLastSync records t as the end of the last complete replay. It
// commits at most once per heldMetaEvery (a client that awaits each write
// completes a replay per write); in between it only holds t, which
// lastSync reports, so the figure is exact while the client runs and at
// most heldMetaEvery stale after a crash (close commits it).
func (r *replica) setLastSync(ctx context.Context, t time.Time) error {
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	r.lastSyncSeen = t
	if !r.lastSyncWritten.IsZero() && t.Sub(r.lastSyncWritten) < heldMetaEvery && t.After(r.lastSyncWritten) {
		return nil
	}
	if err := r.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return setMeta(ctx, tx, metaLastSync, uint64(t.UnixMilli()))
	}); err != nil {
		return err
	}
	r.lastSyncWritten = t
	return nil
}

// flushHeld commits the meta values the replica holds uncommitted.
func (r *replica) flushHeld() error {
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	t, cursor := r.lastSyncSeen, r.cursorHeld
	syncHeld := !t.Equal(r.lastSyncWritten)
	if !syncHeld && cursor == 0 {
		return nil
	}
	err := r.write(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
		if syncHeld {
			if err := setMeta(ctx, tx, metaLastSync, uint64(t.UnixMilli())); err != nil {
				return err
			}
		}
		if cursor > 0 {
			return setMeta(ctx, tx, metaCursor, cursor)
		}
		return nil
	})
	if err == nil {
		r.lastSyncWritten, r.cursorHeld = t, 0
	}
	return err
}

// lastSync is the end of the last complete replay, as set in this process
// or, before the first, as recorded by an earlier one.
func (r *replica) lastSync(ctx context.Context) (time.Time, error) {
	r.heldMu.Lock()
	seen := r.lastSyncSeen
	r.heldMu.Unlock()
	if !seen.IsZero() {
		return seen, nil
	}
	ms, err := r.meta(ctx, r.db, metaLastSync)
	if err != nil || ms == 0 {
		return time.Time{}, err
	}
	return time.UnixMilli(int64(ms)), nil
}

// newestWall is the newest wall time (unix ms) of any timestamp the
// replica holds, this device's pending writes included, so a restarted
// clock never issues a timestamp older than one it issued before.
func (r *replica) newestWall(ctx context.Context) (int64, error) {
	var wall int64
	err := r.db.QueryRowContext(ctx, `SELECT max(coalesce((SELECT max(wall) FROM records), 0),
		coalesce((SELECT max(wall) FROM pending), 0))`).Scan(&wall)
	return wall, err
}

// Names of the replica's text settings (meta_text).
const (
	// metaDatabaseID names the id of the database (welcome.database_id,
	// PROTOCOL.md 5.2) the replica's records and cursor came from.
	metaDatabaseID = "database_id"
	// metaServers names the server URLs learnt from welcome.servers, as a
	// JSON array.
	metaServers = "servers"
)

// text returns the text setting name; "" when it was never set.
func (r *replica) text(ctx context.Context, name string) (string, error) {
	var v string
	err := r.db.QueryRowContext(ctx, `SELECT value FROM meta_text WHERE name = ?`, name).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return v, err
}

func (r *replica) setText(ctx context.Context, name, value string) error {
	return r.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO meta_text (name, value) VALUES (?, ?)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`, name, value)
		return err
	})
}

// databaseID returns the id of the database the replica was synced from;
// "" before the first sync, or for a replica made before it was recorded.
func (r *replica) databaseID(ctx context.Context) (string, error) {
	return r.text(ctx, metaDatabaseID)
}

func (r *replica) setDatabaseID(ctx context.Context, id string) error {
	return r.setText(ctx, metaDatabaseID, id)
}
