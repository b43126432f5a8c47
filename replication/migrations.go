package replication

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/ledger"
)

// migrations are the schema versions of syncd's database: the records, the
// oplog, the conflict log, the replay ledger and syncd_meta, one file with
// one version (PRAGMA user_version, internal/sqlitedb's Migrate). Entry i
// brings a file from version i to i+1 in one transaction; OpenStore runs
// the missing ones and refuses a file of a newer version.
//
// To change the layout, append one entry (never edit one that shipped),
// usually sqlitedb.Statements(`ALTER TABLE ...`), then regenerate the schema
// golden (internal/sqlitedb: go test -run TestSchemasOfEveryFileGolden
// -update) and add the version to the time-travel test of every version
// (replication's TestOpenStoreMigratesEveryShippedLayout).
var migrations = []sqlitedb.Migration{
	adoptLayout1,     // 0 -> 1: a new file, or any release before versions
	addScopes,        // 1 -> 2: partial sync's scope values, members, grants
	addRequestedSets, // 2 -> 3: each device's requested scope set (requested.go)
	addOplogCounted,  // 3 -> 4: oplog_tenants counts entries up to oplog_meta.counted (countAppended)
}

// SchemaVersion returns the schema version of syncd's database this build
// writes: every file OpenStore returns is at it.
func SchemaVersion() int { return len(migrations) }

// ErrNewerSchema is wrapped by OpenStore and Migrate when the database was
// written by a newer build (its *sqlitedb.NewerSchemaError names both
// versions). Nothing was changed; run a build at least as new, or restore a
// backup taken before the upgrade.
var ErrNewerSchema = sqlitedb.ErrNewerSchema

// adoptLayout1 creates layout 1 in a new file, or brings the file of any
// release that kept versions of its own (ledger_meta, oplog_meta) to it,
// keeping every row. Those releases' layouts, oldest first: one
// oplog-wide and one ledger-wide floor and no syncd_meta; syncd_meta
// added; the conflict log's index per tenant; the ledger per scope
// (ledger_meta.schema_version 2); the oplog per tenant (oplog_meta).
func adoptLayout1(ctx context.Context, tx sqlitedb.Execer) error {
	if err := ledger.Migrations()[0](ctx, tx); err != nil {
		return err
	}
	if err := adoptOplog(ctx, tx); err != nil {
		return fmt.Errorf("oplog tables: %w", err)
	}
	if _, err := tx.ExecContext(ctx, recordsLayout1); err != nil {
		return fmt.Errorf("records tables: %w", err)
	}
	if _, err := tx.ExecContext(ctx, conflictsLayout1); err != nil {
		return fmt.Errorf("conflicts table: %w", err)
	}
	if _, err := tx.ExecContext(ctx, metaLayout1); err != nil {
		return fmt.Errorf("syncd_meta table: %w", err)
	}
	return nil
}

// addScopes adds what partial sync keeps: each entry's old and new scope
// value, member and the membership grants it changes; each record's scope
// value and member, indexed by value (backfills, scoped snapshots) and by
// member (grants); the scope declarations the records were indexed under
// (records_state.scope_decl, Records.Reindex). A file of the release that
// added these before the database carried a version already has them
// (migration 1 ran on it): columns are added where missing.
var addScopes = sqlitedb.Steps(
	sqlitedb.AddColumns("oplog", "scope_old TEXT", "scope_value TEXT", "member TEXT", "grants TEXT"),
	sqlitedb.AddColumns("records", "scope_value TEXT", "member TEXT"),
	sqlitedb.AddColumns("records_state", "scope_decl TEXT"),
	sqlitedb.Statements(
		`CREATE INDEX IF NOT EXISTS records_scope ON records (tenant, scope_value, model, key) WHERE scope_value IS NOT NULL`,
		`CREATE INDEX IF NOT EXISTS records_member ON records (tenant, member, model) WHERE member IS NOT NULL`),
)

// addOplogCounted adds oplog_meta.counted, the seq up to which
// oplog_tenants.entries counts each tenant's entries (see SQLiteLog):
// before it, every append counted its entries in its own transaction, so a
// file's counts are exact up to its head, where counted starts.
var addOplogCounted = sqlitedb.Steps(
	sqlitedb.AddColumns("oplog_meta", "counted INTEGER NOT NULL DEFAULT 0"),
	sqlitedb.Statements(`UPDATE oplog_meta SET counted = coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'oplog'), 0)`),
)

// The statements of layout 1 below are the layout as it shipped: they never
// change (files in the field were made by them); a change is a new entry of
// migrations.

// recordsLayout1 creates the records tables: the current state of every
// key, and the seq of the last oplog entry applied to them. Every release
// had this layout.
const recordsLayout1 = `
CREATE TABLE IF NOT EXISTS records (
	tenant  TEXT    NOT NULL,
	model   TEXT    NOT NULL,
	key     TEXT    NOT NULL,
	value   BLOB,
	version INTEGER NOT NULL CHECK (version > 0),
	hlc     TEXT    NOT NULL,
	wall    INTEGER NOT NULL,
	logical INTEGER NOT NULL,
	origin  TEXT    NOT NULL,
	deleted INTEGER NOT NULL,
	op_id   TEXT    NOT NULL,
	seq     INTEGER NOT NULL,
	PRIMARY KEY (tenant, model, key)
);
CREATE TABLE IF NOT EXISTS records_state (
	id          INTEGER PRIMARY KEY CHECK (id = 1),
	applied_seq INTEGER NOT NULL
);
INSERT OR IGNORE INTO records_state (id, applied_seq) VALUES (1, 0);`

// conflictsLayout1 creates the conflict log; the first releases had no
// index per tenant.
const conflictsLayout1 = `
CREATE TABLE IF NOT EXISTS conflicts (
	id             INTEGER PRIMARY KEY AUTOINCREMENT,
	tenant         TEXT    NOT NULL,
	model          TEXT    NOT NULL,
	key            TEXT    NOT NULL,
	policy         TEXT    NOT NULL,
	reason         TEXT    NOT NULL,
	loser_op_id    TEXT    NOT NULL,
	loser_version  INTEGER NOT NULL,
	loser_value    BLOB,
	loser_hlc      TEXT    NOT NULL,
	loser_deleted  INTEGER NOT NULL,
	winner_op_id   TEXT    NOT NULL,
	winner_version INTEGER NOT NULL,
	winner_value   BLOB,
	winner_hlc     TEXT    NOT NULL,
	winner_deleted INTEGER NOT NULL,
	decided_at     INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS conflicts_tenant_id ON conflicts (tenant, id);`

// metaLayout1 creates syncd_meta: the database id (Identity) and a cluster
// node's materializer state, by name. The first release had none.
const metaLayout1 = `CREATE TABLE IF NOT EXISTS syncd_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)`

// oplogLayout1 creates the oplog tables where missing.
//
// oplog_tenants has one row per tenant that ever appended: entries is how
// many of its entries the oplog retains, floor the newest of its seqs that
// compaction removed (0 for none). Its index on entries finds the tenants
// beyond the count bound without reading the others; the one on floor
// finds the floors above a seq (the feed tail's question). oplog_tenant_seq
// finds a tenant's oldest entries.
//
// oplog_meta.floor is the floor every tenant has at least: the floor of a
// release that kept one for the whole oplog, carried over (a tenant whose
// entries were all compacted left no other trace), 0 otherwise. It never
// changes. (Schema version 4 adds oplog_meta.counted: see addOplogCounted.)
var oplogLayout1 = []string{
	`CREATE TABLE IF NOT EXISTS oplog (
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
	)`,
	`CREATE INDEX IF NOT EXISTS oplog_tenant_seq ON oplog (tenant, seq)`,
	`CREATE TABLE IF NOT EXISTS oplog_tenants (
		tenant  TEXT    NOT NULL PRIMARY KEY,
		entries INTEGER NOT NULL,
		floor   INTEGER NOT NULL DEFAULT 0
	) WITHOUT ROWID`,
	`CREATE INDEX IF NOT EXISTS oplog_tenants_by_entries ON oplog_tenants (entries)`,
	`CREATE INDEX IF NOT EXISTS oplog_tenants_by_floor ON oplog_tenants (floor)`,
}

const oplogMetaLayout1 = `CREATE TABLE oplog_meta (
		id    INTEGER PRIMARY KEY CHECK (id = 1),
		floor INTEGER NOT NULL
	)`

// adoptOplog creates the oplog tables of layout 1, or brings an earlier
// release's to it: one without oplog_meta (one floor for the whole log,
// which becomes every tenant's, and every tenant's entries counted), or
// oplog_meta at schema_version 2 (the version column goes).
func adoptOplog(ctx context.Context, tx sqlitedb.Execer) error {
	var oplog, meta, versioned int
	if err := tx.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'oplog'),
		(SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'oplog_meta'),
		(SELECT count(*) FROM pragma_table_info('oplog_meta') WHERE name = 'schema_version')`).Scan(&oplog, &meta, &versioned); err != nil {
		return err
	}
	var floor int64
	switch {
	case oplog == 0 && meta == 0: // a new oplog
	case meta == 0: // one floor for the whole log: the seq before the oldest retained entry, or the head when none is
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(
			(SELECT min(seq) - 1 FROM oplog),
			(SELECT seq FROM sqlite_sequence WHERE name = 'oplog'),
			0)`).Scan(&floor); err != nil {
			return fmt.Errorf("from one floor: %w", err)
		}
	case versioned == 1:
		var v int
		if err := tx.QueryRowContext(ctx, `SELECT schema_version, floor FROM oplog_meta WHERE id = 1`).Scan(&v, &floor); err != nil {
			return fmt.Errorf("read oplog_meta: %w", err)
		}
		if v != 2 {
			return fmt.Errorf("oplog_meta.schema_version is %d: no release wrote it (2 is known)", v)
		}
		if _, err := tx.ExecContext(ctx, `DROP TABLE oplog_meta`); err != nil {
			return err
		}
	default:
		return errors.New("oplog tables of no known release (oplog_meta without schema_version)")
	}
	for _, stmt := range oplogLayout1 {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	if meta == 0 && oplog == 1 {
		if _, err := tx.ExecContext(ctx, `INSERT INTO oplog_tenants (tenant, entries, floor)
			SELECT tenant, count(*), 0 FROM oplog GROUP BY tenant`); err != nil {
			return fmt.Errorf("count tenants' entries: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, oplogMetaLayout1); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO oplog_meta (id, floor) VALUES (1, ?)`, floor)
	return err
}

// Migrate brings db's file to SchemaVersion() (see migrations) and returns
// the version it found; OpenStore runs it first. Each missing step runs in
// one transaction with the version it brings the file to, so a crash
// leaves the file at one version or the next. A newer file is refused with
// an error wrapping ErrNewerSchema and *sqlitedb.NewerSchemaError, and
// left as it is.
func Migrate(ctx context.Context, db *sql.DB) (found int, err error) {
	found, err = sqlitedb.Migrate(ctx, db, migrations)
	if err != nil {
		return found, fmt.Errorf("migrate syncd database: %w", err)
	}
	return found, nil
}
