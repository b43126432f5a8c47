package sqlitedb_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
)

// steps are three migrations of a small schema, each counting its runs.
func steps(runs *[3]int, mu *sync.Mutex) []sqlitedb.Migration {
	step := func(i int, stmt string) sqlitedb.Migration {
		return func(ctx context.Context, tx sqlitedb.Execer) error {
			mu.Lock()
			runs[i]++
			mu.Unlock()
			_, err := tx.ExecContext(ctx, stmt)
			return err
		}
	}
	return []sqlitedb.Migration{
		step(0, `CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)`),
		step(1, `ALTER TABLE notes ADD COLUMN tag TEXT NOT NULL DEFAULT ''`),
		step(2, `CREATE INDEX notes_by_tag ON notes (tag)`),
	}
}

// openPool opens a pool of its own over the file at path.
func openPool(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sqlitedb.Open(context.Background(), path, sqlitedb.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// TestMigrateRunsEachMissingStepOnce: a new file runs every step; a file
// an older build left at version 1 keeps its rows and runs only the steps
// after 1; a current file runs none.
func TestMigrateRunsEachMissingStepOnce(t *testing.T) {
	ctx := context.Background()
	var runs [3]int
	var mu sync.Mutex
	all := steps(&runs, &mu)

	path := filepath.Join(t.TempDir(), "v.db")
	old := openPool(t, path)
	found, err := sqlitedb.Migrate(ctx, old, all[:1])
	require.NoError(t, err)
	require.Equal(t, 0, found)
	_, err = old.ExecContext(ctx, `INSERT INTO notes (body) VALUES ('kept')`)
	require.NoError(t, err)

	found, err = sqlitedb.Migrate(ctx, old, all)
	require.NoError(t, err)
	require.Equal(t, 1, found)
	require.Equal(t, [3]int{1, 1, 1}, runs)
	var body, tag string
	require.NoError(t, old.QueryRowContext(ctx, `SELECT body, tag FROM notes`).Scan(&body, &tag))
	require.Equal(t, "kept", body)
	v, err := sqlitedb.SchemaVersion(ctx, old)
	require.NoError(t, err)
	require.Equal(t, 3, v)

	found, err = sqlitedb.Migrate(ctx, old, all)
	require.NoError(t, err)
	require.Equal(t, 3, found)
	require.Equal(t, [3]int{1, 1, 1}, runs, "a current file runs nothing")
}

// TestMigrateRefusesANewerFile: a build that knows fewer versions than the
// file has refuses it with both versions named, and changes nothing.
func TestMigrateRefusesANewerFile(t *testing.T) {
	ctx := context.Background()
	var runs [3]int
	var mu sync.Mutex
	all := steps(&runs, &mu)
	path := filepath.Join(t.TempDir(), "v.db")
	db := openPool(t, path)
	_, err := sqlitedb.Migrate(ctx, db, all)
	require.NoError(t, err)

	_, err = sqlitedb.Migrate(ctx, db, all[:2])
	var newer *sqlitedb.NewerSchemaError
	require.ErrorAs(t, err, &newer)
	require.ErrorIs(t, err, sqlitedb.ErrNewerSchema)
	require.Equal(t, sqlitedb.NewerSchemaError{File: 3, Known: 2}, *newer)
	require.ErrorContains(t, err, "version 3 is newer than this build's 2")
	v, err := sqlitedb.SchemaVersion(ctx, db)
	require.NoError(t, err)
	require.Equal(t, 3, v)
}

// TestMigrateRollsBackAFailedStep: a step that fails leaves the file at
// the version before it, with nothing of the step applied.
func TestMigrateRollsBackAFailedStep(t *testing.T) {
	ctx := context.Background()
	var runs [3]int
	var mu sync.Mutex
	all := steps(&runs, &mu)
	boom := errors.New("boom")
	failing := append(all[:1:1], func(ctx context.Context, tx sqlitedb.Execer) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE half (x)`); err != nil {
			return err
		}
		return boom
	})
	path := filepath.Join(t.TempDir(), "v.db")
	db := openPool(t, path)
	found, err := sqlitedb.Migrate(ctx, db, failing)
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "from version 1 to 2")
	require.Equal(t, 0, found)
	v, err := sqlitedb.SchemaVersion(ctx, db)
	require.NoError(t, err)
	require.Equal(t, 1, v)
	var n int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = 'half'`).Scan(&n))
	require.Zero(t, n, "the failed step's table was rolled back")
}

// TestMigrateRacingOpenersRunEachStepOnce: openers of one new file, each
// with its own pool, migrate at once; every step runs exactly once.
func TestMigrateRacingOpenersRunEachStepOnce(t *testing.T) {
	ctx := context.Background()
	var runs [3]int
	var mu sync.Mutex
	all := steps(&runs, &mu)
	path := filepath.Join(t.TempDir(), "v.db")
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		db := openPool(t, path)
		wg.Go(func() {
			_, err := sqlitedb.Migrate(ctx, db, all)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, [3]int{1, 1, 1}, runs)
}

// TestStatementsRunInOrderAndNameTheOneThatFailed: a Statements step runs
// its statements in order in the migration's transaction; one that fails
// is named in the error, and the step leaves nothing behind.
func TestStatementsRunInOrderAndNameTheOneThatFailed(t *testing.T) {
	ctx := context.Background()
	db := openPool(t, filepath.Join(t.TempDir(), "v.db"))
	_, err := sqlitedb.Migrate(ctx, db, []sqlitedb.Migration{
		sqlitedb.Statements(`CREATE TABLE notes (id INTEGER PRIMARY KEY)`, `ALTER TABLE notes ADD COLUMN tag TEXT`),
	})
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO notes (tag) VALUES ('x')`)
	require.NoError(t, err, "the second statement ran after the first")

	_, err = sqlitedb.Migrate(ctx, db, []sqlitedb.Migration{
		sqlitedb.Statements(`CREATE TABLE notes (id INTEGER PRIMARY KEY)`, `ALTER TABLE notes ADD COLUMN tag TEXT`),
		sqlitedb.Statements(`CREATE TABLE half (x)`, "ALTER TABLE missing\n\tADD COLUMN y TEXT"),
	})
	require.ErrorContains(t, err, "ALTER TABLE missing ...: no such table: missing")
	var n int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = 'half'`).Scan(&n))
	require.Zero(t, n, "the failed step's first statement was rolled back")
	v, err := sqlitedb.SchemaVersion(ctx, db)
	require.NoError(t, err)
	require.Equal(t, 1, v)
}

// TestAddColumnsAddsOnlyTheMissingOnes: AddColumns adds the columns a table
// lacks and leaves those it has (a file that gained them another way),
// and refuses a table that does not exist.
func TestAddColumnsAddsOnlyTheMissingOnes(t *testing.T) {
	ctx := context.Background()
	db := openPool(t, filepath.Join(t.TempDir(), "v.db"))
	_, err := sqlitedb.Migrate(ctx, db, []sqlitedb.Migration{
		sqlitedb.Statements(`CREATE TABLE notes (id INTEGER PRIMARY KEY, tag TEXT)`),
		sqlitedb.Steps(
			sqlitedb.AddColumns("notes", "tag TEXT", "color TEXT NOT NULL DEFAULT 'blue'"),
			sqlitedb.AddColumns("notes", "color TEXT"), // run twice: nothing to add
		),
	})
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO notes (id, tag) VALUES (1, 'x')`)
	require.NoError(t, err)
	var color string
	require.NoError(t, db.QueryRowContext(ctx, `SELECT color FROM notes`).Scan(&color))
	require.Equal(t, "blue", color)

	_, err = sqlitedb.Migrate(ctx, db, []sqlitedb.Migration{
		sqlitedb.Statements(`CREATE TABLE notes (id INTEGER PRIMARY KEY, tag TEXT)`),
		sqlitedb.Steps(sqlitedb.AddColumns("notes", "tag TEXT")),
		sqlitedb.AddColumns("missing", "x TEXT"),
	})
	require.ErrorContains(t, err, "add columns to missing: no such table")
}
