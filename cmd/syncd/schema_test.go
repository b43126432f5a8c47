package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/replication"
)

// TestNewerDatabaseIsRefusedAtStart: syncd started on a database a newer
// release wrote (its schema version beyond this build's) exits non-zero
// with both versions named, and leaves the file byte for byte as it was.
func TestNewerDatabaseIsRefusedAtStart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	data := filepath.Join(dir, "syncd.db")
	db, err := sqlitedb.Open(ctx, data, sqlitedb.Options{})
	require.NoError(t, err)
	_, err = replication.OpenStore(ctx, db, replication.StoreOptions{})
	require.NoError(t, err)
	newer := replication.SchemaVersion() + 1
	_, err = db.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, newer))
	require.NoError(t, err)
	require.NoError(t, db.Close())
	before, err := os.ReadFile(data)
	require.NoError(t, err)

	code, out := runSyncdToExit(t, "--listen", "127.0.0.1:0", "--admin-listen", "", "--data", data,
		"--tokens", filepath.Join(dir, "tokens.json"), "--dev-tokens")
	require.NotZero(t, code, "syncd served a newer database: %s", out)
	require.Contains(t, out, fmt.Sprintf("database schema version %d is newer than this build's %d", newer, replication.SchemaVersion()))
	after, err := os.ReadFile(data)
	require.NoError(t, err)
	require.Equal(t, before, after, "the refused database is unchanged")
}
