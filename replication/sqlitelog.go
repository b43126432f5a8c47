package replication

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/syncproto"
)

// DefaultOplogEntriesPerTenant is the oplog's count bound when
// LogOptions.Retention.MaxEntries is 0: each tenant's newest million
// entries. It is per tenant, so one tenant writing at its quota never
// compacts another tenant's history.
const DefaultOplogEntriesPerTenant = 1_000_000

// DefaultLogRetention is the oplog's retention when LogOptions.Retention
// leaves a field zero: each tenant's newest DefaultOplogEntriesPerTenant
// entries, none older than seven days. It is the window in which a device
// that was offline can resume the change feed from its cursor; after it,
// the device resyncs from a snapshot.
var DefaultLogRetention = Retention{MaxEntries: DefaultOplogEntriesPerTenant, MaxAge: 7 * 24 * time.Hour}

// LogOptions configures a SQLiteLog. The zero value means
// DefaultLogRetention and time.Now.
type LogOptions struct {
	// Retention bounds the log for Compact; zero fields take
	// DefaultLogRetention's. MaxEntries counts each tenant's entries on
	// their own.
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
// Retention is per tenant: oplog_tenants holds each tenant's floor, the
// newest of its seqs compaction removed, and counts its retained entries
// up to oplog_meta.counted. An append leaves the counts alone (a tenant's
// first adds its row): counting in every appending transaction rewrote two
// pages (the row and its entry in the index on counts) in each commit, a
// sixth of a one-write commit's log frames. Compaction first counts what
// was appended since (countTail), in its own transaction, so it decides on
// exact counts, and TenantEntries adds the uncounted entries as it reads.
// Compaction removes a prefix of each tenant's entries and raises that
// tenant's floor only.
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

// NewSQLiteLog returns the oplog kept in db, whose tables Migrate made
// (OpenStore runs it). db must be a go-sqlite3 ("sqlite3") handle; the
// caller keeps owning it.
func NewSQLiteLog(ctx context.Context, db *sql.DB, opts LogOptions) (*SQLiteLog, error) {
	l := &SQLiteLog{
		db:        db,
		retention: opts.Retention.withDefaults(DefaultLogRetention),
		now:       opts.Now,
	}
	if l.now == nil {
		l.now = time.Now
	}
	b, err := l.Bounds(ctx, Scope{AllTenants: true})
	if err != nil {
		return nil, fmt.Errorf("open oplog: %w", err)
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

const appendColumns = `(seq, tenant, model, key, op_id, op, value, version, wall, logical, origin, client_id, applied_at, scope_old, scope_value, member, grants)`

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
	return l.appendAfter(ctx, tx, head, es)
}

// appendAfter is AppendAll with the head tx holds, read by the caller in
// tx.
func (l *SQLiteLog) appendAfter(ctx context.Context, tx *sql.Tx, head uint64, es []Entry) ([]Entry, error) {
	if len(es) == 0 {
		return nil, nil
	}
	out, err := nextEntries(es, head, l.now)
	if err != nil {
		return nil, err
	}
	const perStatement = 500
	for start := 0; start < len(out); start += perStatement {
		chunk := out[start:min(start+perStatement, len(out))]
		args := make([]any, 0, 17*len(chunk))
		for _, e := range chunk {
			grants, err := encodeGrants(e.Grants)
			if err != nil {
				return nil, fmt.Errorf("append oplog entry: %w", err)
			}
			args = append(args, int64(e.Seq), e.Tenant, e.Model, e.Key, e.OpID, string(e.Op), e.Value, int64(e.Version),
				e.HLC.Wall, int64(e.HLC.Logical), e.HLC.Origin, e.ClientID, e.AppliedAt.UnixMilli(),
				nullable(e.ScopeOld), nullable(e.ScopeValue), nullable(e.Member), grants)
		}
		const row = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
		query := `INSERT INTO oplog ` + appendColumns + ` VALUES ` + row + strings.Repeat(`, `+row, len(chunk)-1)
		if _, err := tx.ExecContext(ctx, query, args...); err != nil {
			return nil, fmt.Errorf("append oplog entries: %w", err)
		}
	}
	if err := countAppended(ctx, tx, out); err != nil {
		return nil, fmt.Errorf("append oplog entries: %w", err)
	}
	return out, nil
}

// nextEntries checks es as the entries after head, as every log stores
// them: each valid, their seqs head+1, head+2 and so on. It returns them
// as logged: AppliedAt stamped from now where zero, at millisecond
// precision, in UTC. Errors wrap ErrInvalidEntry.
func nextEntries(es []Entry, head uint64, now func() time.Time) ([]Entry, error) {
	out := make([]Entry, len(es))
	for i, e := range es {
		if err := e.validate(); err != nil {
			return nil, fmt.Errorf("append oplog entry: %w", err)
		}
		if e.Seq != head+1+uint64(i) {
			return nil, fmt.Errorf("append oplog entry: %w: op %s has seq %d, the next is %d", ErrInvalidEntry, e.OpID, e.Seq, head+1+uint64(i))
		}
		if e.AppliedAt.IsZero() {
			e.AppliedAt = now()
		}
		e.AppliedAt = time.UnixMilli(e.AppliedAt.UnixMilli()).UTC()
		out[i] = e
	}
	return out, nil
}

// countAppended gives each tenant of es its row in oplog_tenants, with no
// entries counted, when it has none: one statement per tenant (a batch is
// one tenant's), which changes no page once the row exists. The entries
// themselves are counted by compaction (countTail).
func countAppended(ctx context.Context, tx *sql.Tx, es []Entry) error {
	for i, e := range es {
		if i > 0 && e.Tenant == es[i-1].Tenant {
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO oplog_tenants (tenant, entries) VALUES (?, 0)
			ON CONFLICT (tenant) DO NOTHING`, e.Tenant); err != nil {
			return fmt.Errorf("add tenant %q: %w", e.Tenant, err)
		}
	}
	return nil
}

// countTail adds to each tenant's count in oplog_tenants its entries after
// oplog_meta.counted, and moves counted to the head, in tx: afterwards
// every count is exact. It reads one index entry per tenant and one per
// entry appended since the last count, through the index on (tenant, seq),
// and writes only the rows of tenants that appended. Replicas holding the
// same rows count the same.
func countTail(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `UPDATE oplog_tenants AS t
		SET entries = t.entries + (SELECT count(*) FROM oplog AS o WHERE o.tenant = t.tenant AND o.seq > m.counted)
		FROM oplog_meta AS m
		WHERE m.id = 1 AND EXISTS (SELECT 1 FROM oplog AS o WHERE o.tenant = t.tenant AND o.seq > m.counted)`); err != nil {
		return fmt.Errorf("count appended entries: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE oplog_meta SET counted = h.seq
		FROM (SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'oplog'), 0) AS seq) AS h
		WHERE id = 1 AND counted != h.seq`); err != nil {
		return fmt.Errorf("count appended entries: %w", err)
	}
	return nil
}

// Read returns the committed entries after req.After in req.Scope (see
// Log.Read), the cursor checked against the scope's floor. The cursor
// check and the page come from one read transaction, so a concurrent
// Compact cannot remove entries between them unnoticed.
func (l *SQLiteLog) Read(ctx context.Context, req ReadRequest) (Page, error) {
	limit, maxBytes := req.bounds()
	where, args := scopeWhere(req.Scope)
	query := `SELECT seq, tenant, model, key, op_id, op, value, version, wall, logical, origin, client_id, applied_at,
			coalesce(scope_old, ''), coalesce(scope_value, ''), coalesce(member, ''), grants
		FROM oplog WHERE seq > ?` + where + ` ORDER BY seq LIMIT ?`
	args = append([]any{int64(req.After)}, append(args, limit)...)

	var page Page
	err := readTx(ctx, l.db, func(conn *sql.Conn) error {
		b, err := bounds(ctx, conn, req.Scope)
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
	if err == nil && (req.Scope.Follow != nil || req.Scope.User != "") {
		// What follows scope values is decided here, not in SQL: a moved row
		// becomes an evict entry and a grant change ends the page
		// (ReadRequest.PageOf), over the entries read up to page.Next.
		head := page.Head
		page = req.PageOf(page.Entries, page.Next)
		page.Head = head
	}
	if err != nil {
		return Page{}, fmt.Errorf("read oplog after %d: %w", req.After, err)
	}
	return page, nil
}

// scanEntry reads one row of the Read query.
func scanEntry(rows *sql.Rows) (Entry, error) {
	var (
		e         Entry
		appliedAt int64
		grants    []byte
	)
	err := rows.Scan(&e.Seq, &e.Tenant, &e.Model, &e.Key, &e.OpID, &e.Op, (*[]byte)(&e.Value), &e.Version,
		&e.HLC.Wall, &e.HLC.Logical, &e.HLC.Origin, &e.ClientID, &appliedAt,
		&e.ScopeOld, &e.ScopeValue, &e.Member, &grants)
	e.Deleted = e.Op == syncproto.OpDelete
	e.AppliedAt = time.UnixMilli(appliedAt).UTC()
	if err == nil && grants != nil {
		err = json.Unmarshal(grants, &e.Grants)
	}
	return e, err
}

// encodeGrants is the oplog's grants column: NULL for none, else JSON.
func encodeGrants(g []GrantChange) (any, error) {
	if len(g) == 0 {
		return nil, nil
	}
	return json.Marshal(g)
}

// Bounds returns the retained range of committed entries as a reader of
// scope sees it (see Bounds).
func (l *SQLiteLog) Bounds(ctx context.Context, scope Scope) (Bounds, error) {
	var b Bounds
	err := readTx(ctx, l.db, func(conn *sql.Conn) error {
		var err error
		b, err = bounds(ctx, conn, scope)
		return err
	})
	if err != nil {
		return Bounds{}, fmt.Errorf("read oplog bounds: %w", err)
	}
	return b, nil
}

// Floors returns the floors above seq: the base floor and each tenant's
// own floor above it, read through the index on floor.
func (l *SQLiteLog) Floors(ctx context.Context, above uint64) (Floors, error) {
	f := Floors{Tenants: map[string]uint64{}}
	err := readTx(ctx, l.db, func(conn *sql.Conn) error {
		if err := conn.QueryRowContext(ctx, `SELECT floor FROM oplog_meta WHERE id = 1`).Scan(&f.All); err != nil {
			return err
		}
		rows, err := conn.QueryContext(ctx, `SELECT tenant, floor FROM oplog_tenants WHERE floor > ?`, int64(above))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var tenant string
			var floor uint64
			if err := rows.Scan(&tenant, &floor); err != nil {
				return err
			}
			f.Tenants[tenant] = floor
		}
		return rows.Err()
	})
	if err != nil {
		return Floors{}, fmt.Errorf("read oplog floors: %w", err)
	}
	return f, nil
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
// assigned (which survives compaction), the oldest retained seq, and
// scope's floor: its tenant's (the highest tenant's for every tenant), at
// least the base floor.
func bounds(ctx context.Context, conn *sql.Conn, scope Scope) (Bounds, error) {
	floor := `(SELECT floor FROM oplog_tenants WHERE tenant = ?1)`
	if scope.AllTenants {
		floor = `(SELECT max(floor) FROM oplog_tenants)`
	}
	var (
		head   int64
		oldest sql.NullInt64
		b      Bounds
	)
	err := conn.QueryRowContext(ctx, `SELECT
		coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'oplog'), 0),
		(SELECT min(seq) FROM oplog),
		max((SELECT floor FROM oplog_meta WHERE id = 1), coalesce(`+floor+`, 0))`, scope.Tenant).Scan(&head, &oldest, &b.Floor)
	if err != nil {
		return Bounds{}, err
	}
	b.Head, b.Oldest = uint64(head), uint64(head)+1
	if oldest.Valid {
		b.Oldest = uint64(oldest.Int64)
	}
	return b, nil
}

// Compact removes the oldest entries beyond the retention (see Retention
// and compactChunk), in chunks of Retention.Chunk entries each committed on
// its own, so that writers wait at most one chunk. Readers of a tenant whose
// cursor falls behind that tenant's new floor get ErrCursorExpired and
// resync; other tenants' readers are not affected. It stops when a chunk
// removes less than a full chunk, or once it removed as many entries as the
// log held when it began (what a busy tenant appends meanwhile waits for
// the next call), and returns the number removed, also when ctx ends
// midway.
func (l *SQLiteLog) Compact(ctx context.Context) (int64, error) {
	now := l.now()
	b, err := l.Bounds(ctx, Scope{AllTenants: true})
	if err != nil {
		return 0, fmt.Errorf("compact oplog: %w", err)
	}
	held := int64(b.Head + 1 - b.Oldest)
	var total int64
	for total < held {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("compact oplog: %w", err)
		}
		n, err := l.compactTx(ctx, now, l.retention.Chunk)
		total += n
		if err != nil {
			return total, fmt.Errorf("compact oplog: %w", err)
		}
		if n < int64(l.retention.Chunk) {
			break
		}
	}
	return total, nil
}

// compactTx runs compactChunk in a transaction of its own.
func (l *SQLiteLog) compactTx(ctx context.Context, now time.Time, limit int) (int64, error) {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() // a no-op after Commit
	n, err := l.compactChunk(ctx, tx, now, limit)
	if err != nil {
		return 0, err
	}
	return n, tx.Commit()
}

// CompactIn removes, inside tx, at most limit of the oldest entries beyond
// the retention as of now (see compactChunk), and returns how many it
// removed. It reads no clock: replicas that run it with the same now on the
// same log remove the same entries and raise the same floors (a replicated
// compaction job).
func (l *SQLiteLog) CompactIn(ctx context.Context, tx *sql.Tx, now time.Time, limit int) (int64, error) {
	n, err := l.compactChunk(ctx, tx, now, limit)
	if err != nil {
		return 0, fmt.Errorf("compact oplog: %w", err)
	}
	return n, nil
}

// compactChunk removes, through tx, at most limit entries: first those
// older than the age bound as of now (the longest run of the log's oldest
// entries in which every one is, so an entry whose time is out of order
// stops the run rather than leaving a hole), then, tenant by tenant, the
// oldest entries of each tenant beyond the count bound (the tenants most
// beyond it first, ties by name). Either way every tenant loses a prefix of
// its entries, and its floor rises to the newest seq it lost. It reads
// nothing but the tables and takes every order from them, so replicas
// holding the same rows remove the same rows. It first counts the entries
// appended since the last count (countTail); beyond that its work is
// bounded by limit: it reads the rows it removes, and the tenants beyond
// the bound through the index on their counts.
func (l *SQLiteLog) compactChunk(ctx context.Context, tx *sql.Tx, now time.Time, limit int) (int64, error) {
	if err := countTail(ctx, tx); err != nil {
		return 0, err
	}
	var removed int64
	if l.retention.MaxAge >= 0 {
		n, err := compactAged(ctx, tx, now.Add(-l.retention.MaxAge).UnixMilli(), limit)
		if err != nil {
			return 0, err
		}
		removed += n
	}
	if l.retention.MaxEntries >= 0 && removed < int64(limit) {
		n, err := compactExcess(ctx, tx, l.retention.MaxEntries, int64(limit)-removed)
		if err != nil {
			return 0, err
		}
		removed += n
	}
	return removed, nil
}

// compactAged removes the longest run of the oldest limit entries applied
// before cutoff (Unix milliseconds), and raises the floor of each tenant it
// removed entries of.
func compactAged(ctx context.Context, tx *sql.Tx, cutoff int64, limit int) (int64, error) {
	var last sql.NullInt64
	err := tx.QueryRowContext(ctx, `
		WITH chunk AS (SELECT seq, applied_at FROM oplog ORDER BY seq LIMIT ?1)
		SELECT coalesce((SELECT min(seq) - 1 FROM chunk WHERE applied_at >= ?2), (SELECT max(seq) FROM chunk))`,
		limit, cutoff).Scan(&last)
	if err != nil || !last.Valid {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `
		UPDATE oplog_tenants AS t SET entries = t.entries - d.n, floor = max(t.floor, d.last)
		FROM (SELECT tenant, count(*) AS n, max(seq) AS last FROM oplog WHERE seq <= ?1 GROUP BY tenant) AS d
		WHERE t.tenant = d.tenant`, last.Int64); err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM oplog WHERE seq <= ?`, last.Int64)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// excess is a tenant holding more entries than the count bound.
type excess struct {
	tenant string
	over   int64
}

// compactExcess removes at most limit entries of the tenants beyond keep,
// each tenant's oldest first, and raises their floors.
func compactExcess(ctx context.Context, tx *sql.Tx, keep, limit int64) (int64, error) {
	rows, err := tx.QueryContext(ctx, `SELECT tenant, entries - ?1 FROM oplog_tenants
		WHERE entries > ?1 ORDER BY entries DESC, tenant LIMIT ?2`, keep, limit)
	if err != nil {
		return 0, err
	}
	var over []excess
	for rows.Next() {
		var e excess
		if err := rows.Scan(&e.tenant, &e.over); err != nil {
			rows.Close()
			return 0, err
		}
		over = append(over, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var removed int64
	for _, e := range over {
		if removed == limit {
			break
		}
		n, err := compactTenant(ctx, tx, e.tenant, min(e.over, limit-removed))
		if err != nil {
			return removed, fmt.Errorf("tenant %q: %w", e.tenant, err)
		}
		removed += n
	}
	return removed, nil
}

// compactTenant removes tenant's n oldest entries, through the index on
// (tenant, seq), and raises its floor to the newest of them.
func compactTenant(ctx context.Context, tx *sql.Tx, tenant string, n int64) (int64, error) {
	var last int64
	err := tx.QueryRowContext(ctx, `SELECT seq FROM oplog WHERE tenant = ? ORDER BY seq LIMIT 1 OFFSET ?`, tenant, n-1).Scan(&last)
	if errors.Is(err, sql.ErrNoRows) {
		// The count says more than the table holds (rows removed behind
		// the log's back): count again, and remove nothing this time.
		_, err = tx.ExecContext(ctx, `UPDATE oplog_tenants SET entries = (SELECT count(*) FROM oplog WHERE tenant = ?1) WHERE tenant = ?1`, tenant)
		return 0, err
	}
	if err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM oplog WHERE tenant = ? AND seq <= ?`, tenant, last)
	if err != nil {
		return 0, err
	}
	removed, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	_, err = tx.ExecContext(ctx, `UPDATE oplog_tenants SET entries = entries - ?, floor = max(floor, ?) WHERE tenant = ?`, removed, last, tenant)
	return removed, err
}
