package sqlitedb_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/internal/loopback"
	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
)

var updateSchemas = flag.Bool("update", false, "rewrite testdata/schema_*.sql from the files the code writes now")

// TestSchemasOfEveryFileGolden pins the on-disk format of every SQLite
// file the project writes: syncd's database (records, oplog, ledger,
// conflict log and their meta tables), a device's SQLite queue alone, a
// device's SQLite queue holding its replica (queue, records, pending,
// outcomes, dead letters, meta), and a replica in its own file beside an
// NDJSON queue. Each file is made by the code that makes it in production
// and its Schema compared with testdata/schema_<name>.sql. Run with
// -update after a deliberate, migrated change of a format.
func TestSchemasOfEveryFileGolden(t *testing.T) {
	for name, make := range map[string]func(t *testing.T, dir string) string{
		"syncd":         makeSyncdDatabase,
		"queue":         makeQueue,
		"device_shared": makeDeviceShared,
		"replica":       makeReplicaFile,
	} {
		t.Run(name, func(t *testing.T) {
			path := make(t, t.TempDir())
			db, err := sqlitedb.Open(context.Background(), path, sqlitedb.Options{ReadOnly: true})
			require.NoError(t, err)
			defer db.Close()
			got, err := sqlitedb.Schema(context.Background(), db)
			require.NoError(t, err)
			file := filepath.Join("testdata", "schema_"+name+".sql")
			if *updateSchemas {
				require.NoError(t, os.WriteFile(file, []byte(got), 0o644))
			}
			want, err := os.ReadFile(file)
			require.NoError(t, err)
			require.Equal(t, string(want), got)
		})
	}
}

// makeSyncdDatabase starts syncd over a new database and stops it.
func makeSyncdDatabase(t *testing.T, dir string) string {
	path := filepath.Join(dir, "syncd.db")
	srv := syncdtest.Start(t, server.Config{DataPath: path})
	srv.Stop(t)
	return path
}

// makeQueue opens and closes a new SQLite queue.
func makeQueue(t *testing.T, dir string) string {
	path := filepath.Join(dir, "queue.db")
	q, err := offlinequeue.OpenSQLite(path, offlinequeue.SQLiteOptions{})
	require.NoError(t, err)
	require.NoError(t, q.Close())
	return path
}

// makeDeviceShared opens a client, offline, over a new SQLite queue (which
// then holds the replica) and closes it.
func makeDeviceShared(t *testing.T, dir string) string {
	path := filepath.Join(dir, "device.db")
	q, err := offlinequeue.OpenSQLite(path, offlinequeue.SQLiteOptions{})
	require.NoError(t, err)
	openAndCloseClient(t, client.Config{Queue: q})
	return path
}

// makeReplicaFile opens a client, offline, over an NDJSON queue (so its
// replica has a file of its own) and closes it.
func makeReplicaFile(t *testing.T, dir string) string {
	q, err := offlinequeue.OpenFile(filepath.Join(dir, "queue.ndjson"), offlinequeue.FileOptions{})
	require.NoError(t, err)
	path := filepath.Join(dir, "replica.db")
	openAndCloseClient(t, client.Config{Queue: q, ReplicaPath: path})
	return path
}

func openAndCloseClient(t *testing.T, cfg client.Config) {
	t.Helper()
	addr, err := loopback.FreeAddr()
	require.NoError(t, err)
	cfg.ServerURLs = []string{"http://" + addr}
	cfg.Token, cfg.ClientID = "token", "phone-1"
	c, err := client.Open(context.Background(), cfg)
	require.NoError(t, err)
	require.NoError(t, c.Close())
}
