package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/syncd-dev/syncd/internal/crashpoint"
)

// The schema version of every SQLite file the project writes is its
// PRAGMA user_version: 0 for a file no migration ran on, n once the first n
// migrations of its opener's list ran. A file holding several components
// (syncd's oplog, records, ledger and conflict log; a device's queue and
// replica) has one version, owned by the code that opens the file, which
// lists the migrations of all its components in one order. Migrations go
// forward only; each runs in one transaction with the version it brings
// the file to, so a crash leaves a file at one version or the next, never
// between.

// ErrNewerSchema is wrapped by *NewerSchemaError.
var ErrNewerSchema = errors.New("database schema is newer than this build")

// NewerSchemaError refuses a file written by a newer build: its schema
// version is above the newest this build knows. Nothing was changed; open
// the file with a build at least as new as the one that wrote it.
type NewerSchemaError struct {
	File  int // the file's schema version
	Known int // the newest version this build knows
}

func (e *NewerSchemaError) Error() string {
	return fmt.Sprintf("database schema version %d is newer than this build's %d: open it with a newer build", e.File, e.Known)
}

func (e *NewerSchemaError) Unwrap() error { return ErrNewerSchema }

// Migration is one forward step of a file's schema: migration i of a list
// brings a file from version i to version i+1. It runs inside the
// transaction that also records the new version, and must not commit or
// roll back.
type Migration func(ctx context.Context, tx Execer) error

// Statements returns the Migration that runs stmts in order: the usual
// form of a step that adds a table, a column or an index. Its error names
// the statement that failed.
func Statements(stmts ...string) Migration {
	return func(ctx context.Context, tx Execer) error {
		for _, stmt := range stmts {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("%s: %w", firstLine(stmt), err)
			}
		}
		return nil
	}
}

// AddColumns returns the Migration that adds to table each of columns (a
// column definition: name, type and constraints, as ALTER TABLE ADD
// COLUMN takes it) that table lacks. Use it, rather than Statements, for
// columns a file may already have: one written before the file carried a
// schema version, by a release that added them another way.
func AddColumns(table string, columns ...string) Migration {
	return func(ctx context.Context, tx Execer) error {
		rows, err := tx.QueryContext(ctx, `SELECT name FROM pragma_table_info(?)`, table)
		if err != nil {
			return fmt.Errorf("columns of %s: %w", table, err)
		}
		have := map[string]bool{}
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				rows.Close()
				return fmt.Errorf("columns of %s: %w", table, err)
			}
			have[name] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("columns of %s: %w", table, err)
		}
		if len(have) == 0 {
			return fmt.Errorf("add columns to %s: no such table", table)
		}
		for _, c := range columns {
			name, _, _ := strings.Cut(strings.TrimSpace(c), " ")
			if have[name] {
				continue
			}
			if _, err := tx.ExecContext(ctx, `ALTER TABLE `+table+` ADD COLUMN `+c); err != nil {
				return fmt.Errorf("add column %s.%s: %w", table, name, err)
			}
		}
		return nil
	}
}

// Steps returns the Migration that runs steps in order, in the one
// transaction of their version: a version whose change touches several
// tables.
func Steps(steps ...Migration) Migration {
	return func(ctx context.Context, tx Execer) error {
		for _, step := range steps {
			if err := step(ctx, tx); err != nil {
				return err
			}
		}
		return nil
	}
}

// firstLine is stmt up to its first line break, for error messages.
func firstLine(stmt string) string {
	stmt = strings.TrimSpace(stmt)
	if i := strings.IndexByte(stmt, '\n'); i >= 0 {
		return stmt[:i] + " ..."
	}
	return stmt
}

// Execer is what a Migration runs its statements on: the migration's
// transaction.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SchemaVersion returns the file's schema version (PRAGMA user_version).
func SchemaVersion(ctx context.Context, q Execer) (int, error) {
	var v int
	if err := q.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// Migrate brings db's file to version len(migrations) and returns the
// version it found. A newer file is refused with a *NewerSchemaError and
// left as it is. Otherwise each missing migration runs in a transaction of
// its own that takes the write lock first (BEGIN IMMEDIATE), reads the
// version again (another opener may have run it meanwhile), runs the step
// and sets user_version, then commits; a failing step rolls back and
// leaves the file at the version before it.
func Migrate(ctx context.Context, db *sql.DB, migrations []Migration) (found int, err error) {
	known := len(migrations)
	found, err = SchemaVersion(ctx, db)
	if err != nil {
		return 0, err
	}
	if found > known {
		return found, &NewerSchemaError{File: found, Known: known}
	}
	for at := found; at < known; {
		if at, err = migrateOne(ctx, db, migrations); err != nil {
			return found, err
		}
	}
	return found, nil
}

// migrateOne runs, under the write lock, the migration after the version
// the file has then, and returns the version the file is at afterwards.
func migrateOne(ctx context.Context, db *sql.DB, migrations []Migration) (int, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate schema: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return 0, fmt.Errorf("migrate schema: begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		}
	}()
	v, err := SchemaVersion(ctx, conn)
	if err != nil {
		return 0, err
	}
	if v > len(migrations) {
		return v, &NewerSchemaError{File: v, Known: len(migrations)}
	}
	if v == len(migrations) {
		return v, nil // another opener migrated it meanwhile
	}
	if err := MigrateTx(ctx, conn, v, migrations[:v+1]); err != nil {
		return v, err
	}
	// PRAGMA takes no parameters; v+1 is an int this function computed.
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, v+1)); err != nil {
		return v, fmt.Errorf("migrate schema: set version %d: %w", v+1, err)
	}
	crashpoint.Reach(fmt.Sprintf("schema version %d set, not committed", v+1))
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		return v, fmt.Errorf("migrate schema: commit version %d: %w", v+1, err)
	}
	committed = true
	crashpoint.Reach(fmt.Sprintf("schema version %d committed", v+1))
	return v + 1, nil
}

// MigrateTx runs migrations[from:] in order in tx, the caller's one
// transaction, which it neither commits nor rolls back: the form for a
// file whose schema version is kept elsewhere than in user_version (a
// component's tables inside another's file, its version in a row the
// caller sets in the same transaction). Each statement a migration runs
// is a crashpoint step. Its error names the versions of the step that
// failed.
func MigrateTx(ctx context.Context, tx Execer, from int, migrations []Migration) error {
	for i := from; i < len(migrations); i++ {
		if err := migrations[i](ctx, steppingExecer{Execer: tx, to: i + 1}); err != nil {
			return fmt.Errorf("migrate schema from version %d to %d: %w", i, i+1, err)
		}
	}
	return nil
}

// steppingExecer is the Execer a migration runs on: after each statement
// it executed, the migration to version to reaches a crashpoint step.
type steppingExecer struct {
	Execer
	to int
}

func (s steppingExecer) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	r, err := s.Execer.ExecContext(ctx, query, args...)
	if err == nil {
		crashpoint.Reach(fmt.Sprintf("schema version %d: ran %s", s.to, firstLine(query)))
	}
	return r, err
}
