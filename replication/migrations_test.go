package replication_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/replication"
)

// openFile opens the database file at path the way syncd does.
// The caller closes it.
func openFile(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sqlitedb.Open(context.Background(), path, sqlitedb.Options{})
	require.NoError(t, err)
	return db
}

// TestOpenStoreStampsANewFile: a new file is made at this build's schema
// version, found at 0, and a second open runs nothing.
func TestOpenStoreStampsANewFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "syncd.db")
	db := openFile(t, path)
	s, err := replication.OpenStore(ctx, db, replication.StoreOptions{})
	require.NoError(t, err)
	require.Equal(t, replication.SchemaVersion(), s.SchemaVersion)
	require.Zero(t, s.MigratedFrom)
	v, err := sqlitedb.SchemaVersion(ctx, db)
	require.NoError(t, err)
	require.Equal(t, replication.SchemaVersion(), v)

	s, err = replication.OpenStore(ctx, db, replication.StoreOptions{})
	require.NoError(t, err)
	require.Equal(t, replication.SchemaVersion(), s.MigratedFrom, "a current file runs nothing")
	require.NoError(t, db.Close())
}

// TestOpenStoreRefusesANewerDatabase: a file a newer build wrote (its
// schema version beyond this build's) is refused with both versions named,
// and its bytes are left as they were.
func TestOpenStoreRefusesANewerDatabase(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "syncd.db")
	db := openFile(t, path)
	_, err := replication.OpenStore(ctx, db, replication.StoreOptions{})
	require.NoError(t, err)
	newer := replication.SchemaVersion() + 1
	_, err = db.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, newer))
	require.NoError(t, err)
	require.NoError(t, db.Close())
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	db = openFile(t, path)
	_, err = replication.OpenStore(ctx, db, replication.StoreOptions{})
	require.ErrorIs(t, err, replication.ErrNewerSchema)
	var refused *sqlitedb.NewerSchemaError
	require.ErrorAs(t, err, &refused)
	require.Equal(t, sqlitedb.NewerSchemaError{File: newer, Known: replication.SchemaVersion()}, *refused)
	require.ErrorContains(t, err, fmt.Sprintf("version %d is newer than this build's %d", newer, replication.SchemaVersion()))
	require.NoError(t, db.Close())
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after, "the refused file is unchanged")
}
