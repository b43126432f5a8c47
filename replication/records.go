package replication

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/syncd-dev/syncd/syncproto"
)

// Errors of Records.Put and Records.Apply. Both mean the caller's
// transaction holds an inconsistent write: roll it back. Nothing of it is
// durable.
var (
	// ErrVersionGap: the record's version is not exactly one more than the
	// stored version (absent counts as 0). The decision was made against a
	// stale read of the record.
	ErrVersionGap = errors.New("record version is not the stored version plus one")
	// ErrSeqNotNewer: Put was given a record whose seq is not beyond every
	// seq already applied to the store.
	ErrSeqNotNewer = errors.New("record seq not beyond the applied seq")
	// ErrInvalidRecord: the record is malformed (empty model or key,
	// version or seq 0, a zero HLC, a tombstone with a value).
	ErrInvalidRecord = errors.New("invalid record")
)

// Records is the current state of every key, in a table (records) of the
// server's SQLite database, plus the seq of the last oplog entry applied to
// it (the head a snapshot is consistent with).
//
// Writes go through the caller's transaction. Versions are guarded in the
// store itself: a write whose version is not the stored one plus one fails
// with ErrVersionGap, so versions per key have no gaps and no repeats.
//
// A Records is safe for concurrent use. The database handle stays the
// caller's.
type Records struct {
	db *sql.DB
}

// NewRecords returns the records kept in db, whose tables Migrate made
// (OpenStore runs it). db must be a go-sqlite3 ("sqlite3") handle.
func NewRecords(ctx context.Context, db *sql.DB) (*Records, error) {
	return &Records{db: db}, nil
}

// recordColumns are the columns a record is written with; recordSelect
// reads them back, the scope columns' NULL (no scope) as "".
const (
	recordColumns = `tenant, model, key, value, version, wall, logical, origin, deleted, op_id, seq, scope_value, member`
	recordSelect  = `tenant, model, key, value, version, wall, logical, origin, deleted, op_id, seq, coalesce(scope_value, ''), coalesce(member, '')`
)

// nullable stores "" as NULL.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Get returns the record of (tenant, model, key) as seen by tx, and whether
// it exists (a tombstone exists). A missing key is not an error.
func (r *Records) Get(ctx context.Context, tx *sql.Tx, tenant, model, key string) (Record, bool, error) {
	return getRecord(ctx, tx, tenant, model, key)
}

// Current returns the committed record of (tenant, model, key) and whether
// it exists, outside any write transaction (a CurrentFunc for
// Resolver.AskHooks).
func (r *Records) Current(ctx context.Context, tenant, model, key string) (Record, bool, error) {
	return getRecord(ctx, r.db, tenant, model, key)
}

// getRecord reads one record through q (a transaction or the handle).
func getRecord(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, tenant, model, key string) (Record, bool, error) {
	row := q.QueryRowContext(ctx, `SELECT `+recordSelect+` FROM records
		WHERE tenant = ? AND model = ? AND key = ?`, tenant, model, key)
	rec, err := scanRecord(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("get record %s/%s: %w", model, key, err)
	}
	return rec, true, nil
}

// Put stores rec as the key's state within tx and advances the store's
// applied seq to rec.Seq (see PutAll).
func (r *Records) Put(ctx context.Context, tx *sql.Tx, rec Record) error {
	return r.PutAll(ctx, tx, []Record{rec})
}

// PutAll stores recs, in order, as their keys' states within tx, and
// advances the store's applied seq to the last one's seq. Their seqs must
// increase and all be beyond every seq applied before (ErrSeqNotNewer);
// each version must be its key's stored version plus one, a key written
// twice in recs counting its first write (ErrVersionGap). On any error the
// caller rolls tx back.
func (r *Records) PutAll(ctx context.Context, tx *sql.Tx, recs []Record) error {
	return r.put(ctx, tx, recs, insertNew)
}

// putLogged is PutAll for the records of entries that tx has just appended
// to the oplog (SQLiteLog.AppendAll, which checks that their seqs follow
// one another): SQLite copies new keys from their oplog rows instead of
// taking every column as a bind argument again. The rows are the same.
func (r *Records) putLogged(ctx context.Context, tx *sql.Tx, recs []Record) error {
	return r.put(ctx, tx, recs, insertLogged)
}

// put is PutAll, creating runs of new keys with insert.
func (r *Records) put(ctx context.Context, tx *sql.Tx, recs []Record, insert func(context.Context, *sql.Tx, []Record) error) error {
	if len(recs) == 0 {
		return nil
	}
	for i, rec := range recs {
		if err := rec.validate(); err != nil {
			return fmt.Errorf("put record %s/%s v%d: %w", rec.Model, rec.Key, rec.Version, err)
		}
		if i > 0 && rec.Seq <= recs[i-1].Seq {
			return fmt.Errorf("put record %s/%s v%d: %w: seq %d after %d", rec.Model, rec.Key, rec.Version, ErrSeqNotNewer, rec.Seq, recs[i-1].Seq)
		}
	}
	first, last := recs[0], recs[len(recs)-1]
	res, err := tx.ExecContext(ctx, advanceSQL, int64(last.Seq), int64(first.Seq))
	if err != nil {
		return fmt.Errorf("put records: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err == nil {
			err = fmt.Errorf("%w: seq %d", ErrSeqNotNewer, first.Seq)
		}
		return fmt.Errorf("put record %s/%s v%d: %w", first.Model, first.Key, first.Version, err)
	}
	for start := 0; start < len(recs); {
		if recs[start].Version != 1 {
			if err := update(ctx, tx, recs[start]); err != nil {
				return fmt.Errorf("put record %s/%s v%d: %w", recs[start].Model, recs[start].Key, recs[start].Version, err)
			}
			start++
			continue
		}
		end := start + 1
		for end < len(recs) && end-start < insertChunk && recs[end].Version == 1 {
			end++
		}
		if err := insert(ctx, tx, recs[start:end]); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// insertChunk is how many new keys one INSERT of PutAll creates: with
// insertNew, 14 bind variables each, well under SQLite's bound on them.
const insertChunk = 500

const (
	// advanceSQL moves the applied seq to ?1 when it is below ?2.
	advanceSQL = `UPDATE records_state SET applied_seq = ?1 WHERE id = 1 AND applied_seq < ?2`
	// insertNew's INSERT creates version 1 of absent keys, a run of them
	// in one statement; an existing key changes nothing (a version gap).
	// updateSQL replaces only the version just below. Plain statements
	// rather than one upsert reading its own table: that form made SQLite
	// build a temporary table per write.
	insertSQL = `INSERT INTO records (` + recordColumns + `, hlc) VALUES `
	insertRow = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	updateSQL = `UPDATE records SET value = ?4, version = ?5, wall = ?6, logical = ?7, origin = ?8,
		deleted = ?9, op_id = ?10, seq = ?11, scope_value = ?12, member = ?13, hlc = ?14
	WHERE tenant = ?1 AND model = ?2 AND key = ?3 AND version + 1 = ?5`
)

// update writes rec, version 2 or more, over the version just below.
func update(ctx context.Context, tx *sql.Tx, rec Record) error {
	res, err := tx.ExecContext(ctx, updateSQL,
		rec.Tenant, rec.Model, rec.Key, rec.Value, int64(rec.Version),
		rec.HLC.Wall, int64(rec.HLC.Logical), rec.HLC.Origin, rec.Deleted, rec.OpID, int64(rec.Seq),
		nullable(rec.ScopeValue), nullable(rec.Member), rec.HLC.String())
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrVersionGap
	}
	return nil
}

// insertNew creates recs, all version 1, in one statement (see
// execInsert).
func insertNew(ctx context.Context, tx *sql.Tx, recs []Record) error {
	args := make([]any, 0, 14*len(recs))
	for _, rec := range recs {
		args = append(args, rec.Tenant, rec.Model, rec.Key, rec.Value, int64(rec.Version),
			rec.HLC.Wall, int64(rec.HLC.Logical), rec.HLC.Origin, rec.Deleted, rec.OpID, int64(rec.Seq),
			nullable(rec.ScopeValue), nullable(rec.Member), rec.HLC.String())
	}
	query := insertSQL + insertRow + strings.Repeat(", "+insertRow, len(recs)-1) + ` ON CONFLICT (tenant, model, key) DO NOTHING`
	return execInsert(ctx, tx, recs, query, args...)
}

// insertLoggedSQL copies the oplog rows ?1 to ?2 into records as version
// 1 of their keys: the columns PutAll binds, the hlc's text
// (Timestamp.String) and deleted computed from them. A row of another
// version is not copied, so the count fails the call.
const insertLoggedSQL = `INSERT INTO records (` + recordColumns + `, hlc)
	SELECT tenant, model, key, value, version, wall, logical, origin, op = 'delete', op_id, seq,
		scope_value, member, wall || '.' || logical || '.' || origin
	FROM oplog WHERE seq BETWEEN ?1 AND ?2 AND version = 1 ORDER BY seq
	ON CONFLICT (tenant, model, key) DO NOTHING`

// insertLogged creates recs, all version 1, from their oplog rows (see
// putLogged), or binds them (insertNew) if their seqs do not follow one
// another.
func insertLogged(ctx context.Context, tx *sql.Tx, recs []Record) error {
	first, last := recs[0].Seq, recs[len(recs)-1].Seq
	if last-first != uint64(len(recs)-1) {
		return insertNew(ctx, tx, recs)
	}
	return execInsert(ctx, tx, recs, insertLoggedSQL, int64(first), int64(last))
}

// execInsert runs query, which inserts recs (all version 1) with ON
// CONFLICT DO NOTHING. A key that exists already (or twice in recs) is not
// inserted, and fails the call with ErrVersionGap naming it.
func execInsert(ctx context.Context, tx *sql.Tx, recs []Record, query string, args ...any) error {
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("put %d new records: %w", len(recs), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("put %d new records: %w", len(recs), err)
	}
	if int(n) == len(recs) {
		return nil
	}
	// Name the first record not stored as given (seqs are unique): its
	// key existed.
	for _, rec := range recs {
		var seq uint64
		err := tx.QueryRowContext(ctx, `SELECT seq FROM records WHERE tenant = ? AND model = ? AND key = ?`,
			rec.Tenant, rec.Model, rec.Key).Scan(&seq)
		if err != nil || seq != rec.Seq {
			return fmt.Errorf("put record %s/%s v%d: %w", rec.Model, rec.Key, rec.Version, ErrVersionGap)
		}
	}
	return fmt.Errorf("put %d new records: %w", len(recs), ErrVersionGap)
}

// GetAll returns the records of keys in tenant, as seen by tx, for those
// that exist (tombstones included), in one query per few hundred keys.
func (r *Records) GetAll(ctx context.Context, tx *sql.Tx, tenant string, keys []RecordKey) (map[RecordKey]Record, error) {
	out := make(map[RecordKey]Record, len(keys))
	const perQuery = 400
	for start := 0; start < len(keys); start += perQuery {
		chunk := keys[start:min(start+perQuery, len(keys))]
		args := make([]any, 0, 1+2*len(chunk))
		args = append(args, tenant)
		for _, k := range chunk {
			args = append(args, k.Model, k.Key)
		}
		query := `SELECT ` + recordSelect + ` FROM records WHERE tenant = ? AND (model, key) IN (VALUES (?, ?)` +
			strings.Repeat(", (?, ?)", len(chunk)-1) + `)`
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return nil, fmt.Errorf("get records: %w", err)
		}
		for rows.Next() {
			rec, err := scanRecord(rows)
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("get records: %w", err)
			}
			out[RecordKey{rec.Model, rec.Key}] = rec
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("get records: %w", err)
		}
	}
	return out, nil
}

// validate checks a record about to be stored.
func (rec Record) validate() error {
	var problem string
	switch {
	case rec.Model == "" || rec.Key == "":
		problem = "empty model or key"
	case rec.Version == 0:
		problem = "version 0"
	case rec.Seq == 0:
		problem = "seq 0"
	case rec.HLC.IsZero():
		problem = "zero hlc"
	case rec.Deleted && rec.Value != nil:
		problem = "tombstone with a value"
	default:
		return nil
	}
	return fmt.Errorf("%w: %s/%s: %s", ErrInvalidRecord, rec.Model, rec.Key, problem)
}

// Snapshot streams every record in scope to fn, ordered by tenant, model
// and key, from one consistent read, and returns the head it reflects: the
// seq of the last oplog entry applied to it. A reader that loads the
// snapshot and then follows the oplog from head misses nothing and sees
// nothing twice. Tombstones are included (Deleted set), so a reader can
// drop keys deleted since it last synced.
//
// fn gets the head with every record; when fn returns an error the stream
// stops and Snapshot returns it. Rows are read one at a time, never all at
// once. The read transaction stays open while fn runs: it does not block
// writers, but a slow fn holds back WAL checkpoints, so fn should not wait
// on anything unbounded.
func (r *Records) Snapshot(ctx context.Context, scope Scope, fn func(head uint64, rec Record) error) (uint64, error) {
	query, args := recordsSelect(recordSelect, "1 = 1", scope)
	query += ` ORDER BY 1, 2, 3` // tenant, model, key
	head, err := snapshotRows(ctx, r.db, query, args, func(head uint64, rows *sql.Rows) error {
		rec, err := scanRecord(rows)
		if err != nil {
			return err
		}
		return fn(head, rec)
	})
	if err != nil {
		return 0, fmt.Errorf("snapshot records: %w", err)
	}
	return head, nil
}

// SnapshotMmapBytes is how much of the database file a connection serving
// SnapshotLive maps into memory (PRAGMA mmap_size; address space, not
// memory: the pages are the operating system's page cache). A scoped
// snapshot reads the rows of one scope value, spread over the whole table
// (one page each, found through records_scope); mapped, a page costs a
// memory access instead of a read system call and a copy into SQLite's
// own cache, which holds only about 500 pages per connection. Parts of a
// larger file are read the ordinary way.
const SnapshotMmapBytes = 1 << 30

var snapshotMmap = fmt.Sprintf("PRAGMA mmap_size = %d", SnapshotMmapBytes)

// LiveRecord is one live record as SnapshotLive streams it: what a client
// bootstrapping from a snapshot needs of it, nothing more.
type LiveRecord struct {
	Model, Key string
	// Value points into the database driver's row: it is valid only until
	// the callback returns.
	Value   []byte
	Version uint64
	HLC     syncproto.Timestamp
	// ScopeValue is the record's scope value, "" when its model has none.
	ScopeValue string
}

// SnapshotLive is Snapshot without the tombstones, read through db,
// another handle on the same database file (a pool of its own, so that
// slow snapshot readers never hold the connections everything else
// needs). It is the path of a snapshot served to a device, so it reads
// only the columns a device gets and hands fn one LiveRecord it reuses
// for every row: no copy of a value, no allocation per row beyond the
// driver's own.
func (r *Records) SnapshotLive(ctx context.Context, db *sql.DB, scope Scope, fn func(head uint64, rec *LiveRecord) error) (uint64, error) {
	query, args := recordsSelect(`model, key, value, version, wall, logical, origin, coalesce(scope_value, '')`, "deleted = 0", scope)
	if scope.Follow == nil {
		query += ` ORDER BY tenant, model, key`
	}
	var (
		rec   LiveRecord
		value sql.RawBytes
	)
	head, err := snapshotRows(ctx, db, query, args, func(head uint64, rows *sql.Rows) error {
		if err := rows.Scan(&rec.Model, &rec.Key, &value, &rec.Version, &rec.HLC.Wall, &rec.HLC.Logical, &rec.HLC.Origin, &rec.ScopeValue); err != nil {
			return err
		}
		rec.Value = value
		return fn(head, &rec)
	}, snapshotMmap)
	if err != nil {
		return 0, fmt.Errorf("snapshot live records: %w", err)
	}
	return head, nil
}

// snapshotRows runs query in one read transaction on db (after setup, see
// readTx) and calls fn on each row with the head the read reflects.
func snapshotRows(ctx context.Context, db *sql.DB, query string, args []any, fn func(head uint64, rows *sql.Rows) error, setup ...string) (uint64, error) {
	var head uint64
	err := readTx(ctx, db, func(conn *sql.Conn) error {
		if err := conn.QueryRowContext(ctx, `SELECT applied_seq FROM records_state WHERE id = 1`).Scan(&head); err != nil {
			return err
		}
		rows, err := conn.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := fn(head, rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}, setup...)
	return head, err
}

// scanRecord reads the recordColumns of one row.
func scanRecord(row interface{ Scan(...any) error }) (Record, error) {
	var rec Record
	err := row.Scan(&rec.Tenant, &rec.Model, &rec.Key, &rec.Value, &rec.Version,
		&rec.HLC.Wall, &rec.HLC.Logical, &rec.HLC.Origin, &rec.Deleted, &rec.OpID, &rec.Seq, &rec.ScopeValue, &rec.Member)
	return rec, err
}

// Grants returns the scope values user holds in tenant through live rows
// of membership models (scopes' Membership): the grants a principal's
// token does not carry. Token grants are the caller's to add.
func (r *Records) Grants(ctx context.Context, tenant, user string, scopes *Scopes) (syncproto.ScopeSet, error) {
	grants, _, err := r.GrantsAt(ctx, tenant, user, scopes)
	return grants, err
}

// ScopePage is one page of a scope value's live records (ReadScopeValue):
// what a backfill sends.
type ScopePage struct {
	Records []Record
	// At is the seq of the last entry applied to the records read: the page
	// is the value's state at At.
	At uint64
	// Last is the position after the page's last record ("model/key"), to
	// read the next page from; "" when the page is empty.
	Last string
	// Done reports that no record of the value follows Last.
	Done bool
	// Member reports whether the user ReadScopeValue was given holds the
	// value through a live membership row at At (token grants aside).
	Member bool
}

// ReadScopeValue reads, in one read transaction, the live records of scope
// value of d in tenant after position after ("" from the start; a
// ScopePage.Last), in (model, key) order: at most maxRows records and
// about maxBytes of values (at least one record). It also answers whether
// user holds value through membership at the same seq, so a backfill sends
// nothing read after its reader lost the grant.
func (r *Records) ReadScopeValue(ctx context.Context, db *sql.DB, tenant, user string, d *ScopeDecl, value, after string, maxRows, maxBytes int) (ScopePage, error) {
	if db == nil {
		db = r.db
	}
	models := make([]string, 0, len(d.Fields))
	for m := range d.Fields {
		models = append(models, m)
	}
	afterModel, afterKey, _ := strings.Cut(after, "/")
	args := []any{tenant, value, afterModel, afterKey}
	for _, m := range models {
		args = append(args, m)
	}
	args = append(args, maxRows+1)
	query := `SELECT ` + recordSelect + ` FROM records
		WHERE tenant = ? AND scope_value = ? AND deleted = 0 AND (model, key) > (?, ?)
		AND model IN (?` + strings.Repeat(",?", len(models)-1) + `) ORDER BY model, key LIMIT ?`
	var page ScopePage
	err := readTx(ctx, db, func(conn *sql.Conn) error {
		if err := conn.QueryRowContext(ctx, `SELECT applied_seq FROM records_state WHERE id = 1`).Scan(&page.At); err != nil {
			return err
		}
		if m := d.Membership; m != nil && user != "" {
			err := conn.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM records
				WHERE tenant = ? AND member = ? AND model = ? AND scope_value = ? AND deleted = 0)`,
				tenant, user, m.Model, value).Scan(&page.Member)
			if err != nil {
				return err
			}
		}
		rows, err := conn.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		size := 0
		page.Done = true
		for rows.Next() {
			rec, err := scanRecord(rows)
			if err != nil {
				return err
			}
			if len(page.Records) == maxRows || len(page.Records) > 0 && size+len(rec.Value) > maxBytes {
				page.Done = false
				break
			}
			size += len(rec.Value)
			page.Records = append(page.Records, rec)
		}
		return rows.Err()
	})
	if err != nil {
		return ScopePage{}, fmt.Errorf("read scope %s value %q: %w", d.Name, value, err)
	}
	if n := len(page.Records); n > 0 {
		page.Last = page.Records[n-1].Model + "/" + page.Records[n-1].Key
	}
	return page, nil
}

// Reindex brings every record's scope value and member in line with
// scopes, when they were computed under other declarations (or none): a
// scope declared, changed or dropped after records were written. It runs
// in one transaction at open, once per change of the declarations (their
// String form is kept in records_state), and costs one pass over the
// records of the models either the old or the new declarations cover.
// Every node of a cluster reindexes the same records the same way.
func (r *Records) Reindex(ctx context.Context, scopes *Scopes) (reindexed int, err error) {
	want := scopes.String()
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("reindex scopes: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	var have string
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(scope_decl, '') FROM records_state WHERE id = 1`).Scan(&have); err != nil {
		return 0, fmt.Errorf("reindex scopes: %w", err)
	}
	if have == want {
		return 0, nil
	}
	rows, err := tx.QueryContext(ctx, `SELECT tenant, model, key, value, coalesce(scope_value, ''), coalesce(member, '')
		FROM records WHERE scope_value IS NOT NULL OR member IS NOT NULL OR model IN (SELECT value FROM json_each(?))`, modelsJSON(scopes))
	if err != nil {
		return 0, fmt.Errorf("reindex scopes: %w", err)
	}
	type change struct{ tenant, model, key, value, member string }
	var changes []change
	for rows.Next() {
		var c change
		var value []byte
		var oldValue, oldMember string
		if err := rows.Scan(&c.tenant, &c.model, &c.key, &value, &oldValue, &oldMember); err != nil {
			rows.Close()
			return 0, fmt.Errorf("reindex scopes: %w", err)
		}
		if d := scopes.Of(c.model); d != nil && value != nil {
			c.value, _ = d.ValueOf(c.model, value)
			c.member = d.MemberOf(c.model, value)
		} else if d != nil {
			c.value = oldValue // a tombstone keeps what it had
		}
		if c.value != oldValue || c.member != oldMember {
			changes = append(changes, c)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("reindex scopes: %w", err)
	}
	for _, c := range changes {
		if _, err := tx.ExecContext(ctx, `UPDATE records SET scope_value = ?, member = ? WHERE tenant = ? AND model = ? AND key = ?`,
			nullable(c.value), nullable(c.member), c.tenant, c.model, c.key); err != nil {
			return 0, fmt.Errorf("reindex scopes: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE records_state SET scope_decl = ? WHERE id = 1`, want); err != nil {
		return 0, fmt.Errorf("reindex scopes: %w", err)
	}
	return len(changes), tx.Commit()
}

// modelsJSON is the JSON array of the models scopes cover.
func modelsJSON(scopes *Scopes) string {
	var models []string
	for _, name := range scopes.Names() {
		for m := range scopes.Named(name).Fields {
			models = append(models, fmt.Sprintf("%q", m))
		}
	}
	return "[" + strings.Join(models, ",") + "]"
}
