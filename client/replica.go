package client

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/internal/dirsync"
	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/syncproto"
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
	MarkDoneWith(ctx context.Context, with offlinequeue.Hook, ids ...offlinequeue.ID) error
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
		if err := sq.Update(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, replicaSchema)
			return err
		}); err != nil {
			return nil, fmt.Errorf("replica schema: %w", err)
		}
		if path != "" {
			if err := r.importFile(ctx, path); err != nil {
				return nil, fmt.Errorf("import the replica file %s: %w", path, err)
			}
		}
		return r, nil
	}
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{Synchronous: sync})
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, replicaSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("replica schema: %w", err)
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
// with the mark metaImported, then the old file and its -wal and -shm are
// removed. A crash before the commit imports again on the next open; one
// after it only removes the file. A replica that was already imported, or
// a path with no file, is left alone.
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
			}
			return setMeta(ctx, tx, metaImported, 1)
		}); err != nil {
			return err
		}
		if err := old.Close(); err != nil {
			return err
		}
	}
	for _, f := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return dirsync.Sync(filepath.Dir(path))
}

// refuseNonReplica is importFile's sqlitedb Options.Inspect: a database
// with tables but no replica records table is not touched (not even
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

// stmtCache holds the replica's write statements, each prepared once on
// the database (and by database/sql once per connection) instead of once
// per execution: a settled batch runs four statements per write.
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func (c *stmtCache) get(ctx context.Context, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.m[query]; ok {
		return s, nil
	}
	s, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = map[string]*sql.Stmt{}
	}
	c.m[query] = s
	return s, nil
}

func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, s := range c.m {
		errs = append(errs, s.Close())
	}
	c.m = nil
	return errors.Join(errs...)
}

// queryRow runs a cached read statement on the pool. It is for point
// reads (an index lookup, microseconds): they are not cancelled, since a
// cancellable context costs each of them a goroutine in database/sql and
// a hand-off in the driver, more than the read itself.
func (r *replica) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	ctx = context.WithoutCancel(ctx)
	s, err := r.stmts.get(ctx, query)
	if err != nil {
		// A statement that does not prepare fails the same way unprepared;
		// its error then comes from Scan.
		return r.db.QueryRowContext(ctx, query, args...)
	}
	return s.QueryRowContext(ctx, args...)
}

// txStmts runs cached statements in one transaction, binding each to it
// once.
type txStmts struct {
	ctx   context.Context
	tx    *sql.Tx
	cache *stmtCache
	bound map[string]*sql.Stmt
}

func (r *replica) inTx(ctx context.Context, tx *sql.Tx) *txStmts {
	return &txStmts{ctx: ctx, tx: tx, cache: &r.stmts, bound: map[string]*sql.Stmt{}}
}

func (x *txStmts) exec(query string, args ...any) error {
	s, ok := x.bound[query]
	if !ok {
		prepared, err := x.cache.get(x.ctx, query)
		if err != nil {
			return err
		}
		s = x.tx.StmtContext(x.ctx, prepared)
		x.bound[query] = s
	}
	_, err := s.ExecContext(x.ctx, args...)
	return err
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

// addPending copies a queued mutation into the pending overlay, so reads see
// it at once. It is idempotent by queue id.
func (r *replica) addPending(ctx context.Context, queueID offlinequeue.ID, m *syncproto.Mutation) error {
	return r.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		x := r.inTx(ctx, tx)
		if err := insertPending(x, queueID, m); err != nil {
			return err
		}
		return raisePendingHW(x, queueID)
	})
}

// pendingHWEvery is how often, in queue ids, an offline Put in the
// queue's file also raises the overlay's high-water mark (metaPendingHW).
// There the item and its overlay row commit together, so the mark is only
// where reconcile starts reading: left behind by fewer than about this
// many items, it makes reconcile re-read them (their rows exist; nothing
// is written), and spares every other Put a statement and a page.
const pendingHWEvery = 256

// enqueue makes m (payload, its JSON) durable in the queue under its op id
// and adds it to the pending overlay. In the queue's file both are one
// commit: they exist together or not at all, and fresh is the id of the
// item this call inserted (0 for a dedup hit). With a replica file of its
// own the queue commits first; then overlayErr non-nil says the write is
// queued (it replays) but the overlay missed it, and reconcile must repair
// it; fresh is 0.
func (r *replica) enqueue(ctx context.Context, payload []byte, m *syncproto.Mutation) (fresh offlinequeue.ID, overlayErr, err error) {
	if r.shared != nil {
		_, err := r.shared.EnqueueWith(ctx, payload, m.OpID, func(ctx context.Context, tx *sql.Tx, id offlinequeue.ID) error {
			x := r.inTx(ctx, tx)
			if err := insertPending(x, id, m); err != nil {
				return err
			}
			fresh = id // the hook runs for an inserted item only
			if id%pendingHWEvery != 0 {
				return nil
			}
			return raisePendingHW(x, id)
		})
		if err != nil {
			return 0, nil, err
		}
		return fresh, nil, nil
	}
	id, err := r.queue.Enqueue(ctx, payload, m.OpID)
	if err != nil {
		return 0, nil, err
	}
	return 0, r.addPending(ctx, id, m), nil
}

// Statements of insertPending and raisePendingHW.
const (
	sqlInsertPending = `INSERT INTO pending (queue_id, op_id, model, key, op, value, base_version, wall)
		SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8 WHERE NOT EXISTS (SELECT 1 FROM outcomes WHERE op_id = ?2)
		ON CONFLICT DO NOTHING`
	sqlRaisePendingHW = `INSERT INTO meta (name, value) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET value = max(value, excluded.value)`
)

func insertPending(x *txStmts, queueID offlinequeue.ID, m *syncproto.Mutation) error {
	var base any
	if m.BaseVersion != nil {
		base = int64(*m.BaseVersion)
	}
	// A write already decided is not pending: the sync worker can replay
	// and decide a queued write before its Put gets here.
	if err := x.exec(sqlInsertPending, int64(queueID), m.OpID, m.Model, m.Key, string(m.Op), []byte(m.Value), base, m.HLC.Wall); err != nil {
		return fmt.Errorf("add pending: %w", err)
	}
	return nil
}

// raisePendingHW records that every queued write up to queueID is in the
// overlay (or decided), so reconcile need not read them again.
func raisePendingHW(x *txStmts, queueID offlinequeue.ID) error {
	return x.exec(sqlRaisePendingHW, metaPendingHW, int64(queueID))
}

// reconcile copies into the overlay the queued items a crash kept from
// reaching it (the queue is written first), and drops overlay rows whose
// item is no longer pending nor decided (a dead letter requeued elsewhere
// gets a new id). Only the queue's tail past the overlay's high-water mark
// is read, one page at a time.
func (r *replica) reconcile(ctx context.Context, q offlinequeue.Queue) error {
	hw, err := r.meta(ctx, r.db, metaPendingHW)
	if err != nil {
		return err
	}
	after := offlinequeue.ID(hw)
	for {
		items, err := q.Peek(ctx, after, syncproto.MaxBatch)
		if err != nil {
			return err
		}
		if len(items) == 0 {
			return nil
		}
		if err := r.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
			x := r.inTx(ctx, tx)
			for _, it := range items {
				m, err := decodeMutation(it.Payload)
				if err != nil {
					continue // the worker dead-letters it with the reason
				}
				if err := insertPending(x, it.ID, m); err != nil {
					return err
				}
			}
			return raisePendingHW(x, items[len(items)-1].ID)
		}); err != nil {
			return err
		}
		after = items[len(items)-1].ID
	}
}

// Record is one record as the app reads it: the server's state, or the
// app's own pending write over it.
type Record struct {
	Model string
	Key   string
	Value json.RawMessage
	// Version is the server version this record is at, or, for a pending
	// write, the server version it was written over (0: none known).
	Version uint64
	// Pending is true when Value is the app's own write, not yet decided
	// by the server.
	Pending bool
}

// get reads one key: the newest pending write, else the server's record.
// found is false for an absent or deleted key.
func (r *replica) get(ctx context.Context, model, key string) (rec Record, found bool, err error) {
	var op string
	var value []byte
	var version int64
	err = r.queryRow(ctx, `SELECT p.op, p.value, COALESCE(r.version, 0)
		FROM pending p LEFT JOIN records r ON r.model = p.model AND r.key = p.key
		WHERE p.model = ? AND p.key = ? ORDER BY p.queue_id DESC LIMIT 1`, model, key).Scan(&op, &value, &version)
	switch {
	case err == nil:
		if op == string(syncproto.OpDelete) {
			return Record{}, false, nil
		}
		return Record{Model: model, Key: key, Value: value, Version: uint64(version), Pending: true}, true, nil
	case !errors.Is(err, sql.ErrNoRows):
		return Record{}, false, err
	}
	var deleted bool
	err = r.queryRow(ctx, `SELECT value, version, deleted FROM records WHERE model = ? AND key = ?`,
		model, key).Scan(&value, &version, &deleted)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && deleted) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	return Record{Model: model, Key: key, Value: value, Version: uint64(version)}, true, nil
}

// serverVersion is the version of model/key as the replica last heard it
// from the server (a tombstone's included); 0 when it never heard of it.
func (r *replica) serverVersion(ctx context.Context, model, key string) (uint64, error) {
	var v int64
	err := r.queryRow(ctx, `SELECT version FROM records WHERE model = ? AND key = ?`, model, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return uint64(v), err
}

// ListOptions select a key range of one model. Keys compare bytewise.
type ListOptions struct {
	// Prefix, when not empty, selects keys starting with it.
	Prefix string
	// Start and End, when not empty, select keys >= Start and < End.
	Start, End string
	// Limit is the most records returned; 0 means DefaultListLimit.
	Limit int
}

// DefaultListLimit is List's page size when ListOptions.Limit is 0.
const DefaultListLimit = 1000

// list reads a key range, the pending overlay over the server's records,
// in key order.
func (r *replica) list(ctx context.Context, model string, o ListOptions) ([]Record, error) {
	if o.Limit <= 0 {
		o.Limit = DefaultListLimit
	}
	cond, args := keyRange(o)
	query := `
	WITH latest AS (
		SELECT p.key, p.op, p.value FROM pending p
		WHERE p.model = ?1 ` + cond + ` AND p.queue_id = (SELECT max(queue_id) FROM pending q WHERE q.model = p.model AND q.key = p.key)
	)
	SELECT key, value, version, pending FROM (
		SELECT r.key AS key, r.value AS value, r.version AS version, 0 AS pending FROM records r
		WHERE r.model = ?1 AND r.deleted = 0 ` + strings.ReplaceAll(cond, "p.key", "r.key") + `
			AND NOT EXISTS (SELECT 1 FROM latest l WHERE l.key = r.key)
		UNION ALL
		SELECT l.key, l.value, COALESCE((SELECT version FROM records r WHERE r.model = ?1 AND r.key = l.key), 0), 1
		FROM latest l WHERE l.op = 'put'
	) ORDER BY key LIMIT ?2`
	rows, err := r.db.QueryContext(ctx, query, append([]any{model, o.Limit}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", model, err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		rec := Record{Model: model}
		var version int64
		if err := rows.Scan(&rec.Key, &rec.Value, &version, &rec.Pending); err != nil {
			return nil, err
		}
		rec.Version = uint64(version)
		out = append(out, rec)
	}
	return out, rows.Err()
}

// keyRange is the WHERE fragment (on p.key) and its arguments, numbered
// from ?3 (?1 and ?2 are the model and the limit).
func keyRange(o ListOptions) (string, []any) {
	var b strings.Builder
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("?%d", len(args)+2)
	}
	if o.Prefix != "" {
		// A prefix match without LIKE's wildcards and case folding.
		p := arg(o.Prefix)
		fmt.Fprintf(&b, " AND substr(p.key, 1, length(%s)) = %s", p, p)
	}
	if o.Start != "" {
		b.WriteString(" AND p.key >= " + arg(o.Start))
	}
	if o.End != "" {
		b.WriteString(" AND p.key < " + arg(o.End))
	}
	return b.String(), args
}

// applyChanges applies feed entries and advances the cursor in one
// transaction. An entry never lowers a record's version: a write the client
// already applied from its own push result is not applied twice.
//
// Most entries a busy device receives are its own writes echoed back, which
// settling their push already folded into the records. Those are known
// from the settling (echoes), or found by one read, and skipped; a page of nothing else writes nothing, and its
// cursor is only held, committed at most once per heldMetaEvery (or with
// the next page that writes, or at close). A cursor lost to a crash is an
// older one: the feed resends entries the replica already holds, and they
// are skipped again. So an echo costs no commit of the device's, and the
// feed keeps pace with the pushes (a push's answer is read behind the feed
// frames sent before it).
func (r *replica) applyChanges(ctx context.Context, entries []syncproto.Change, cursor uint64) error {
	fresh, err := r.unapplied(ctx, entries)
	if err != nil {
		return err
	}
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	now := r.now()
	if len(fresh) == 0 && cursor >= r.cursorHeld && now.Sub(r.cursorWritten) < heldMetaEvery && !now.Before(r.cursorWritten) {
		r.cursorHeld = cursor
		return nil
	}
	if err := r.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		x := r.inTx(ctx, tx)
		for _, e := range fresh {
			if err := x.exec(upsertRecord, upsertArgs(e.Model, e.Key, e.Value, e.Version, e.HLC, e.Deleted)...); err != nil {
				return fmt.Errorf("apply change %d: %w", e.Seq, err)
			}
		}
		return setMeta(ctx, tx, metaCursor, cursor)
	}); err != nil {
		return err
	}
	r.cursorHeld, r.cursorWritten = 0, now
	return nil
}

// heldMetaEvery bounds how often the replica commits a meta value it may
// hold in memory (the feed cursor of pages that changed nothing, the time
// of the last complete replay): a client that awaits each write would
// otherwise pay a commit per write for each.
const heldMetaEvery = time.Second

// unapplied returns the entries the records do not yet hold (at their
// version or newer), in order: echoes of this client's settled writes are
// known (echoes), the rest found with one query. A record's version never
// goes down but by resetFromSnapshot, which the feed's reader does not run
// beside, so an entry found applied stays applied.
func (r *replica) unapplied(ctx context.Context, entries []syncproto.Change) ([]syncproto.Change, error) {
	entries = r.echoes.drop(entries)
	if len(entries) == 0 {
		return nil, nil
	}
	keys := make([][3]any, len(entries))
	for i, e := range entries {
		keys[i] = [3]any{e.Model, e.Key, e.Version}
	}
	arg, err := json.Marshal(keys)
	if err != nil {
		return nil, err
	}
	rows, err := r.db.QueryContext(ctx, `SELECT j.key FROM json_each(?) j
		WHERE NOT EXISTS (SELECT 1 FROM records r
			WHERE r.model = j.value->>0 AND r.key = j.value->>1 AND r.version >= j.value->>2)
		ORDER BY j.key`, string(arg))
	if err != nil {
		return nil, fmt.Errorf("find unapplied changes: %w", err)
	}
	defer rows.Close()
	var fresh []syncproto.Change
	for rows.Next() {
		var i int
		if err := rows.Scan(&i); err != nil {
			return nil, err
		}
		fresh = append(fresh, entries[i])
	}
	return fresh, rows.Err()
}

// upsertRecord writes a record unless the replica already holds that
// version or a newer one.
const upsertRecord = insertRecords + `(?1, ?2, ?3, ?4, ?5, ?6, ?7)` + keepNewest

// insertRecords and keepNewest make upsertRecord, and its multi-row form.
const (
	insertRecords = `INSERT INTO records (model, key, value, version, hlc, wall, deleted) VALUES `
	keepNewest    = ` ON CONFLICT (model, key) DO UPDATE SET value = excluded.value, version = excluded.version,
		hlc = excluded.hlc, wall = excluded.wall, deleted = excluded.deleted
	WHERE excluded.version > records.version`
)

// insertRecord stores a snapshot's record into the emptied records table.
const insertRecord = `INSERT INTO records (model, key, value, version, hlc, wall, deleted) VALUES (?, ?, ?, ?, ?, ?, ?)`

// upsertArgs are upsertRecord's (and insertRecord's) arguments.
func upsertArgs(model, key string, value []byte, version uint64, hlc syncproto.Timestamp, deleted bool) []any {
	return []any{model, key, value, int64(version), hlc.String(), hlc.Wall, deleted}
}

// resetFromSnapshot replaces every record with a snapshot and sets the
// cursor to its head, in one transaction: a reader sees the old state or
// the new one. The pending overlay and outcomes are kept. Reading and
// decoding the snapshot runs beside the inserts (one goroutine, stopped
// before it returns), so a large snapshot loads at the pace of the slower
// of the two rather than their sum. In the queue's file the load holds the
// queue's committer: a Put waits for it (reads do not).
func (r *replica) resetFromSnapshot(ctx context.Context, sr *syncproto.SnapshotReader) (uint64, error) {
	r.echoes.reset()
	defer r.echoes.reset()
	var head uint64
	err := r.write(ctx, func(_ context.Context, tx *sql.Tx) error {
		// The caller's ctx, not the committer's: giving up cancels the
		// load, and the transaction is rolled back.
		var err error
		head, err = storeSnapshot(ctx, tx, sr)
		return err
	})
	if err != nil {
		return 0, err
	}
	// The feed is not applied beside a reset (the link's feed goroutine
	// runs it, or it runs before the feed starts), so no page's cursor
	// can be held for the records just replaced.
	r.heldMu.Lock()
	r.cursorHeld, r.cursorWritten = 0, r.now()
	r.heldMu.Unlock()
	return head, nil
}

// storeSnapshot is resetFromSnapshot's transaction.
func storeSnapshot(ctx context.Context, tx *sql.Tx, sr *syncproto.SnapshotReader) (uint64, error) {
	if _, err := tx.ExecContext(ctx, `DELETE FROM records`); err != nil {
		return 0, err
	}
	stmt, err := tx.PrepareContext(ctx, insertRecord)
	if err != nil {
		return 0, err
	}
	defer stmt.Close()

	ctx, cancel := context.WithCancel(ctx)
	pages := make(chan []syncproto.SnapshotRecord, 4)
	var readErr error
	var reading sync.WaitGroup
	reading.Go(func() {
		defer close(pages)
		readErr = readSnapshotPages(ctx, sr, pages)
	})
	defer func() {
		cancel()
		for range pages { // unblock the reader, then wait for it
		}
		reading.Wait()
	}()
	// Each insert runs on a context that cannot be cancelled (with one that
	// can, the SQLite driver starts a goroutine per statement to watch it);
	// giving up is checked once a page.
	raw := context.WithoutCancel(ctx)
	for page := range pages {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		for _, rec := range page {
			if _, err := stmt.ExecContext(raw, upsertArgs(rec.Model, rec.Key, rec.Value, rec.Version, rec.HLC, false)...); err != nil {
				return 0, fmt.Errorf("snapshot: store %s/%s: %w", rec.Model, rec.Key, err)
			}
		}
	}
	reading.Wait()
	if readErr != nil {
		return 0, fmt.Errorf("snapshot: %w", readErr)
	}
	head := sr.Head()
	return head, setMeta(ctx, tx, metaCursor, head)
}

// snapshotPage is how many records resetFromSnapshot's reader hands over at
// a time.
const snapshotPage = 256

// readSnapshotPages reads sr to its end in pages sent on pages; it returns
// nil after the trailer, sr's error, or ctx's when the consumer gave up.
func readSnapshotPages(ctx context.Context, sr *syncproto.SnapshotReader, pages chan<- []syncproto.SnapshotRecord) error {
	page := make([]syncproto.SnapshotRecord, 0, snapshotPage)
	for {
		rec, err := sr.Next()
		eof := errors.Is(err, io.EOF)
		if err != nil && !eof {
			return err
		}
		if !eof {
			page = append(page, rec)
		}
		if len(page) == snapshotPage || (eof && len(page) > 0) {
			select {
			case pages <- page:
			case <-ctx.Done():
				return ctx.Err()
			}
			page = make([]syncproto.SnapshotRecord, 0, snapshotPage)
		}
		if eof {
			return nil
		}
	}
}

// lockedDeadLetters is a queue whose MoveToDeadLettersWith runs a hook
// under the queue's lock, holding its readers until the move
// (offlinequeue.File and Memory).
type lockedDeadLetters interface {
	MoveToDeadLettersWith(ctx context.Context, id offlinequeue.ID, reason string, with func(ctx context.Context) error) error
}

// deadLetter records m's outcome o (decideHook) and moves its queue item
// id to the dead letters with reason, so that whoever reads the outcome
// (Await, Lookup) finds the write in the dead-letter listing: in the
// queue's file both are one commit; with a replica file of its own the
// outcome commits while the queue holds its readers until the move. A
// crash between the two there leaves the outcome and the pending item,
// which replays and is refused again. A queue with neither method commits
// the outcome, then the move, and the listing may lag. m nil (an item
// that does not decode) records no outcome.
func (r *replica) deadLetter(ctx context.Context, id offlinequeue.ID, reason string, m *syncproto.Mutation, o Outcome) error {
	if m == nil {
		return r.queue.MoveToDeadLetters(ctx, id, reason)
	}
	record := r.decideHook([]decision{{mut: m, outcome: o}})
	if r.shared != nil {
		return r.shared.MoveToDeadLettersWith(ctx, id, reason, record)
	}
	if q, ok := r.queue.(lockedDeadLetters); ok {
		return q.MoveToDeadLettersWith(ctx, id, reason, func(ctx context.Context) error {
			return r.write(ctx, record)
		})
	}
	if err := r.write(ctx, record); err != nil {
		return err
	}
	return r.queue.MoveToDeadLetters(ctx, id, reason)
}

// decision is one write and its final outcome.
type decision struct {
	mut     *syncproto.Mutation
	outcome Outcome
}

// decideDone records the decisions ds (decideHook) and marks their
// queue items ids done. In the queue's file that is one commit: a crash
// leaves both or neither. With a replica file of its own, the outcomes
// commit first (one commit for the batch), then the items: a crash between
// the two resends the writes and the ledger answers duplicate.
// The outcomes are handed to the Await calls waiting for them once they
// are committed (handoffs).
func (r *replica) decideDone(ctx context.Context, ds []decision, ids []offlinequeue.ID) error {
	gen := r.echoes.generation()
	if r.shared != nil {
		if err := r.shared.MarkDoneWith(ctx, r.decideHook(ds), ids...); err != nil {
			return err
		}
		r.recorded(gen, ds)
		return nil
	}
	if err := r.write(ctx, r.decideHook(ds)); err != nil {
		return err
	}
	r.recorded(gen, ds)
	return r.queue.MarkDone(ctx, ids...)
}

// recorded tells the Await calls waiting for them and the feed's echo
// check (begun at generation gen) of committed decisions.
func (r *replica) recorded(gen uint64, ds []decision) {
	r.echoes.note(gen, ds)
	for _, d := range ds {
		r.handoffs.hand(d.outcome)
	}
}

// decideHook records ds in a transaction: each write's final outcome,
// its removal from the pending overlay, and what the server said folded
// into the records (the applied write, or the winner that stands). The
// queue item of a decided write is removed only with or after this
// commits, so a crash before resends the write and the ledger answers
// duplicate. Applied writes without a winner
// (nearly every decision of a replay) are recorded decideChunk at a time,
// three multi-row statements per chunk instead of three statements per
// write; the others one by one (decideIn). Order does not matter: outcomes
// are keyed by op id and a record keeps its highest version.
func (r *replica) decideHook(ds []decision) offlinequeue.Hook {
	return func(ctx context.Context, tx *sql.Tx) error {
		x := r.inTx(ctx, tx)
		var applied []decision
		for _, d := range ds {
			if d.outcome.Status == StatusApplied && d.outcome.Winner == nil {
				applied = append(applied, d)
				continue
			}
			if err := decideIn(x, d.mut, d.outcome); err != nil {
				return err
			}
		}
		for len(applied) > 0 {
			n := min(len(applied), decideChunk)
			if err := decideApplied(x, applied[:n]); err != nil {
				return err
			}
			applied = applied[n:]
		}
		return nil
	}
}

// decideChunk is how many applied writes decideApplied records per
// statement: 10 bound values per outcome row, well within SQLite's limit
// of 32,766 per statement.
const decideChunk = 64

// decideApplied records applied writes (no winner) as decideIn does, with
// one multi-row statement for each of its three steps.
func decideApplied(x *txStmts, ds []decision) error {
	outcomes := make([]any, 0, 10*len(ds))
	ops := make([]any, 0, len(ds))
	records := make([]any, 0, 7*len(ds))
	for _, d := range ds {
		m, o := d.mut, d.outcome
		outcomes = append(outcomes, o.OpID, m.Model, m.Key, string(o.Status), int64(o.Version), int64(o.Seq), o.Reason, nil, o.RebasedAs, o.DecidedAt.UnixMilli())
		ops = append(ops, o.OpID)
		records = append(records, upsertArgs(m.Model, m.Key, m.Value, o.Version, o.HLC, m.Op == syncproto.OpDelete)...)
	}
	rows := func(width int) string {
		row := "(?" + strings.Repeat(", ?", width-1) + ")"
		return row + strings.Repeat(", "+row, len(ds)-1)
	}
	if err := x.exec(insertOutcomes+rows(10)+keepFirstOutcome, outcomes...); err != nil {
		return fmt.Errorf("record outcome: %w", err)
	}
	if err := x.exec(`DELETE FROM pending WHERE op_id IN (?`+strings.Repeat(", ?", len(ds)-1)+`)`, ops...); err != nil {
		return err
	}
	return x.exec(insertRecords+rows(7)+keepNewest, records...)
}

// Statements of decideIn (insertOutcomes and keepFirstOutcome also make
// decideApplied's multi-row form).
const (
	insertOutcomes   = `INSERT INTO outcomes (op_id, model, key, status, version, seq, reason, winner, rebased_as, decided_at) VALUES `
	keepFirstOutcome = ` ON CONFLICT (op_id) DO NOTHING`

	sqlInsertOutcome = insertOutcomes + `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)` + keepFirstOutcome
	sqlDeletePending = `DELETE FROM pending WHERE op_id = ?`
)

func decideIn(x *txStmts, m *syncproto.Mutation, o Outcome) error {
	var winner []byte
	if o.Winner != nil {
		var err error
		if winner, err = json.Marshal(o.Winner); err != nil {
			return err
		}
	}
	if err := x.exec(sqlInsertOutcome, o.OpID, m.Model, m.Key, string(o.Status), int64(o.Version), int64(o.Seq), o.Reason, winner, o.RebasedAs, o.DecidedAt.UnixMilli()); err != nil {
		return fmt.Errorf("record outcome: %w", err)
	}
	if err := x.exec(sqlDeletePending, o.OpID); err != nil {
		return err
	}
	switch {
	case o.Status == StatusApplied:
		return x.exec(upsertRecord, upsertArgs(m.Model, m.Key, m.Value, o.Version, o.HLC, m.Op == syncproto.OpDelete)...)
	case o.Winner != nil && o.Winner.Version > 0 && !o.Winner.ValueOmitted:
		// A winner without its value (PROTOCOL.md 5.4) reaches the
		// replica through the change feed instead.
		w := o.Winner
		return x.exec(upsertRecord, upsertArgs(m.Model, m.Key, w.Value, w.Version, w.HLC, w.Deleted)...)
	}
	return nil
}

// outcome returns a decided write's outcome.
func (r *replica) outcome(ctx context.Context, opID string) (Outcome, bool, error) {
	o, found, _, err := r.outcomeOrPending(ctx, opID)
	return o, found, err
}

// outcomeOrPending returns a write's outcome if it was decided, else
// whether it is still in the pending overlay, read in one statement (one
// snapshot: a decision removes the pending row and records the outcome in
// one transaction, so a write neither decided nor pending is unknown).
func (r *replica) outcomeOrPending(ctx context.Context, opID string) (o Outcome, found, pending bool, err error) {
	var status, reason, rebasedAs sql.Null[string]
	var version, seq, decided sql.Null[int64]
	var winner []byte
	err = r.queryRow(ctx, `SELECT o.status, o.version, o.seq, o.reason, o.winner, o.rebased_as, o.decided_at,
			EXISTS (SELECT 1 FROM pending WHERE op_id = ?1)
		FROM (SELECT ?1 AS op_id) k LEFT JOIN outcomes o ON o.op_id = k.op_id`,
		opID).Scan(&status, &version, &seq, &reason, &winner, &rebasedAs, &decided, &pending)
	if err != nil || !status.Valid {
		return Outcome{}, false, pending, err
	}
	o = Outcome{OpID: opID, Status: OutcomeStatus(status.V), Version: uint64(version.V), Seq: uint64(seq.V),
		Reason: reason.V, RebasedAs: rebasedAs.V, DecidedAt: time.UnixMilli(decided.V)}
	if len(winner) > 0 {
		o.Winner = new(syncproto.Winner)
		if err := json.Unmarshal(winner, o.Winner); err != nil {
			return Outcome{}, false, false, err
		}
	}
	return o, true, pending, nil
}

// pruneOutcomes forgets outcomes decided before cutoff and returns how
// many.
func (r *replica) pruneOutcomes(ctx context.Context, cutoff time.Time) (int64, error) {
	var n int64
	err := r.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM outcomes WHERE decided_at < ?`, cutoff.UnixMilli())
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	return n, err
}

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

// forgetDeadLettered removes the dead-letter outcomes of ops, so the
// requeued writes' next decisions are recorded.
func (r *replica) forgetDeadLettered(ctx context.Context, ops []string) error {
	return r.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for _, op := range ops {
			if _, err := tx.ExecContext(ctx, `DELETE FROM outcomes WHERE op_id = ? AND status = ?`, op, string(StatusDeadLettered)); err != nil {
				return fmt.Errorf("forget dead-letter outcome: %w", err)
			}
		}
		return nil
	})
}
