package client

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/syncd-dev/syncd/client/synccore"
	"github.com/syncd-dev/syncd/syncproto"
)

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
//
// Partial sync (PROTOCOL.md 19.5): an evict entry drops its row unless
// the replica holds it at a newer version than the moving write; then the
// frame's evictions drop every row of their values in the models cov says
// their scopes cover; a not-nil a.Scopes is stored in the same
// transaction. The rows dropped are returned, each with its reason. A
// pending write of a dropped row stays in the overlay until answered.
func (r *replica) applyChanges(ctx context.Context, a synccore.Apply, cov covered) (fresh []syncproto.Change, dropped []evicted, err error) {
	var evicts []syncproto.Change
	entries := a.Entries
	if slices.ContainsFunc(entries, func(e syncproto.Change) bool { return e.Op == syncproto.OpEvict }) {
		entries = nil
		for _, e := range a.Entries {
			if e.Op == syncproto.OpEvict {
				evicts = append(evicts, e)
			} else {
				entries = append(entries, e)
			}
		}
	}
	fresh, err = r.unapplied(ctx, entries)
	if err != nil {
		return nil, nil, err
	}
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	now := r.now()
	quiet := len(evicts) == 0 && len(a.Evictions) == 0 && a.Scopes == nil
	if quiet && len(fresh) == 0 && a.Cursor >= r.cursorHeld && now.Sub(r.cursorWritten) < heldMetaEvery && !now.Before(r.cursorWritten) {
		r.cursorHeld = a.Cursor
		return nil, nil, nil
	}
	if err := r.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		dropped = dropped[:0]
		x := r.inTx(ctx, tx)
		for _, e := range fresh {
			if err := x.exec(upsertRecord, upsertArgs(e.Model, e.Key, e.Value, e.Version, e.HLC, e.Deleted, x.scopeValue(&e))...); err != nil {
				return fmt.Errorf("apply change %d: %w", e.Seq, err)
			}
		}
		for i := range evicts {
			row, gone, err := evictMoved(ctx, tx, &evicts[i])
			if err != nil {
				return err
			}
			if gone {
				dropped = append(dropped, row)
			}
		}
		rows, err := evictValues(ctx, tx, a.Evictions, cov, a.Cursor)
		if err != nil {
			return err
		}
		dropped = append(dropped, rows...)
		if a.Scopes != nil {
			if err := storeScopes(ctx, tx, a.Scopes); err != nil {
				return err
			}
		}
		return setMeta(ctx, tx, metaCursor, a.Cursor)
	}); err != nil {
		return nil, nil, err
	}
	r.cursorHeld, r.cursorWritten = 0, now
	return fresh, dropped, nil
}

// unapplied returns the entries the records do not yet hold (at their
// version or newer), in order: echoes of this client's settled writes are
// known (echoes), the rest found with one query. A record's version never
// goes down but by resetFromSnapshot, which the feed's reader does not run
// beside, so an entry found applied stays applied.
func (r *replica) unapplied(ctx context.Context, entries []syncproto.Change) ([]syncproto.Change, error) {
	return r.notHeld(ctx, r.echoes.drop(entries))
}

// notHeld returns the entries the records do not hold at their version or
// newer, in order, found with one query.
func (r *replica) notHeld(ctx context.Context, entries []syncproto.Change) ([]syncproto.Change, error) {
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
const upsertRecord = insertRecords + `(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)` + keepNewest

// insertRecords and keepNewest make upsertRecord, and its multi-row form.
const (
	insertRecords = `INSERT INTO records (model, key, value, version, hlc, wall, deleted, scope_value) VALUES `
	// A delete keeps the record's scope value (PROTOCOL.md 19.2).
	keepNewest = ` ON CONFLICT (model, key) DO UPDATE SET value = excluded.value, version = excluded.version,
		hlc = excluded.hlc, wall = excluded.wall, deleted = excluded.deleted,
		scope_value = CASE WHEN excluded.deleted THEN records.scope_value ELSE excluded.scope_value END
	WHERE excluded.version > records.version`
)

// insertRecord stores a snapshot's record into the emptied records table.
const insertRecord = `INSERT INTO records (model, key, value, version, hlc, wall, deleted, scope_value) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`

// upsertArgs are upsertRecord's (and insertRecord's) arguments.
// scope is the record's scope value ("" for a model no scope covers).
func upsertArgs(model, key string, value []byte, version uint64, hlc syncproto.Timestamp, deleted bool, scope string) []any {
	return []any{model, key, value, int64(version), hlc.String(), hlc.Wall, deleted, scope}
}

// resetFromSnapshot replaces every record with a snapshot and sets the
// cursor to its head, in one transaction: a reader sees the old state or
// the new one. The pending overlay and outcomes are kept. Reading and
// decoding the snapshot runs beside the inserts (one goroutine, stopped
// before it returns), so a large snapshot loads at the pace of the slower
// of the two rather than their sum. In the queue's file the load holds the
// queue's committer: a Put waits for it (reads do not).
func (r *replica) resetFromSnapshot(ctx context.Context, sr *syncproto.SnapshotReader, sc snapshotScopes) (head uint64, have syncproto.ScopeSet, err error) {
	r.echoes.reset()
	defer r.echoes.reset()
	err = r.write(ctx, func(_ context.Context, tx *sql.Tx) error {
		// The caller's ctx, not the committer's: giving up cancels the
		// load, and the transaction is rolled back.
		var err error
		if head, err = storeSnapshot(ctx, tx, sr, r.fields.Load()); err != nil {
			return err
		}
		// Only what the device follows stays, with the scope state, in
		// the same commit: a crash never leaves rows no state accounts for.
		if have, err = keepFollowed(ctx, tx, sc.want, sc.cov); err != nil {
			return err
		}
		if have, err = sc.complete(have); err != nil {
			return err
		}
		return storeScopes(ctx, tx, &synccore.Scopes{Have: have, Resume: map[string]map[string]string{}, Lost: sc.lost})
	})
	if err != nil {
		return 0, nil, err
	}
	// The feed is not applied beside a reset (the link's feed goroutine
	// runs it, or it runs before the feed starts), so no page's cursor
	// can be held for the records just replaced.
	r.heldMu.Lock()
	r.cursorHeld, r.cursorWritten = 0, r.now()
	r.heldMu.Unlock()
	return head, have, nil
}

// storeSnapshot is resetFromSnapshot's transaction.
func storeSnapshot(ctx context.Context, tx *sql.Tx, sr *syncproto.SnapshotReader, fields *scopeFields) (uint64, error) {
	if _, err := tx.ExecContext(ctx, `DELETE FROM records`); err != nil {
		return 0, err
	}
	stmt, err := tx.PrepareContext(ctx, insertRecord)
	if err != nil {
		return 0, err
	}
	defer stmt.Close()

	ctx, cancel := context.WithCancel(ctx)
	pages := make(chan []syncproto.SnapshotRecord, snapshotPages)
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
			if _, err := stmt.ExecContext(raw, upsertArgs(rec.Model, rec.Key, rec.Value, rec.Version, rec.HLC, false, fields.of(rec.Model, rec.Value))...); err != nil {
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

// snapshotPage and snapshotPageBytes bound a page resetFromSnapshot's
// reader hands over: 256 records, or fewer holding at least 1 MiB of keys
// and values. With snapshotPages pages waiting, one being stored and one
// being read, a load holds at most (snapshotPages+2) pages of at most
// snapshotPageBytes plus one record (MaxPayloadBytes) each, about 8 MiB,
// whatever the snapshot's size.
const (
	snapshotPage      = 256
	snapshotPageBytes = 1 << 20
	snapshotPages     = 4
)

// readSnapshotPages reads sr to its end in pages sent on pages; it returns
// nil after the trailer, sr's error, or ctx's when the consumer gave up.
func readSnapshotPages(ctx context.Context, sr *syncproto.SnapshotReader, pages chan<- []syncproto.SnapshotRecord) error {
	page := make([]syncproto.SnapshotRecord, 0, snapshotPage)
	size := 0
	for {
		rec, err := sr.Next()
		eof := errors.Is(err, io.EOF)
		if err != nil && !eof {
			return err
		}
		if !eof {
			page = append(page, rec)
			size += len(rec.Key) + len(rec.Value)
		}
		if len(page) == snapshotPage || size >= snapshotPageBytes || (eof && len(page) > 0) {
			select {
			case pages <- page:
			case <-ctx.Done():
				return ctx.Err()
			}
			page, size = make([]syncproto.SnapshotRecord, 0, snapshotPage), 0
		}
		if eof {
			return nil
		}
	}
}
