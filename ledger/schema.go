package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Execer is what the ledger's schema steps run on: the transaction of one
// migration of the caller's database (a *sql.Tx, or a *sql.Conn inside a
// transaction the caller began).
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Migration is one step of the ledger's tables, run inside a migration
// transaction of the caller's database; it must not commit or roll back.
type Migration func(ctx context.Context, tx Execer) error

// ErrNotMigrated is wrapped by NewSQL when the database does not hold the
// ledger's tables at this build's layout: Migrations have not run on it.
// Nothing was changed.
var ErrNotMigrated = errors.New("ledger tables missing or not migrated (run ledger.Migrations in the database's migrations first)")

// Migrations returns the ledger's schema steps, in order. The ledger's
// tables live in the caller's database, whose schema version the caller
// owns (syncd's database: replication's migrations, PRAGMA user_version):
// the caller lists these steps among its own, in this order, each run once
// in a migration transaction, before NewSQL.
//
// Step 0 creates the tables, or brings the tables of any earlier release
// (which kept their own version in ledger_meta.schema_version, 1 or 2) to
// layout 1, keeping every decision and floor: version 1's ledger-wide
// floor becomes the floor every scope has at least, and every scope's
// decisions are counted. Layout 1 has no version of its own. A ledger_meta
// of any other shape is refused.
//
// A later change of the ledger's tables appends a step here and the
// caller appends it to its list; earlier steps never change.
func Migrations() []Migration {
	return []Migration{adoptTables}
}

// layout1 creates the tables of layout 1 where missing. Times are unix
// milliseconds; digest and result are BLOBs, stored as zero-length blobs
// when empty.
//
// ledger_meta holds one row. floor_ms is the floor every scope has at
// least: the version-1 floor carried over from a release before versions
// were kept in the database, NULL otherwise; it never changes.
//
// counted_ms keeps ledger_scopes.entries exact without a write per Record:
// a scope's entries counts its decisions decided at or before counted_ms
// (-2^63 until the first prune), and the decisions decided after it (the
// tail) are counted when needed. Record adds to entries only for a decision
// decided at or before counted_ms (after a clock went back; rare). Pruning
// as of now first folds the tail up to now into entries and raises
// counted_ms to now, so the tail is what was recorded since the last prune.
//
// ledger_scopes has one row per scope that ever held a committed decision,
// written by the transaction that records its first: how many decisions it
// holds up to ledger_meta.counted_ms, and its floor, NULL until its first
// eviction. ledger_decisions_by_decided_at orders a scope's decisions by
// decision time: eviction order (ties, rare, are sorted by op id as they
// are read) and the tail count.
//
// These statements are layout 1 as it shipped: they never change (files in
// the field were made by them); a change is a new step in Migrations.
var layout1 = []string{
	`CREATE TABLE IF NOT EXISTS ledger_decisions (
		scope      TEXT    NOT NULL,
		op_id      TEXT    NOT NULL,
		op_time    INTEGER NOT NULL,
		digest     BLOB    NOT NULL,
		result     BLOB    NOT NULL,
		decided_at INTEGER NOT NULL,
		PRIMARY KEY (scope, op_id)
	)`,
	`CREATE INDEX IF NOT EXISTS ledger_decisions_by_decided_at
		ON ledger_decisions (scope, decided_at)`,
	`CREATE TABLE IF NOT EXISTS ledger_scopes (
		scope    TEXT    NOT NULL PRIMARY KEY,
		entries  INTEGER NOT NULL,
		floor_ms INTEGER
	) WITHOUT ROWID`,
}

// metaLayout1 creates ledger_meta of layout 1; insertMeta fills its row.
const (
	metaLayout1 = `CREATE TABLE ledger_meta (
		id         INTEGER PRIMARY KEY CHECK (id = 1),
		floor_ms   INTEGER,
		counted_ms INTEGER NOT NULL DEFAULT -9223372036854775808
	)`
	insertMeta = `INSERT INTO ledger_meta (id, floor_ms, counted_ms) VALUES (1, ?, ?)`
	// noCount is counted_ms before the first prune.
	noCount = -1 << 63
)

// adoptTables is step 0 of Migrations.
func adoptTables(ctx context.Context, tx Execer) error {
	legacy, err := legacyVersion(ctx, tx)
	if err != nil {
		return fmt.Errorf("ledger tables: %w", err)
	}
	if err := execAll(ctx, tx, layout1); err != nil {
		return fmt.Errorf("ledger tables: %w", err)
	}
	var (
		floor   sql.NullInt64
		counted = sql.NullInt64{Int64: noCount, Valid: true}
	)
	switch legacy {
	case 0: // a new ledger
	case 1:
		// Version 1 had one floor for the whole ledger and evicted by op
		// time: count every scope's decisions, and count them as of the
		// newest decision time.
		if err := tx.QueryRowContext(ctx, `SELECT floor_ms, coalesce((SELECT max(decided_at) FROM ledger_decisions), ?)
			FROM ledger_meta WHERE id = 1`, noCount).Scan(&floor, &counted); err != nil {
			return fmt.Errorf("ledger tables: read version 1: %w", err)
		}
		if err := execAll(ctx, tx, []string{
			`DROP INDEX IF EXISTS ledger_decisions_by_op_time`,
			`INSERT INTO ledger_scopes (scope, entries, floor_ms)
				SELECT scope, COUNT(*), NULL FROM ledger_decisions GROUP BY scope`,
		}); err != nil {
			return fmt.Errorf("ledger tables: from version 1: %w", err)
		}
	case 2:
		if err := tx.QueryRowContext(ctx, `SELECT floor_ms, counted_ms FROM ledger_meta WHERE id = 1`).Scan(&floor, &counted); err != nil {
			return fmt.Errorf("ledger tables: read version 2: %w", err)
		}
	}
	if legacy != 0 {
		if _, err := tx.ExecContext(ctx, `DROP TABLE ledger_meta`); err != nil {
			return fmt.Errorf("ledger tables: from version %d: %w", legacy, err)
		}
	}
	if err := execAll(ctx, tx, []string{metaLayout1}); err != nil {
		return fmt.Errorf("ledger tables: %w", err)
	}
	if _, err := tx.ExecContext(ctx, insertMeta, floor, counted); err != nil {
		return fmt.Errorf("ledger tables: %w", err)
	}
	return nil
}

// legacyVersion returns the version an earlier release kept in
// ledger_meta.schema_version (1 or 2), or 0 when there are no ledger
// tables. Anything else is refused.
func legacyVersion(ctx context.Context, tx Execer) (int, error) {
	var meta, decisions, versioned int
	if err := tx.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'ledger_meta'),
		(SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'ledger_decisions'),
		(SELECT count(*) FROM pragma_table_info('ledger_meta') WHERE name = 'schema_version')`).Scan(&meta, &decisions, &versioned); err != nil {
		return 0, err
	}
	switch {
	case meta == 0 && decisions == 0:
		return 0, nil
	case meta == 0 || versioned == 0:
		return 0, errors.New("ledger tables of no known release (ledger_meta missing or without schema_version)")
	}
	var v int
	if err := tx.QueryRowContext(ctx, `SELECT schema_version FROM ledger_meta WHERE id = 1`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read ledger_meta.schema_version: %w", err)
	}
	if v != 1 && v != 2 {
		return 0, fmt.Errorf("ledger_meta.schema_version is %d: no release wrote it (1 and 2 are known)", v)
	}
	return v, nil
}

func execAll(ctx context.Context, tx Execer, stmts []string) error {
	for _, stmt := range stmts {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// checkMigrated returns ErrNotMigrated unless db holds ledger_meta of
// layout 1, and reads the base floor.
func checkMigrated(ctx context.Context, db *sql.DB) (baseFloor int64, err error) {
	var meta, versioned int
	if err := db.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'ledger_meta'),
		(SELECT count(*) FROM pragma_table_info('ledger_meta') WHERE name = 'schema_version')`).Scan(&meta, &versioned); err != nil {
		return 0, err
	}
	if meta == 0 || versioned != 0 {
		return 0, ErrNotMigrated
	}
	var base sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT floor_ms FROM ledger_meta WHERE id = 1`).Scan(&base); err != nil {
		return 0, err
	}
	return storedFloor(base), nil
}
