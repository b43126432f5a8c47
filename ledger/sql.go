package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"
)

// schemaVersion is the version of the ledger_ tables this code reads and
// writes, kept in ledger_meta.
const schemaVersion = 1

// schema creates the ledger's tables. Times are unix milliseconds; digest
// and result are BLOBs, stored as zero-length blobs when empty.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS ledger_decisions (
		scope      TEXT    NOT NULL,
		op_id      TEXT    NOT NULL,
		op_time    INTEGER NOT NULL,
		digest     BLOB    NOT NULL,
		result     BLOB    NOT NULL,
		decided_at INTEGER NOT NULL,
		PRIMARY KEY (scope, op_id)
	)`,
	`CREATE INDEX IF NOT EXISTS ledger_decisions_by_op_time ON ledger_decisions (op_time)`,
	// floor_ms is NULL until the first eviction.
	`CREATE TABLE IF NOT EXISTS ledger_meta (
		id             INTEGER PRIMARY KEY CHECK (id = 1),
		schema_version INTEGER NOT NULL,
		floor_ms       INTEGER
	)`,
	`INSERT INTO ledger_meta (id, schema_version, floor_ms) VALUES (1, 1, NULL)
		ON CONFLICT (id) DO NOTHING`,
}

const (
	lookupSQL = `SELECT op_time, digest, result, decided_at FROM ledger_decisions
		WHERE scope = ? AND op_id = ?`
	insertSQL = `INSERT INTO ledger_decisions (scope, op_id, op_time, digest, result, decided_at)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (scope, op_id) DO NOTHING`
	floorSQL = `SELECT floor_ms FROM ledger_meta WHERE id = 1`
)

// SQL is a ledger kept in tables of the caller's SQLite database (tables
// named ledger_*), written inside the caller's transactions. It is safe for
// concurrent use; see the package documentation for the database settings
// the caller must provide.
type SQL struct {
	db   *sql.DB
	opts Options
	// pruneMu serializes Prune calls on this value, so two of them never
	// both evict the same measured excess.
	pruneMu sync.Mutex
}

// NewSQL returns the ledger kept in db, creating its tables if they are
// missing. It refuses invalid options and tables written by a newer schema.
// db must be a SQLite database (driver "sqlite3", github.com/mattn/go-sqlite3)
// opened as the package documentation describes; the ledger never closes it.
func NewSQL(ctx context.Context, db *sql.DB, opts Options) (*SQL, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := createSchema(ctx, db); err != nil {
		return nil, fmt.Errorf("ledger: open: %w", err)
	}
	return &SQL{db: db, opts: o}, nil
}

func createSchema(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op after Commit
	for _, stmt := range schema {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	var version int
	if err := tx.QueryRowContext(ctx, `SELECT schema_version FROM ledger_meta WHERE id = 1`).Scan(&version); err != nil {
		return err
	}
	if version != schemaVersion {
		return fmt.Errorf("ledger tables have schema version %d, this build reads version %d", version, schemaVersion)
	}
	return tx.Commit()
}

// In binds the ledger to the caller's transaction tx, which must be a
// transaction on the database the ledger was opened on: lookups and records
// go through tx and commit or roll back with it. Bind once per transaction and
// use the result only until tx ends; it is not safe for concurrent use.
func (l *SQL) In(tx *sql.Tx) Tx { return &sqlTx{l: l, tx: tx} }

// Get returns the committed decision for (scope, opID), for inspection
// outside any transaction. ok is false when there is none.
func (l *SQL) Get(ctx context.Context, scope, opID string) (d Decision, ok bool, err error) {
	r, ok, err := scanRow(l.db.QueryRowContext(ctx, lookupSQL, scope, opID), scope, opID)
	if err != nil {
		return Decision{}, false, fmt.Errorf("ledger: get %s: %w", opRef(scope, opID), err)
	}
	if !ok {
		return Decision{}, false, nil
	}
	return r.decision(), true, nil
}

// Stats returns the number of committed decisions and the coverage floor,
// read in one statement. Counting scans the op-time index, so on a big
// ledger call it at a metrics-scrape pace, not per request.
func (l *SQL) Stats(ctx context.Context) (Stats, error) {
	var entries int
	var floor sql.NullInt64
	err := l.db.QueryRowContext(ctx,
		`SELECT (SELECT COUNT(*) FROM ledger_decisions), floor_ms FROM ledger_meta WHERE id = 1`,
	).Scan(&entries, &floor)
	if err != nil {
		return Stats{}, fmt.Errorf("ledger: stats: %w", err)
	}
	return Stats{Entries: entries, Floor: floorTime(storedFloor(floor))}, nil
}

// Prune applies retention as of now and returns how many decisions it
// evicted. It evicts every decision whose op time is at or before
// now-MaxAge, then the oldest decisions beyond MaxEntries, in transactions
// of its own of at most PruneChunk decisions each; every chunk raises the
// persisted floor in the same transaction that evicts. When ctx is done it
// stops between chunks and returns the count so far with ctx's error; what
// it evicted stays evicted and covered by the floor.
//
// Prune calls on one *SQL run one at a time. Run Prune from one place per
// database: concurrent Prunes from different processes are safe but may
// evict more than the excess.
func (l *SQL) Prune(ctx context.Context, now time.Time) (evicted int, err error) {
	l.pruneMu.Lock()
	defer l.pruneMu.Unlock()
	return prune(ctx, sqlEvictor{l}, l.opts, now)
}

// sqlEvictor keeps evictOldest and count off SQL's method set.
type sqlEvictor struct{ l *SQL }

func (e sqlEvictor) evictOldest(ctx context.Context, cutoff int64, limit int, raise int64) (int, error) {
	tx, err := e.l.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() // a no-op after Commit
	// The DELETE is the transaction's first statement, so even a deferred
	// BEGIN takes the write lock at once, waiting under busy_timeout,
	// rather than failing on a stale read snapshot.
	rows, err := tx.QueryContext(ctx, `DELETE FROM ledger_decisions WHERE rowid IN (
		SELECT rowid FROM ledger_decisions WHERE op_time <= ? ORDER BY op_time LIMIT ?
	) RETURNING op_time`, cutoff, limit)
	if err != nil {
		return 0, err
	}
	n, newest := 0, raise
	for rows.Next() {
		var t int64
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return 0, err
		}
		n++
		newest = max(newest, t)
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if newest != noFloor {
		if _, err := tx.ExecContext(ctx,
			`UPDATE ledger_meta SET floor_ms = ? WHERE id = 1 AND (floor_ms IS NULL OR floor_ms < ?)`,
			newest, newest); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return n, nil
}

func (e sqlEvictor) count(ctx context.Context) (int, error) {
	var n int
	err := e.l.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM ledger_decisions`).Scan(&n)
	return n, err
}

// sqlTx is the ledger bound to one caller transaction. It prepares its
// statements on first use (they close with the transaction) and reads the
// floor at most once: under SQLite's snapshot isolation the floor cannot
// change within a transaction that goes on to write. A deferred transaction
// that read the floor before a Prune committed fails its first write with
// SQLITE_BUSY (snapshot) instead of recording under the stale floor.
type sqlTx struct {
	l      *SQL
	tx     *sql.Tx
	lookup *sql.Stmt
	insert *sql.Stmt
	floor  int64
	read   bool // floor holds the floor
}

func (s *sqlTx) Lookup(ctx context.Context, scope, opID string, opTime time.Time) (Decision, Outcome, error) {
	skip, err := checkLookup(scope, opID, opTime)
	if skip || err != nil {
		return Decision{}, Miss, err
	}
	d, o, err := s.lookupRow(ctx, scope, opID, opTime)
	if err != nil {
		return Decision{}, Miss, fmt.Errorf("ledger: lookup %s: %w", opRef(scope, opID), err)
	}
	return d, o, nil
}

func (s *sqlTx) lookupRow(ctx context.Context, scope, opID string, opTime time.Time) (Decision, Outcome, error) {
	stmt, err := s.stmt(ctx, &s.lookup, lookupSQL)
	if err != nil {
		return Decision{}, Miss, err
	}
	r, ok, err := scanRow(stmt.QueryRowContext(ctx, scope, opID), scope, opID)
	if err != nil {
		return Decision{}, Miss, err
	}
	if ok {
		return r.decision(), Hit, nil
	}
	floor, err := s.readFloor(ctx)
	if err != nil {
		return Decision{}, Miss, err
	}
	return Decision{}, classifyAbsent(opTime.UnixMilli(), floor), nil
}

func (s *sqlTx) Record(ctx context.Context, d Decision) error {
	if err := checkRecord(d); err != nil {
		return err
	}
	floor, err := s.readFloor(ctx)
	if err != nil {
		return fmt.Errorf("ledger: record %s: %w", opRef(d.Scope, d.OpID), err)
	}
	r, err := newRow(d, floor, s.l.opts.Now)
	if err != nil {
		return err
	}
	inserted, err := s.insertRow(ctx, r)
	if err != nil {
		return fmt.Errorf("ledger: record %s: %w", opRef(d.Scope, d.OpID), err)
	}
	if !inserted {
		return alreadyDecided(r.scope, r.opID)
	}
	return nil
}

func (s *sqlTx) insertRow(ctx context.Context, r row) (inserted bool, err error) {
	stmt, err := s.stmt(ctx, &s.insert, insertSQL)
	if err != nil {
		return false, err
	}
	res, err := stmt.ExecContext(ctx, r.scope, r.opID, r.opMs, blob(r.digest), blob(r.result), r.decidedMs)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func (s *sqlTx) readFloor(ctx context.Context) (int64, error) {
	if s.read {
		return s.floor, nil
	}
	var f sql.NullInt64
	if err := s.tx.QueryRowContext(ctx, floorSQL).Scan(&f); err != nil {
		return 0, err
	}
	s.floor, s.read = storedFloor(f), true
	return s.floor, nil
}

// stmt returns *slot, preparing query in the transaction on first use.
func (s *sqlTx) stmt(ctx context.Context, slot **sql.Stmt, query string) (*sql.Stmt, error) {
	if *slot == nil {
		st, err := s.tx.PrepareContext(ctx, query)
		if err != nil {
			return nil, err
		}
		*slot = st
	}
	return *slot, nil
}

// scanRow reads one lookupSQL result; ok is false when there was no row.
func scanRow(sc *sql.Row, scope, opID string) (r row, ok bool, err error) {
	r = row{scope: scope, opID: opID}
	err = sc.Scan(&r.opMs, &r.digest, &r.result, &r.decidedMs)
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, false, nil
	}
	if err != nil {
		return row{}, false, err
	}
	r.digest, r.result = nilIfEmpty(r.digest), nilIfEmpty(r.result)
	return r, true, nil
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func storedFloor(f sql.NullInt64) int64 {
	if !f.Valid {
		return noFloor
	}
	return f.Int64
}

// blob is b as a bind argument for a NOT NULL BLOB column: the driver binds
// a nil slice as NULL.
func blob(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
