package replication

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// DefaultLogRetention is the oplog's retention when LogOptions.Retention
// leaves a field zero: the newest million entries, none older than seven
// days. It is the window in which a device that was offline can resume the
// change feed from its cursor; after it, the device resyncs from a snapshot.
var DefaultLogRetention = Retention{MaxEntries: 1_000_000, MaxAge: 7 * 24 * time.Hour}

// LogOptions configures a SQLiteLog. The zero value means
// DefaultLogRetention and time.Now.
type LogOptions struct {
	// Retention bounds the log for Compact; zero fields take
	// DefaultLogRetention's.
	Retention Retention
	// Now stamps AppliedAt and is the reference for age-based compaction;
	// nil means time.Now.
	Now func() time.Time
}

// SQLiteLog is the Log kept in a table (oplog) of the server's SQLite
// database, beside the records, so that an entry and the record it changes
// commit together.
//
// Seqs come from SQLite's AUTOINCREMENT: assigned inside the appending
// transaction, so a rollback takes its seqs with it (no gap), and never
// reused or lowered, even after every entry was compacted. SQLite admits
// one writer at a time, so transactions commit in seq order and a reader
// never sees entry n+1 without entry n.
//
// A SQLiteLog is safe for concurrent use. The database handle stays the
// caller's; the log never closes it.
type SQLiteLog struct {
	notifier  *headNotifier
	db        *sql.DB
	retention Retention
	now       func() time.Time
}

var _ Log = (*SQLiteLog)(nil)

const oplogSchema = `
CREATE TABLE IF NOT EXISTS oplog (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	tenant     TEXT    NOT NULL,
	model      TEXT    NOT NULL,
	key        TEXT    NOT NULL,
	op_id      TEXT    NOT NULL,
	op         TEXT    NOT NULL CHECK (op IN ('put', 'delete')),
	value      BLOB,
	version    INTEGER NOT NULL CHECK (version > 0),
	wall       INTEGER NOT NULL,
	logical    INTEGER NOT NULL,
	origin     TEXT    NOT NULL,
	client_id  TEXT    NOT NULL,
	applied_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS oplog_tenant_seq ON oplog (tenant, seq);`

// NewSQLiteLog creates the oplog table in db if missing and returns the log.
// db must be a go-sqlite3 ("sqlite3") handle; the caller keeps owning it.
func NewSQLiteLog(ctx context.Context, db *sql.DB, opts LogOptions) (*SQLiteLog, error) {
	if _, err := db.ExecContext(ctx, oplogSchema); err != nil {
		return nil, fmt.Errorf("create oplog: %w", err)
	}
	l := &SQLiteLog{
		db:        db,
		retention: opts.Retention.withDefaults(DefaultLogRetention),
		now:       opts.Now,
	}
	if l.now == nil {
		l.now = time.Now
	}
	b, err := l.Bounds(ctx)
	if err != nil {
		return nil, fmt.Errorf("create oplog: %w", err)
	}
	l.notifier = newHeadNotifier(b.Head)
	return l, nil
}

// Committed reports that a transaction holding appends up to head has
// committed and wakes the waiters (see Log.Committed). Call it after the
// commit, never before.
func (l *SQLiteLog) Committed(head uint64) { l.notifier.Committed(head) }

// Notify returns a channel closed once a commit beyond after was reported
// (see Log.Notify).
func (l *SQLiteLog) Notify(after uint64) <-chan struct{} { return l.notifier.Notify(after) }

// Wait blocks until a commit beyond after was reported, or ctx ends (see
// Log.Wait).
func (l *SQLiteLog) Wait(ctx context.Context, after uint64) error { return l.notifier.Wait(ctx, after) }

const appendColumns = `(seq, tenant, model, key, op_id, op, value, version, wall, logical, origin, client_id, applied_at)`

// Append adds e as the next entry within tx (see Log.Append); e.Seq must
// be 0: the log assigns it. An entry whose AppliedAt is set keeps it; a
// zero AppliedAt is stamped from the log's clock. Errors wrap
// ErrInvalidEntry for a malformed entry, or are SQLite's; either way the
// caller rolls tx back.
func (l *SQLiteLog) Append(ctx context.Context, tx *sql.Tx, e Entry) (Entry, error) {
	if e.Seq != 0 {
		return Entry{}, fmt.Errorf("append oplog entry: %w: op %s: seq is assigned by the log", ErrInvalidEntry, e.OpID)
	}
	head, err := l.head(ctx, tx)
	if err != nil {
		return Entry{}, fmt.Errorf("append oplog entry: %w", err)
	}
	e.Seq = head + 1
	out, err := l.AppendAll(ctx, tx, []Entry{e})
	if err != nil {
		return Entry{}, err
	}
	return out[0], nil
}

// AppendAll adds es within tx in one statement per few hundred entries.
// Their seqs are the caller's (the state machine assigns them when it
// decides): consecutive, the first one more than the head. It returns es
// with AppliedAt stamped where it was zero. Errors wrap ErrInvalidEntry,
// or are SQLite's; either way the caller rolls tx back.
func (l *SQLiteLog) AppendAll(ctx context.Context, tx *sql.Tx, es []Entry) ([]Entry, error) {
	if len(es) == 0 {
		return nil, nil
	}
	head, err := l.head(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("append oplog entries: %w", err)
	}
	out := make([]Entry, len(es))
	for i, e := range es {
		if err := e.validate(); err != nil {
			return nil, fmt.Errorf("append oplog entry: %w", err)
		}
		if e.Seq != head+1+uint64(i) {
			return nil, fmt.Errorf("append oplog entry: %w: op %s has seq %d, the next is %d", ErrInvalidEntry, e.OpID, e.Seq, head+1+uint64(i))
		}
		if e.AppliedAt.IsZero() {
			e.AppliedAt = l.now()
		}
		e.AppliedAt = time.UnixMilli(e.AppliedAt.UnixMilli()).UTC()
		out[i] = e
	}
	const perStatement = 500
	for start := 0; start < len(out); start += perStatement {
		chunk := out[start:min(start+perStatement, len(out))]
		args := make([]any, 0, 13*len(chunk))
		for _, e := range chunk {
			args = append(args, int64(e.Seq), e.Tenant, e.Model, e.Key, e.OpID, string(e.Op), e.Value, int64(e.Version),
				e.HLC.Wall, int64(e.HLC.Logical), e.HLC.Origin, e.ClientID, e.AppliedAt.UnixMilli())
		}
		query := `INSERT INTO oplog ` + appendColumns + ` VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)` +
			strings.Repeat(`, (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, len(chunk)-1)
		if _, err := tx.ExecContext(ctx, query, args...); err != nil {
			return nil, fmt.Errorf("append oplog entries: %w", err)
		}
	}
	return out, nil
}

// Read returns the committed entries after req.After in req.Scope (see
// Log.Read). The cursor check and the page come from one read transaction,
// so a concurrent Compact cannot remove entries between them unnoticed.
func (l *SQLiteLog) Read(ctx context.Context, req ReadRequest) (Page, error) {
	limit, maxBytes := req.bounds()
	where, args := scopeWhere(req.Scope)
	query := `SELECT seq, tenant, model, key, op_id, op, value, version, wall, logical, origin, client_id, applied_at
		FROM oplog WHERE seq > ?` + where + ` ORDER BY seq LIMIT ?`
	args = append([]any{int64(req.After)}, append(args, limit)...)

	var page Page
	err := readTx(ctx, l.db, func(conn *sql.Conn) error {
		b, err := bounds(ctx, conn)
		if err != nil {
			return err
		}
		if err := b.Check(req.After); err != nil {
			return err
		}
		page = Page{Head: b.Head, Next: b.Head}
		rows, err := conn.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		size := 0
		for rows.Next() {
			e, err := scanEntry(rows)
			if err != nil {
				return err
			}
			if len(page.Entries) > 0 && size+len(e.Value) > maxBytes {
				page.Next = page.Entries[len(page.Entries)-1].Seq
				return nil
			}
			size += len(e.Value)
			page.Entries = append(page.Entries, e)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(page.Entries) == limit {
			page.Next = page.Entries[len(page.Entries)-1].Seq
		}
		return nil
	})
	if err != nil {
		return Page{}, fmt.Errorf("read oplog after %d: %w", req.After, err)
	}
	return page, nil
}

// scanEntry reads one row of the Read query.
func scanEntry(rows *sql.Rows) (Entry, error) {
	var (
		e         Entry
		op        string
		appliedAt int64
	)
	err := rows.Scan(&e.Seq, &e.Tenant, &e.Model, &e.Key, &e.OpID, &op, &e.Value, &e.Version,
		&e.HLC.Wall, &e.HLC.Logical, &e.HLC.Origin, &e.ClientID, &appliedAt)
	e.Op = Op(op)
	e.Deleted = e.Op == OpDelete
	e.AppliedAt = time.UnixMilli(appliedAt).UTC()
	return e, err
}

// Bounds returns the retained range of committed entries.
func (l *SQLiteLog) Bounds(ctx context.Context) (Bounds, error) {
	var b Bounds
	err := readTx(ctx, l.db, func(conn *sql.Conn) error {
		var err error
		b, err = bounds(ctx, conn)
		return err
	})
	if err != nil {
		return Bounds{}, fmt.Errorf("read oplog bounds: %w", err)
	}
	return b, nil
}

// head reads the newest seq ever assigned, as tx sees it.
func (l *SQLiteLog) head(ctx context.Context, tx *sql.Tx) (uint64, error) {
	var head int64
	err := tx.QueryRowContext(ctx, `SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'oplog'), 0)`).Scan(&head)
	if err != nil {
		return 0, fmt.Errorf("read oplog head: %w", err)
	}
	return uint64(head), nil
}

// bounds reads the head from SQLite's record of the largest seq ever
// assigned (which survives compaction) and the oldest retained seq.
func bounds(ctx context.Context, conn *sql.Conn) (Bounds, error) {
	var (
		head   int64
		oldest sql.NullInt64
	)
	err := conn.QueryRowContext(ctx, `SELECT
		coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'oplog'), 0),
		(SELECT min(seq) FROM oplog)`).Scan(&head, &oldest)
	if err != nil {
		return Bounds{}, err
	}
	b := Bounds{Head: uint64(head), Oldest: uint64(head) + 1}
	if oldest.Valid {
		b.Oldest = uint64(oldest.Int64)
	}
	return b, nil
}

// Compact removes the oldest entries beyond the retention (see Retention),
// in chunks each committed on its own so that writers wait at most one
// chunk. Readers whose cursor falls behind the new oldest entry get
// ErrCursorExpired and resync. It returns the number of entries removed,
// also when ctx ends midway.
func (l *SQLiteLog) Compact(ctx context.Context) (int64, error) {
	n, err := pruneOldest(ctx, l.db, oplogTable, l.retention, l.now())
	if err != nil {
		return n, fmt.Errorf("compact oplog: %w", err)
	}
	return n, nil
}

// CompactIn removes, inside tx, at most limit of the oldest entries beyond
// the retention as of now, and returns how many it removed. It reads no
// clock: replicas that run it with the same now on the same log remove
// the same entries (a replicated compaction job).
func (l *SQLiteLog) CompactIn(ctx context.Context, tx *sql.Tx, now time.Time, limit int) (int64, error) {
	n, err := pruneChunk(ctx, tx, oplogTable, l.retention, now, limit)
	if err != nil {
		return 0, fmt.Errorf("compact oplog: %w", err)
	}
	return n, nil
}

var oplogTable = pruneTable{table: "oplog", id: "seq", at: "applied_at"}
