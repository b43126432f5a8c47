package client

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/syncd-dev/syncd/client/synccore"
	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/syncproto"
)

// replicaMigrations are the replica's schema versions: migration i brings
// the replica's tables from version i to i+1. In a file of its own the
// version is the file's (sqlitedb.Migrate, PRAGMA user_version); in a
// SQLite queue's file, whose user_version the queue owns, it is the meta
// row metaReplicaSchema, and the same steps run in the queue's committer
// (migrateShared).
var replicaMigrations = []sqlitedb.Migration{
	// 1: the tables of the first release. Replicas written before the
	// version was recorded hold them already (IF NOT EXISTS).
	sqlitedb.Statements(replicaSchemaStatements()...),
	// 2: partial sync: each record's scope value ("" for a model no scope
	// covers), indexed for evictions.
	sqlitedb.Statements(`ALTER TABLE records ADD COLUMN scope_value TEXT NOT NULL DEFAULT ''`,
		`CREATE INDEX records_by_scope_value ON records (scope_value, model) WHERE scope_value <> ''`),
}

// metaReplicaSchema is the replica's schema version in a queue's file.
const metaReplicaSchema = "replica_schema"

// migrateShared brings the replica's tables in a queue's file to
// len(replicaMigrations) in one transaction of the queue's committer; a
// newer version is refused with a *sqlitedb.NewerSchemaError.
func migrateShared(ctx context.Context, sq sharedQueue) error {
	return sq.Update(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// The meta table itself is version 1's; a file with none is at 0.
		var v int64
		err := tx.QueryRowContext(ctx, `SELECT value FROM meta WHERE name = ?`, metaReplicaSchema).Scan(&v)
		switch {
		case err == nil:
		case errors.Is(err, sql.ErrNoRows) || strings.Contains(err.Error(), "no such table"):
			// Before versions were recorded: version 1's tables, if any,
			// are created IF NOT EXISTS and version 2 runs next.
			v = 0
			var cols int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('records') WHERE name = 'scope_value'`).Scan(&cols); err != nil {
				return err
			}
			if cols > 0 {
				return errors.New("replica tables carry scope_value without a recorded schema version")
			}
		default:
			return err
		}
		if int(v) > len(replicaMigrations) {
			return &sqlitedb.NewerSchemaError{File: int(v), Known: len(replicaMigrations)}
		}
		if err := sqlitedb.MigrateTx(ctx, tx, int(v), replicaMigrations); err != nil {
			return err
		}
		return setMigratedVersion(ctx, tx, int(v))
	})
}

// meta_text names of the scope state.
const (
	// metaScopeWant: the app's request by scope (SetScopes), JSON; a
	// declared scope it does not name follows Config.Scopes, else every
	// granted value.
	metaScopeWant = "scope_want"
	// metaScopeState: what the device holds complete and where its
	// backfills resume (synccore.Scopes without Want), JSON.
	metaScopeState = "scope_state"
	// metaScopeWelcome: the declared scopes and grants of the last
	// welcome, JSON, for SetScopes to check against while offline.
	metaScopeWelcome = "scope_welcome"
)

// scopeWelcome is what metaScopeWelcome holds.
type scopeWelcome struct {
	Scopes map[string]syncproto.ScopeInfo `json:"scopes"`
	Grants syncproto.ScopeSet             `json:"grants"`
}

// storedScopes is what metaScopeState holds.
type storedScopes struct {
	Have   syncproto.ScopeSet           `json:"have"`
	Resume map[string]map[string]string `json:"resume"`
	Lost   map[string]map[string]string `json:"lost,omitempty"`
}

// readJSON decodes the meta_text setting name into v; false when unset.
func (r *replica) readJSON(ctx context.Context, name string, v any) (bool, error) {
	s, err := r.text(ctx, name)
	if err != nil || s == "" {
		return false, err
	}
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return false, fmt.Errorf("replica setting %s: %w", name, err)
	}
	return true, nil
}

// setJSON stores v as the meta_text setting name in tx.
func setJSON(ctx context.Context, tx *sql.Tx, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO meta_text (name, value) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`, name, string(b))
	return err
}

// scopeWant returns the app's stored request (nil when none).
func (r *replica) scopeWant(ctx context.Context) (syncproto.ScopeSet, error) {
	var want syncproto.ScopeSet
	_, err := r.readJSON(ctx, metaScopeWant, &want)
	return want, err
}

// setScopeWant stores the request of one scope.
func (r *replica) setScopeWant(ctx context.Context, scope string, values []string) error {
	return r.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		want := syncproto.ScopeSet{}
		var s string
		err := tx.QueryRowContext(ctx, `SELECT value FROM meta_text WHERE name = ?`, metaScopeWant).Scan(&s)
		switch {
		case err == nil:
			if err := json.Unmarshal([]byte(s), &want); err != nil {
				return fmt.Errorf("replica setting %s: %w", metaScopeWant, err)
			}
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		want[scope] = values
		return setJSON(ctx, tx, metaScopeWant, want)
	})
}

// scopeState returns the stored have and resume positions.
func (r *replica) scopeState(ctx context.Context) (synccore.Scopes, error) {
	var st storedScopes
	if _, err := r.readJSON(ctx, metaScopeState, &st); err != nil {
		return synccore.Scopes{}, err
	}
	return synccore.Scopes{Have: st.Have, Resume: st.Resume, Lost: st.Lost}.Clone(), nil
}

// lastWelcomeScopes returns the scopes and grants of the last welcome.
func (r *replica) lastWelcomeScopes(ctx context.Context) (scopeWelcome, bool, error) {
	var w scopeWelcome
	ok, err := r.readJSON(ctx, metaScopeWelcome, &w)
	return w, ok, err
}

// setWelcomeScopes stores the scopes and grants of a welcome.
func (r *replica) setWelcomeScopes(ctx context.Context, w scopeWelcome) error {
	return r.write(ctx, func(ctx context.Context, tx *sql.Tx) error { return setJSON(ctx, tx, metaScopeWelcome, w) })
}

// covered maps each declared scope to the models it covers.
type covered map[string][]string

func coveredBy(scopes map[string]syncproto.ScopeInfo) covered {
	out := covered{}
	for name, info := range scopes {
		for model := range info.Models {
			out[name] = append(out[name], model)
		}
		slices.Sort(out[name])
	}
	return out
}

// storeScopes writes the scope state (have and resume) in tx.
func storeScopes(ctx context.Context, tx *sql.Tx, s *synccore.Scopes) error {
	return setJSON(ctx, tx, metaScopeState, storedScopes{Have: s.Have, Resume: s.Resume, Lost: s.Lost})
}

// evictMoved drops a row an evict entry names unless the replica holds
// it at a newer version than the moving write; it returns the row
// dropped, if one was.
func evictMoved(ctx context.Context, tx *sql.Tx, e *syncproto.Change) (row evicted, gone bool, err error) {
	var value string
	err = tx.QueryRowContext(ctx, `DELETE FROM records WHERE model = ? AND key = ? AND version <= ? RETURNING scope_value`, e.Model, e.Key, int64(e.Version)).Scan(&value)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return evicted{}, false, nil
	case err != nil:
		return evicted{}, false, fmt.Errorf("evict %s/%s: %w", e.Model, e.Key, err)
	}
	return evicted{model: e.Model, key: e.Key, reason: syncproto.EvictMoved, scopeValue: value, at: e.Seq}, true, nil
}

// evicted is one row an eviction dropped: its scope value, and the seq
// the eviction was read at (ChangeEvent.At).
type evicted struct {
	model, key, reason, scopeValue string
	at                             uint64
}

// evictValues drops every row of each eviction's value in the models its
// scope covers and returns them, read at seq at (the frame's cursor).
func evictValues(ctx context.Context, tx *sql.Tx, evictions []syncproto.Eviction, cov covered, at uint64) ([]evicted, error) {
	var out []evicted
	for _, ev := range evictions {
		for _, model := range cov[ev.Scope] {
			rows, err := tx.QueryContext(ctx, `DELETE FROM records WHERE scope_value = ? AND model = ? RETURNING key`, ev.Value, model)
			if err != nil {
				return nil, fmt.Errorf("evict %s %q: %w", ev.Scope, ev.Value, err)
			}
			for rows.Next() {
				var key string
				if err := rows.Scan(&key); err != nil {
					rows.Close()
					return nil, err
				}
				out = append(out, evicted{model: model, key: key, reason: ev.Reason, scopeValue: ev.Value, at: at})
			}
			if err := errors.Join(rows.Err(), rows.Close()); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// applyBackfill stores a backfill page's entries by version (a record
// held at the same or a newer version is kept) and the scope state, in
// one transaction; the cursor does not move. It returns the entries it
// stored. The records alone say what is held: a backfill entry is no
// echo, and the device's own write to a value it did not follow was
// settled without being kept (keepsRow), so its row comes with the
// backfill of that value.
func (r *replica) applyBackfill(ctx context.Context, a synccore.ApplyBackfill) ([]syncproto.Change, error) {
	fresh, err := r.notHeld(ctx, a.Entries)
	if err != nil {
		return nil, err
	}
	err = r.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		x := r.inTx(ctx, tx)
		for _, e := range fresh {
			if err := x.exec(upsertRecord, upsertArgs(e.Model, e.Key, e.Value, e.Version, e.HLC, e.Deleted, e.ScopeValue)...); err != nil {
				return fmt.Errorf("backfill %s/%s: %w", e.Model, e.Key, err)
			}
		}
		return storeScopes(ctx, tx, &a.Scopes)
	})
	return fresh, err
}

// keepFollowed, after a snapshot, drops every row of a covered model
// whose scope value want does not hold, and returns the values left, by
// scope: the values the snapshot holds complete.
func keepFollowed(ctx context.Context, tx *sql.Tx, want syncproto.ScopeSet, cov covered) (syncproto.ScopeSet, error) {
	have := syncproto.ScopeSet{}
	for scope, models := range cov {
		for _, model := range models {
			rows, err := tx.QueryContext(ctx, `SELECT DISTINCT scope_value FROM records WHERE model = ? AND scope_value <> ''`, model)
			if err != nil {
				return nil, err
			}
			var values []string
			for rows.Next() {
				var v string
				if err := rows.Scan(&v); err != nil {
					rows.Close()
					return nil, err
				}
				values = append(values, v)
			}
			if err := errors.Join(rows.Err(), rows.Close()); err != nil {
				return nil, err
			}
			for _, v := range values {
				if !want.Has(scope, v) {
					if _, err := tx.ExecContext(ctx, `DELETE FROM records WHERE model = ? AND scope_value = ?`, model, v); err != nil {
						return nil, err
					}
					continue
				}
				have[scope] = append(have[scope], v)
			}
		}
	}
	// A requested value without rows is not claimed: the server backfills
	// it (an empty page) or says it is not granted.
	have.Normalize()
	return have, nil
}

// scopeFields maps each model a declared scope covers to the top-level
// member of its values that holds the scope value.
// want, when not nil, is the device's request, by which keepsRow decides.
type scopeFields struct {
	byModel map[string]string
	scopeOf map[string]string // model -> scope
	want    syncproto.ScopeSet
}

func newScopeFields(scopes map[string]syncproto.ScopeInfo, want syncproto.ScopeSet) *scopeFields {
	f := &scopeFields{byModel: map[string]string{}, scopeOf: map[string]string{}, want: want}
	for name, info := range scopes {
		for model, field := range info.Models {
			f.byModel[model] = field
			f.scopeOf[model] = name
		}
	}
	return f
}

// keepsRow reports whether the records take the row a settled write of
// this device carries (its applied value, or the winner that stands),
// of model with value (nil for a delete), applied at seq (0 for a
// winner). Always in a model no scope covers. In a covered model, only
// a row whose scope value the device's request holds (a value the server
// let it write is granted, so AllValues holds it), and, for an applied
// write, only when the feed is not already past its seq: an answer read
// after the feed (a resend answered duplicate after a lost ack, read
// behind a reconnect's catch-up) may be of a row the feed evicted since
// (its value revoked, or the row moved away), and the feed brought, or
// left out, everything up to the cursor. A winner comes with the
// answer, ahead of the feed's later frames, or withheld when replayed
// (PROTOCOL.md 19.2). A row not kept comes by the feed or by its value's
// backfill (the write's echo is then not noted).
func (x *txStmts) keepsRow(model string, value []byte, seq uint64) (bool, error) {
	f := x.fields
	if f == nil {
		return true, nil
	}
	scope, ok := f.scopeOf[model]
	if !ok {
		return true, nil
	}
	if len(value) > 0 && f.want != nil && !f.want.Has(scope, f.of(model, value)) {
		return false, nil
	}
	if seq == 0 {
		return true, nil
	}
	if x.cursor == nil {
		var c uint64
		err := x.tx.QueryRowContext(x.ctx, `SELECT coalesce((SELECT value FROM meta WHERE name = ?), 0)`, metaCursor).Scan(&c)
		if err != nil {
			return false, fmt.Errorf("read the cursor: %w", err)
		}
		x.cursor = &c
	}
	return seq > *x.cursor, nil
}

// of returns the scope value of a record of model whose value is value:
// its declared member's string, "" for a model no scope covers (or a
// value without a valid one, which the server refuses anyway).
func (f *scopeFields) of(model string, value []byte) string {
	if f == nil || len(value) == 0 {
		return ""
	}
	field, ok := f.byModel[model]
	if !ok {
		return ""
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(value, &members) != nil {
		return ""
	}
	var v string
	if json.Unmarshal(members[field], &v) != nil || syncproto.ValidateScopeValue(v) != nil {
		return ""
	}
	return v
}

// scopeOf is f.of for the transaction's declarations.
func (x *txStmts) scopeOf(model string, value []byte) string { return x.fields.of(model, value) }

// scopeValue is a feed entry's scope value: as the server says it, else
// read from its value.
func (x *txStmts) scopeValue(e *syncproto.Change) string {
	if e.ScopeValue != "" {
		return e.ScopeValue
	}
	return x.fields.of(e.Model, e.Value)
}
