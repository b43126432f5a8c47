package sqlitedb_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/crashpoint"
	"github.com/syncd-dev/syncd/internal/sqlitedb"
)

// Migrate reaches a crashpoint step after each statement of a migration,
// once its version is set, and once it is committed, in order: the steps
// a crash test kills a process at.
func TestMigrateReachesAStepAfterEachStatementAndCommit(t *testing.T) {
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, filepath.Join(t.TempDir(), "x.db"), sqlitedb.Options{})
	require.NoError(t, err)
	defer db.Close()
	var steps []string
	crashpoint.Set(func(step string) { steps = append(steps, step) })
	defer crashpoint.Set(nil)
	_, err = sqlitedb.Migrate(ctx, db, []sqlitedb.Migration{
		sqlitedb.Statements(`CREATE TABLE a (x)`, `CREATE TABLE b (y)`),
		sqlitedb.AddColumns("a", "z INTEGER"),
	})
	require.NoError(t, err)
	require.Equal(t, []string{
		"schema version 1: ran CREATE TABLE a (x)",
		"schema version 1: ran CREATE TABLE b (y)",
		"schema version 1 set, not committed",
		"schema version 1 committed",
		"schema version 2: ran ALTER TABLE a ADD COLUMN z INTEGER",
		"schema version 2 set, not committed",
		"schema version 2 committed",
	}, steps)
}
