package sqlitedb_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
)

func TestOpenAppliesPragmasOnEveryConnection(t *testing.T) {
	ctx := context.Background()
	for _, sync := range []sqlitedb.Synchronous{"", sqlitedb.Full, sqlitedb.Normal} {
		path := filepath.Join(t.TempDir(), "sub", "x.db")
		db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{Synchronous: sync})
		require.NoError(t, err)
		db.SetMaxIdleConns(0) // force fresh connections
		want := map[sqlitedb.Synchronous]int{"": 2, sqlitedb.Full: 2, sqlitedb.Normal: 1}[sync]
		for range 3 {
			var level, timeout int
			var mode string
			require.NoError(t, db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&level))
			require.NoError(t, db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&timeout))
			require.NoError(t, db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode))
			require.Equal(t, want, level)
			require.Equal(t, 5000, timeout)
			require.Equal(t, "wal", mode)
		}
		require.NoError(t, db.Close())
	}
}

func TestOpenRefusesBadInputAndLeavesFilesAlone(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	_, err := sqlitedb.Open(ctx, filepath.Join(dir, "x.db"), sqlitedb.Options{Synchronous: "OFF"})
	require.ErrorContains(t, err, "want FULL or NORMAL")

	garbage := filepath.Join(dir, "garbage.db")
	content := []byte("this is not a database, and must stay byte-identical\n")
	require.NoError(t, os.WriteFile(garbage, content, 0o600))
	_, err = sqlitedb.Open(ctx, garbage, sqlitedb.Options{})
	require.Error(t, err)
	got, err := os.ReadFile(garbage)
	require.NoError(t, err)
	require.Equal(t, content, got)
}

func TestOpenReadOnly(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{})
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "CREATE TABLE t (v INTEGER)")
	require.NoError(t, err)
	require.NoError(t, db.Close())

	ro, err := sqlitedb.Open(ctx, path, sqlitedb.Options{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	_, err = ro.ExecContext(ctx, "INSERT INTO t VALUES (1)")
	require.Error(t, err, "a read-only handle must refuse writes")
}
