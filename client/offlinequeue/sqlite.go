package offlinequeue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
)

// Synchronous is the SQLite synchronous level of a queue's database (and
// of a client's replica): how much a returned call survives. It is
// sqlitedb.Synchronous, the one durability type of every SQLite file the
// project writes (syncd's Config names it server.Synchronous).
type Synchronous = sqlitedb.Synchronous

const (
	// SyncFull syncs the write-ahead log on every commit, so a call that
	// returned survives a process crash and a power cut. The default.
	SyncFull = sqlitedb.Full
	// SyncNormal syncs only at checkpoints. A call that returned survives a
	// process crash, but a power cut (or an OS crash) can roll back the most
	// recent commits: not power-loss safe. Choose it only where losing the
	// newest enqueues to a power cut is acceptable.
	SyncNormal = sqlitedb.Normal
)

// DefaultBusyTimeout is how long a SQLite queue waits for a lock held by
// another connection to the same file before failing.
const DefaultBusyTimeout = sqlitedb.DefaultBusyTimeout

// SQLiteOptions configure OpenSQLite. The zero value means the defaults.
type SQLiteOptions struct {
	Options
	// Synchronous is the durability level; the zero value is SyncFull.
	Synchronous Synchronous
	// BusyTimeout bounds the wait for a lock held by another connection
	// (another process, or a tool inspecting the file); 0 means
	// DefaultBusyTimeout; a negative value is refused. It is set before any
	// other setting, so it also covers the switch to WAL on open.
	BusyTimeout time.Duration
}

// SQLite is a Queue in one SQLite database file: an indexed table of pending
// items and one of dead letters. It suits deep queues and keyed dedup at
// volume: Peek and dedup are index lookups, whatever the depth.
//
// Durability: the database runs in WAL mode with synchronous=FULL unless
// SQLiteOptions.Synchronous says otherwise, so a call that returned nil is
// committed and survives a power cut. Concurrent Enqueue calls share one
// transaction (group commit): callers that arrive while a commit is in
// flight are committed together in the next one, and each returns only after
// the transaction holding its item committed; the callers a commit released
// join the next group before it is written (see gather), so n concurrent
// producers share about one commit per round, not two. A single Enqueue with
// nothing in flight commits at once, in its caller's goroutine.
//
// A write that fails before its commit is rolled back and did not happen;
// the handle keeps working. If a commit itself fails, its outcome is
// unknown: the handle is poisoned, that call and every later write return an
// error matching ErrPoisoned, and reads keep working (Len and Stats count
// what was known to be committed). Close and reopen it.
//
// Checkpoints run beside the writes, not in them (sqlitedb.Checkpointer):
// no commit copies the write-ahead log back into the database, so no call
// waits for that; a stream of writes lets the log grow to about 16 MiB
// (sqlitedb.DefaultMaxLogPages) before one write does.
//
// SQLite is safe for concurrent use. Open one path from one process at a time.
type SQLite struct {
	path  string
	opts  SQLiteOptions
	rec   recorder
	db    *sql.DB
	stmts sqliteStmts
	multi multiStmts // owned by the holder of writer
	hooks sqliteHooks

	// life is held shared by every call in progress and exclusively by
	// Close, so Close waits for calls in flight and later calls see closed.
	life   sync.RWMutex
	closed bool

	requests chan *writeRequest // to the committer
	stop     chan struct{}      // closed by Close to stop the committer
	stopped  chan struct{}      // closed by the committer when it exits

	// writer is held by whoever writes: the committer, or a caller that
	// commits its own write (submit). Everything "the committer" owns
	// below is owned by writer's holder.
	writer sync.Mutex
	// solo is true while writes come one at a time (the committer's last
	// group was a lone write): a caller that then finds the writer free and
	// nothing waiting commits its write itself, without the two hand-offs
	// between goroutines a trip through the committer costs.
	solo atomic.Bool
	// waiting counts the requests handed to the committer that it has not
	// yet taken into a commit (under writer).
	waiting atomic.Int64

	// checkpoints runs the log's checkpoints beside the committer, which
	// tells it of each write: no commit checkpoints (sqlitedb's
	// Checkpointer says why).
	checkpoints *sqlitedb.Checkpointer

	countMu sync.Mutex
	pending int // committed pending items
	dead    int // committed dead letters

	// poisoned is set and read by the holder of writer only.
	poisoned error

	// unsynced commits MarkDoneUnsynced's writes (see sqlite_unsynced.go);
	// nil at SyncNormal, where every commit is unsynced alike.
	unsynced *unsyncedWriter
}

var _ Queue = (*SQLite)(nil)

// checkpointOptions are the queue's: a write adds some 3 to 10 pages, so
// the default spacing keeps the log near SQLite's own 1,000 pages, and
// every read of the queue and of the replica in its file is short, so the
// committer's own checkpoint may wait for readers and surely restart the
// log. Under a stream of enqueues the background checkpoints never leave
// the log all copied, so only that restart reuses it, and it comes once
// the log passed maxLogPages: SQLite's own 1,000, not sqlitedb's default
// 4,000, because a commit whose frames extend the log file waits for the
// file system to record its new size (an fsync some 2 to 4 times as long
// as one that overwrites frames of a log started over, measured in
// docs/benchmarks.md), and a log that starts over every 1,000 pages
// stops growing after its first 1,000.
var checkpointOptions = sqlitedb.CheckpointerOptions{WaitForReaders: true, MaxLogPages: maxLogPages}

// maxLogPages bounds the queue's write-ahead log (checkpointOptions).
const maxLogPages = 1000

// sqliteHooks are fault-injection and observation seams for tests; the zero
// value (used by OpenSQLite) does nothing.
type sqliteHooks struct {
	// connect runs on every new connection after the queue's own settings
	// and before they are read back (it is sqlitedb's Options.Configure).
	connect func(*sqlite3.SQLiteConn) error
	// batch runs in the committer before each group of enqueues is written,
	// with the group's size.
	batch func(size int)
	// deferredSync runs after the queue synced its log for commits made
	// without a sync (MarkDoneUnsynced), under the writer.
	deferredSync func()
}

// OpenSQLite opens (creating if needed) the queue stored in the SQLite
// database at path. Its metrics carry path as the queue label.
//
// The database is opened the way internal/sqlitedb opens every syncd
// database: every connection is configured, in this order, busy_timeout,
// synchronous, a check that the file is empty or a queue, journal_mode=WAL;
// then the settings are read back. Open fails if the file system cannot
// provide WAL (network and some overlay mounts cannot), if the file is not a
// SQLite database, if it is a database that is not a syncd queue, or if its
// schema is newer than this build knows (*NewerFormatError). A failed open leaves nothing open,
// and a file it refused (not a database, not a queue, a newer schema) is left
// byte-for-byte as it was. A queue file it creates, and its directory entry,
// are durable when it returns.
//
// Before anything is opened, path and the files SQLite keeps beside it
// (path-wal, path-shm, path-journal) must each be absent or a regular file:
// a symbolic link, FIFO, device, socket or directory is refused with
// *PathError (see there why links are refused rather than followed). A queue
// file it creates, and its write-ahead log, get FileMode (0600) before it
// returns.
func OpenSQLite(path string, opts SQLiteOptions) (*SQLite, error) {
	return openSQLite(path, opts, sqliteHooks{})
}

func openSQLite(path string, opts SQLiteOptions, hooks sqliteHooks) (*SQLite, error) {
	q, err := newSQLite(path, opts, hooks)
	if err != nil {
		return nil, fmt.Errorf("offlinequeue: open sqlite queue %s: %w", path, err)
	}
	q.checkpoints = sqlitedb.StartCheckpointer(q.db, checkpointOptions)
	if q.syncsOnCommit() {
		if q.unsynced, err = startUnsynced(q); err != nil {
			q.checkpoints.Close()
			q.stmts.close()
			_ = q.db.Close()
			return nil, fmt.Errorf("offlinequeue: open sqlite queue %s: %w", path, err)
		}
	}
	go q.commitLoop()
	return q, nil
}

// newSQLite opens, checks and prepares the database. On error it has closed
// everything it opened.
func newSQLite(path string, opts SQLiteOptions, hooks sqliteHooks) (q *SQLite, err error) {
	if err := opts.checkLimits(); err != nil {
		return nil, err
	}
	opts.Options = opts.Options.withDefaults()
	files := sqliteFiles(path)
	if err := checkRegular(files...); err != nil {
		return nil, err
	}
	_, statErr := os.Lstat(path)
	created := errors.Is(statErr, fs.ErrNotExist)
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{
		Synchronous:      opts.Synchronous,
		BusyTimeout:      opts.BusyTimeout,
		Inspect:          refuseForeign,
		NoAutoCheckpoint: true,
		Configure:        hooks.connect,
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = db.Close()
		}
	}()
	// One connection writes (the holder of writer); the others serve readers.
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)

	if err := migrate(ctx, db); err != nil {
		return nil, err
	}
	if created {
		if err := restrict(files...); err != nil {
			return nil, err
		}
	}
	q = &SQLite{
		path:     path,
		opts:     opts,
		rec:      opts.Metrics.recorder(path),
		db:       db,
		hooks:    hooks,
		requests: make(chan *writeRequest, maxBatch),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	q.solo.Store(true)
	if err := db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM items), (SELECT count(*) FROM dead_letters)`).Scan(&q.pending, &q.dead); err != nil {
		return nil, fmt.Errorf("count items: %w", err)
	}
	if q.stmts, err = prepareStmts(ctx, db); err != nil {
		return nil, err
	}
	q.rec.setCounts(q.pending, q.dead)
	return q, nil
}

// sqliteFiles are the files SQLite keeps for the database at path: the
// database, its write-ahead log, its shared-memory index and its rollback
// journal.
func sqliteFiles(path string) []string {
	return []string{path, path + "-wal", path + "-shm", path + "-journal"}
}

// refuseForeign is the queue's sqlitedb Options.Inspect: it fails unless the
// connection's database is empty or a queue of a schema version this build
// knows, before the switch to WAL could modify a file that is not the queue's.
func refuseForeign(c *sqlite3.SQLiteConn) error {
	version, err := sqlitedb.QueryValue(c, "PRAGMA user_version")
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	objects, err := sqlitedb.QueryValue(c, "SELECT count(*) FROM sqlite_schema")
	if err != nil {
		return fmt.Errorf("read schema: %w", err)
	}
	v, vok := version.(int64)
	n, nok := objects.(int64)
	if !vok || !nok {
		return fmt.Errorf("unexpected schema check results %#v, %#v", version, objects)
	}
	_, err = checkSchema(v, n)
	return err
}

// schemaVersion is the PRAGMA user_version this build writes: the number
// of migrations.
const schemaVersion = 1

// schema creates a version-1 queue. Payloads, keys and reasons are BLOBs so
// that their lengths are explicit and NUL or non-UTF-8 bytes survive. A
// non-empty key is unique among pending items (the partial index); dead
// letters keep their key without holding it. AUTOINCREMENT keeps IDs from
// ever being reused, even after the newest item is deleted.
const schema = `
CREATE TABLE items (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	payload     BLOB    NOT NULL,
	key         BLOB    NOT NULL,
	attempts    INTEGER NOT NULL DEFAULT 0,
	enqueued_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX items_key ON items (key) WHERE length(key) > 0;
CREATE TABLE dead_letters (
	id          INTEGER PRIMARY KEY,
	payload     BLOB    NOT NULL,
	key         BLOB    NOT NULL,
	attempts    INTEGER NOT NULL,
	enqueued_at INTEGER NOT NULL,
	reason      BLOB    NOT NULL,
	dead_at     INTEGER NOT NULL
);
`

// checkSchema classifies a database by its user_version and its number of
// schema objects: fresh (empty, to be created), a queue of this version, or
// an error for anything else.
func checkSchema(version, objects int64) (fresh bool, err error) {
	switch {
	case version == schemaVersion:
		return false, nil
	case version > schemaVersion:
		return false, &NewerFormatError{Format: "queue schema", File: int(version), Known: schemaVersion}
	case version != 0 || objects != 0:
		return false, fmt.Errorf("database (user_version %d, %d schema objects) is not a syncd offline queue", version, objects)
	}
	return true, nil
}

// migrations are the queue file's schema versions (sqlitedb.Migrate, the
// one scheme of every SQLite file the project writes): migration i brings
// a file from version i to i+1. Version 1 is the first shipped.
var migrations = []sqlitedb.Migration{
	// 1: the items and dead letters of a new file, which must be empty
	// (a file of another application is refused, not added to).
	func(ctx context.Context, tx sqlitedb.Execer) error {
		var objects int64
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&objects); err != nil {
			return fmt.Errorf("read schema: %w", err)
		}
		if _, err := checkSchema(0, objects); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, schema); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
		return nil
	},
}

// migrate brings the file to schemaVersion. Two openers racing on a new
// file cannot both create it: each migration takes the write lock and reads
// the version again first.
func migrate(ctx context.Context, db *sql.DB) error {
	_, err := sqlitedb.Migrate(ctx, db, migrations[:schemaVersion])
	if ne, ok := errors.AsType[*sqlitedb.NewerSchemaError](err); ok {
		return &NewerFormatError{Format: "queue schema", File: ne.File, Known: ne.Known}
	}
	return err
}

// The queue's statements. Key lookups repeat the partial index's WHERE term
// so that SQLite can use the index.
const (
	sqlFindKey = `SELECT id FROM items WHERE key = ? AND length(key) > 0`
	sqlInsert  = `INSERT INTO items (payload, key, attempts, enqueued_at) VALUES (?, ?, 0, ?)`
	// sqlInsertNew inserts an item unless its non-empty key is pending
	// (then it changes nothing): a key lookup and an insert in one step.
	// Not an upsert (ON CONFLICT DO NOTHING): that takes an AUTOINCREMENT
	// id even when it inserts nothing, and ids are given without gaps.
	sqlInsertNew = `INSERT INTO items (payload, key, attempts, enqueued_at)
		SELECT ?1, ?2, 0, ?3 WHERE NOT EXISTS (SELECT 1 FROM items WHERE key = ?2 AND length(key) > 0)`
	sqlPeek        = `SELECT id, payload, key, attempts, enqueued_at FROM items WHERE id > ? ORDER BY id LIMIT ?`
	sqlDeleteItem  = `DELETE FROM items WHERE id = ?`
	sqlSetAttempts = `UPDATE items SET attempts = ? WHERE id = ?`
	sqlKill        = `INSERT INTO dead_letters (id, payload, key, attempts, enqueued_at, reason, dead_at)
		SELECT id, payload, key, attempts, enqueued_at, ?, ? FROM items WHERE id = ?`
	sqlListDead = `SELECT id, payload, key, attempts, enqueued_at, reason, dead_at
		FROM dead_letters WHERE id > ? ORDER BY id LIMIT ?`
	// OR IGNORE: a dead letter whose key is pending again is not inserted;
	// Requeue deletes it either way.
	sqlRevive = `INSERT OR IGNORE INTO items (payload, key, attempts, enqueued_at)
		SELECT payload, key, 0, ? FROM dead_letters WHERE id = ?`
	sqlDeleteDead = `DELETE FROM dead_letters WHERE id = ?`
	// The store is small (MaxDeadLetters) and this runs only beyond it, so
	// a scan ordered by dead_at needs no index.
	// The newest dead letter (the one just moved) is never evicted.
	sqlEvictDead = `DELETE FROM dead_letters WHERE id IN
		(SELECT id FROM dead_letters WHERE id != ? ORDER BY dead_at, id LIMIT ?)`
)

// sqliteStmts are the queue's prepared statements. Each is prepared on the
// pool; a transaction binds it to its connection with Tx.StmtContext, which
// reuses the connection's prepared copy.
type sqliteStmts struct {
	findKey, insert, insertNew, peek, deleteItem  *sql.Stmt
	setAttempts                                   *sql.Stmt
	kill, listDead, revive, deleteDead, evictDead *sql.Stmt
}

func prepareStmts(ctx context.Context, db *sql.DB) (sqliteStmts, error) {
	var s sqliteStmts
	for _, p := range []struct {
		dst   **sql.Stmt
		query string
	}{
		{&s.findKey, sqlFindKey},
		{&s.insert, sqlInsert},
		{&s.insertNew, sqlInsertNew},
		{&s.peek, sqlPeek},
		{&s.deleteItem, sqlDeleteItem},
		{&s.setAttempts, sqlSetAttempts},
		{&s.kill, sqlKill},
		{&s.listDead, sqlListDead},
		{&s.revive, sqlRevive},
		{&s.deleteDead, sqlDeleteDead},
		{&s.evictDead, sqlEvictDead},
	} {
		stmt, err := db.PrepareContext(ctx, p.query)
		if err != nil {
			s.close()
			return sqliteStmts{}, fmt.Errorf("prepare %q: %w", p.query, err)
		}
		*p.dst = stmt
	}
	return s, nil
}

func (s sqliteStmts) close() {
	for _, stmt := range []*sql.Stmt{s.findKey, s.insert, s.insertNew, s.peek, s.deleteItem, s.setAttempts, s.kill, s.listDead, s.revive, s.deleteDead, s.evictDead} {
		if stmt != nil {
			_ = stmt.Close()
		}
	}
}

// enter checks ctx and takes a shared hold on an open queue; the caller must
// call s.life.RUnlock.
func (s *SQLite) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.life.RLock()
	if s.closed {
		s.life.RUnlock()
		return ErrClosed
	}
	return nil
}

// Enqueue implements Queue.
func (s *SQLite) Enqueue(ctx context.Context, payload []byte, key string) (ID, error) {
	if err := s.opts.validateEnqueue(payload, key); err != nil {
		return 0, err
	}
	r := &writeRequest{payload: payload, key: key, done: make(chan struct{})}
	if err := s.submit(ctx, r); err != nil {
		return 0, err
	}
	return r.id, nil
}

// Peek implements Queue. A limit of zero or less returns no items.
func (s *SQLite) Peek(ctx context.Context, after ID, limit int) ([]Item, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	if limit <= 0 {
		return nil, nil
	}
	rows, err := s.stmts.peek.QueryContext(ctx, clampID(after), limit)
	if err != nil {
		return nil, fmt.Errorf("offlinequeue: peek %s: %w", s.path, err)
	}
	defer rows.Close()
	var page []Item
	for rows.Next() {
		var it Item
		var at int64
		if err := rows.Scan(&it.ID, &it.Payload, &it.Key, &it.Attempts, &at); err != nil {
			return nil, fmt.Errorf("offlinequeue: peek %s: %w", s.path, err)
		}
		it.EnqueuedAt = time.Unix(0, at)
		page = append(page, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("offlinequeue: peek %s: %w", s.path, err)
	}
	return page, nil
}

// MarkDone implements Queue.
func (s *SQLite) MarkDone(ctx context.Context, ids ...ID) error {
	return s.apply(ctx, "mark done in", func(ctx context.Context, tx *sql.Tx) (counts, error) {
		return s.markDone(ctx, tx, ids)
	})
}

// markDone deletes the items ids in tx.
func (s *SQLite) markDone(ctx context.Context, tx *sql.Tx, ids []ID) (counts, error) {
	del := tx.StmtContext(ctx, s.stmts.deleteItem)
	var removed int64
	for _, id := range ids {
		n, err := execCount(ctx, del, id)
		if err != nil {
			return counts{}, err
		}
		removed += n
	}
	return counts{pending: -int(removed)}, nil
}

// SetAttempts implements Queue.
func (s *SQLite) SetAttempts(ctx context.Context, id ID, n Attempts) error {
	return s.apply(ctx, "set attempts in", func(ctx context.Context, tx *sql.Tx) (counts, error) {
		changed, err := execCount(ctx, tx.StmtContext(ctx, s.stmts.setAttempts), uint32(n), id)
		if err != nil {
			return counts{}, err
		}
		if changed == 0 {
			return counts{}, ErrNotFound
		}
		return counts{}, nil
	})
}

// Len implements Queue.
func (s *SQLite) Len(ctx context.Context) (int, error) {
	st, err := s.Stats(ctx)
	return st.Pending, err
}

// MaxDepth implements Queue.
func (s *SQLite) MaxDepth() int { return s.opts.MaxDepth }

// Stats implements Queue. The counts are kept in memory, updated as each
// transaction commits.
func (s *SQLite) Stats(ctx context.Context) (Stats, error) {
	if err := s.enter(ctx); err != nil {
		return Stats{}, err
	}
	defer s.life.RUnlock()
	s.countMu.Lock()
	defer s.countMu.Unlock()
	return Stats{Pending: s.pending, DeadLetters: s.dead, MaxDepth: s.opts.MaxDepth}, nil
}

// MoveToDeadLetters implements Queue. The move is one transaction.
func (s *SQLite) MoveToDeadLetters(ctx context.Context, id ID, reason string) error {
	return s.apply(ctx, "move to dead letters in", func(ctx context.Context, tx *sql.Tx) (counts, error) {
		return s.moveToDead(ctx, tx, id, reason)
	})
}

// moveToDead moves pending item id to the dead letters in tx and returns
// the change of the counts; ErrNotFound when id is not pending.
func (s *SQLite) moveToDead(ctx context.Context, tx *sql.Tx, id ID, reason string) (counts, error) {
	moved, err := execCount(ctx, tx.StmtContext(ctx, s.stmts.kill), blob(truncateReason(reason)), s.opts.now().UnixNano(), id)
	if err != nil {
		return counts{}, err
	}
	if moved == 0 {
		return counts{}, ErrNotFound
	}
	if _, err := execCount(ctx, tx.StmtContext(ctx, s.stmts.deleteItem), id); err != nil {
		return counts{}, err
	}
	// s.dead is written only by the committer, which runs this.
	var evicted int64
	if over := s.dead + 1 - s.opts.MaxDeadLetters; over > 0 {
		if evicted, err = execCount(ctx, tx.StmtContext(ctx, s.stmts.evictDead), id, over); err != nil {
			return counts{}, err
		}
	}
	return counts{pending: -1, dead: 1 - int(evicted), evicted: int(evicted)}, nil
}

// DeadLetters implements Queue. A limit of zero or less returns no items.
func (s *SQLite) DeadLetters(ctx context.Context, after ID, limit int) ([]DeadLetter, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	if limit <= 0 {
		return nil, nil
	}
	rows, err := s.stmts.listDead.QueryContext(ctx, clampID(after), limit)
	if err != nil {
		return nil, fmt.Errorf("offlinequeue: list dead letters in %s: %w", s.path, err)
	}
	defer rows.Close()
	var page []DeadLetter
	for rows.Next() {
		var d DeadLetter
		var at, deadAt int64
		var reason []byte
		if err := rows.Scan(&d.ID, &d.Payload, &d.Key, &d.Attempts, &at, &reason, &deadAt); err != nil {
			return nil, fmt.Errorf("offlinequeue: list dead letters in %s: %w", s.path, err)
		}
		d.EnqueuedAt, d.DeadAt, d.Reason = time.Unix(0, at), time.Unix(0, deadAt), string(reason)
		page = append(page, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("offlinequeue: list dead letters in %s: %w", s.path, err)
	}
	return page, nil
}

// Requeue implements Queue. The whole call is one transaction. Dead letters
// are requeued in ID order; of two dead letters with the same key, the older
// one is requeued and the younger one dropped. A requeued item's EnqueuedAt
// is the time of the requeue.
func (s *SQLite) Requeue(ctx context.Context, ids ...ID) error {
	ids = sortedUnique(ids)
	return s.apply(ctx, "requeue in", func(ctx context.Context, tx *sql.Tx) (counts, error) {
		revive := tx.StmtContext(ctx, s.stmts.revive)
		del := tx.StmtContext(ctx, s.stmts.deleteDead)
		var c counts
		now := s.opts.now().UnixNano()
		for _, id := range ids {
			inserted, err := execCount(ctx, revive, now, id)
			if err != nil {
				return counts{}, err
			}
			deleted, err := execCount(ctx, del, id)
			if err != nil {
				return counts{}, err
			}
			c.pending += int(inserted)
			c.dead -= int(deleted)
		}
		return c, nil
	})
}

// Purge implements Queue.
func (s *SQLite) Purge(ctx context.Context, ids ...ID) error {
	return s.apply(ctx, "purge dead letters in", func(ctx context.Context, tx *sql.Tx) (counts, error) {
		del := tx.StmtContext(ctx, s.stmts.deleteDead)
		var deleted int64
		for _, id := range ids {
			n, err := execCount(ctx, del, id)
			if err != nil {
				return counts{}, err
			}
			deleted += n
		}
		return counts{dead: -int(deleted)}, nil
	})
}

// Close implements Queue. It waits for calls in flight, stops the committer
// and closes the database.
func (s *SQLite) Close() error {
	s.life.Lock()
	if s.closed {
		s.life.Unlock()
		return nil
	}
	s.closed = true
	s.life.Unlock()
	close(s.stop)
	<-s.stopped
	syncErr := s.unsynced.close()
	s.checkpoints.Close()
	s.stmts.close()
	s.multi.close()
	if err := errors.Join(syncErr, s.db.Close()); err != nil {
		return fmt.Errorf("offlinequeue: close %s: %w", s.path, err)
	}
	return nil
}

// execCount runs a statement that names one item by ID (its last argument)
// and returns the number of rows it changed. An ID beyond SQLite's integer
// range names no row.
func execCount(ctx context.Context, stmt *sql.Stmt, args ...any) (int64, error) {
	if id, ok := args[len(args)-1].(ID); ok {
		if id > math.MaxInt64 {
			return 0, nil
		}
		args[len(args)-1] = int64(id)
	}
	res, err := stmt.ExecContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// clampID maps an "after" ID onto SQLite's integer range.
func clampID(id ID) int64 {
	if id > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(id)
}

// sortedUnique returns ids sorted, without repeats.
func sortedUnique(ids []ID) []ID {
	return slices.Compact(slices.Sorted(slices.Values(ids)))
}
