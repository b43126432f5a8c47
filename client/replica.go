package client

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/client/offlinequeue"
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
	metaPendingHW = "pending_hw" // highest queue id copied into pending
	metaLastSync  = "last_sync"  // unix ms of the last completed replay
)

// replica is the client's local SQLite state. It is safe for concurrent use
// (database/sql serialises writers; SQLite's WAL lets readers run beside).
type replica struct {
	db  *sql.DB
	now func() time.Time
}

func openReplica(ctx context.Context, path string, now func() time.Time) (*replica, error) {
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{})
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, replicaSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("replica schema: %w", err)
	}
	return &replica{db: db, now: now}, nil
}

func (r *replica) close() error { return r.db.Close() }

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

func (r *replica) cursor(ctx context.Context) (uint64, error) {
	return r.meta(ctx, r.db, metaCursor)
}

// addPending copies a queued mutation into the pending overlay, so reads see
// it at once. It is idempotent by queue id.
func (r *replica) addPending(ctx context.Context, queueID offlinequeue.ID, m *syncproto.Mutation) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := insertPending(ctx, tx, queueID, m); err != nil {
		return err
	}
	return tx.Commit()
}

func insertPending(ctx context.Context, tx *sql.Tx, queueID offlinequeue.ID, m *syncproto.Mutation) error {
	var base any
	if m.BaseVersion != nil {
		base = int64(*m.BaseVersion)
	}
	// A write already decided is not pending: the sync worker can replay
	// and decide a queued write before its Put gets here.
	if _, err := tx.ExecContext(ctx, `INSERT INTO pending (queue_id, op_id, model, key, op, value, base_version, wall)
		SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8 WHERE NOT EXISTS (SELECT 1 FROM outcomes WHERE op_id = ?2)
		ON CONFLICT DO NOTHING`,
		int64(queueID), m.OpID, m.Model, m.Key, string(m.Op), []byte(m.Value), base, m.HLC.Wall); err != nil {
		return fmt.Errorf("add pending: %w", err)
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO meta (name, value) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET value = max(value, excluded.value)`, metaPendingHW, int64(queueID))
	return err
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
		tx, err := r.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		for _, it := range items {
			m, err := decodeMutation(it.Payload)
			if err != nil {
				continue // the worker dead-letters it with the reason
			}
			if err := insertPending(ctx, tx, it.ID, m); err != nil {
				tx.Rollback()
				return err
			}
		}
		if err := tx.Commit(); err != nil {
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
	err = r.db.QueryRowContext(ctx, `SELECT p.op, p.value, COALESCE(r.version, 0)
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
	err = r.db.QueryRowContext(ctx, `SELECT value, version, deleted FROM records WHERE model = ? AND key = ?`,
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
	err := r.db.QueryRowContext(ctx, `SELECT version FROM records WHERE model = ? AND key = ?`, model, key).Scan(&v)
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
func (r *replica) applyChanges(ctx context.Context, entries []syncproto.Change, cursor uint64) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, upsertRecord)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, e := range entries {
		if _, err := stmt.ExecContext(ctx, upsertArgs(e.Model, e.Key, e.Value, e.Version, e.HLC, e.Deleted)...); err != nil {
			return fmt.Errorf("apply change %d: %w", e.Seq, err)
		}
	}
	if err := setMeta(ctx, tx, metaCursor, cursor); err != nil {
		return err
	}
	return tx.Commit()
}

// upsertRecord writes a record unless the replica already holds that
// version or a newer one.
const upsertRecord = `INSERT INTO records (model, key, value, version, hlc, wall, deleted) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
	ON CONFLICT (model, key) DO UPDATE SET value = excluded.value, version = excluded.version,
		hlc = excluded.hlc, wall = excluded.wall, deleted = excluded.deleted
	WHERE excluded.version > records.version`

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
// of the two rather than their sum.
func (r *replica) resetFromSnapshot(ctx context.Context, sr *syncproto.SnapshotReader) (uint64, error) {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
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
	for page := range pages {
		for _, rec := range page {
			if _, err := stmt.ExecContext(ctx, upsertArgs(rec.Model, rec.Key, rec.Value, rec.Version, rec.HLC, false)...); err != nil {
				return 0, fmt.Errorf("snapshot: store %s/%s: %w", rec.Model, rec.Key, err)
			}
		}
	}
	reading.Wait()
	if readErr != nil {
		return 0, fmt.Errorf("snapshot: %w", readErr)
	}
	head := sr.Head()
	if err := setMeta(ctx, tx, metaCursor, head); err != nil {
		return 0, err
	}
	return head, tx.Commit()
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

// decide records a write's final outcome, removes it from the pending
// overlay and folds what the server said into the records (the applied
// write, or the winner that stands), all in one transaction. The caller
// marks the queue item done only after this committed, so a crash in
// between resends the write and the ledger answers duplicate.
func (r *replica) decide(ctx context.Context, m *syncproto.Mutation, o Outcome) error {
	return r.decideAll(ctx, []decision{{mut: m, outcome: o}})
}

// decision is one write and its final outcome.
type decision struct {
	mut     *syncproto.Mutation
	outcome Outcome
}

// decideAll is decide for many writes in one transaction: one commit (one
// fsync) for a whole push batch instead of one per write.
func (r *replica) decideAll(ctx context.Context, ds []decision) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, d := range ds {
		if err := decideIn(ctx, tx, d.mut, d.outcome); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func decideIn(ctx context.Context, tx *sql.Tx, m *syncproto.Mutation, o Outcome) error {
	var winner []byte
	if o.Winner != nil {
		var err error
		if winner, err = json.Marshal(o.Winner); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO outcomes (op_id, model, key, status, version, seq, reason, winner, rebased_as, decided_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (op_id) DO NOTHING`,
		o.OpID, m.Model, m.Key, string(o.Status), int64(o.Version), int64(o.Seq), o.Reason, winner, o.RebasedAs, o.DecidedAt.UnixMilli()); err != nil {
		return fmt.Errorf("record outcome: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM pending WHERE op_id = ?`, o.OpID); err != nil {
		return err
	}
	switch {
	case o.Status == StatusApplied:
		if _, err := tx.ExecContext(ctx, upsertRecord, upsertArgs(m.Model, m.Key, m.Value, o.Version, o.HLC, m.Op == syncproto.OpDelete)...); err != nil {
			return err
		}
	case o.Winner != nil && o.Winner.Version > 0 && !o.Winner.ValueOmitted:
		// A winner without its value (PROTOCOL.md 5.4) reaches the
		// replica through the change feed instead.
		w := o.Winner
		if _, err := tx.ExecContext(ctx, upsertRecord, upsertArgs(m.Model, m.Key, w.Value, w.Version, w.HLC, w.Deleted)...); err != nil {
			return err
		}
	}
	return nil
}

// outcome returns a decided write's outcome.
func (r *replica) outcome(ctx context.Context, opID string) (Outcome, bool, error) {
	o := Outcome{OpID: opID}
	var status string
	var version, seq, decided int64
	var winner []byte
	err := r.db.QueryRowContext(ctx, `SELECT status, version, seq, reason, winner, rebased_as, decided_at FROM outcomes WHERE op_id = ?`,
		opID).Scan(&status, &version, &seq, &o.Reason, &winner, &o.RebasedAs, &decided)
	if errors.Is(err, sql.ErrNoRows) {
		return Outcome{}, false, nil
	}
	if err != nil {
		return Outcome{}, false, err
	}
	o.Status, o.Version, o.Seq, o.DecidedAt = OutcomeStatus(status), uint64(version), uint64(seq), time.UnixMilli(decided)
	if len(winner) > 0 {
		o.Winner = new(syncproto.Winner)
		if err := json.Unmarshal(winner, o.Winner); err != nil {
			return Outcome{}, false, err
		}
	}
	return o, true, nil
}

// isPending reports whether a write is still in the pending overlay.
func (r *replica) isPending(ctx context.Context, opID string) (bool, error) {
	var n int
	err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM pending WHERE op_id = ?`, opID).Scan(&n)
	return n > 0, err
}

// pruneOutcomes forgets outcomes decided before cutoff and returns how
// many.
func (r *replica) pruneOutcomes(ctx context.Context, cutoff time.Time) (int64, error) {
	res, err := r.db.ExecContext(ctx, `DELETE FROM outcomes WHERE decided_at < ?`, cutoff.UnixMilli())
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (r *replica) setLastSync(ctx context.Context, t time.Time) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := setMeta(ctx, tx, metaLastSync, uint64(t.UnixMilli())); err != nil {
		return err
	}
	return tx.Commit()
}

func (r *replica) lastSync(ctx context.Context) (time.Time, error) {
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
	for _, op := range ops {
		if _, err := r.db.ExecContext(ctx, `DELETE FROM outcomes WHERE op_id = ? AND status = ?`, op, string(StatusDeadLettered)); err != nil {
			return fmt.Errorf("forget dead-letter outcome: %w", err)
		}
	}
	return nil
}
