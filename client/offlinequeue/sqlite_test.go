package offlinequeue_test

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/client/offlinequeue/queuetest"
)

func TestSQLiteConformance(t *testing.T) {
	queuetest.Run(t, queuetest.Config{
		New: func(t *testing.T) func(offlinequeue.Options) (offlinequeue.Queue, error) {
			path := filepath.Join(t.TempDir(), "queue.db")
			return func(opts offlinequeue.Options) (offlinequeue.Queue, error) {
				return offlinequeue.OpenSQLite(path, offlinequeue.SQLiteOptions{Options: opts})
			}
		},
		Durable: true,
		MoveWith: func(ctx context.Context, q offlinequeue.Queue, id offlinequeue.ID, reason string, record func(context.Context) error) error {
			return q.(*offlinequeue.SQLite).MoveToDeadLettersWith(ctx, id, reason, func(ctx context.Context, _ *sql.Tx) error { return record(ctx) })
		},
	})
}

// openSQLite opens a queue and closes it at the end of the test.
func openSQLite(t *testing.T, path string, opts offlinequeue.SQLiteOptions) *offlinequeue.SQLite {
	t.Helper()
	q, err := offlinequeue.OpenSQLite(path, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// dirEntries lists the names in dir.
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestOpenSQLiteLeavesGarbageFileUntouched(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "queue.db")
	garbage := bytes.Repeat([]byte("this is not a database\x00\xff"), 400)
	require.NoError(t, os.WriteFile(path, garbage, 0o600))

	q, err := offlinequeue.OpenSQLite(path, offlinequeue.SQLiteOptions{})
	require.Error(t, err)
	require.Nil(t, q)
	require.Contains(t, err.Error(), path)
	require.Contains(t, err.Error(), "not a database")

	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, bytes.Equal(garbage, got), "a failed open changed the file")
	require.Equal(t, []string{"queue.db"}, dirEntries(t, dir), "a failed open left files behind")
}

func TestOpenSQLiteOnDirectoryFails(t *testing.T) {
	dir := t.TempDir()
	_, err := offlinequeue.OpenSQLite(dir, offlinequeue.SQLiteOptions{})
	require.Error(t, err)
	require.Contains(t, err.Error(), dir)
	require.Empty(t, dirEntries(t, dir))
}

func TestOpenSQLiteRefusesForeignDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	db, err := sql.Open("sqlite3", path)
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE notes (body TEXT)`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	_, err = offlinequeue.OpenSQLite(path, offlinequeue.SQLiteOptions{})
	require.ErrorContains(t, err, "not a syncd offline queue")
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, bytes.Equal(before, after), "a refused open changed the foreign database")
}

func TestOpenSQLiteRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.db")
	q, err := offlinequeue.OpenSQLite(path, offlinequeue.SQLiteOptions{})
	require.NoError(t, err)
	require.NoError(t, q.Close())

	db, err := sql.Open("sqlite3", path)
	require.NoError(t, err)
	_, err = db.Exec(`PRAGMA user_version = 2`)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	before, err := os.ReadFile(path)
	require.NoError(t, err)
	_, err = offlinequeue.OpenSQLite(path, offlinequeue.SQLiteOptions{})
	require.ErrorContains(t, err, "schema version 2 is newer")
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, bytes.Equal(before, after), "a refused open changed the database")
}

func TestOpenSQLiteRefusesInvalidOptions(t *testing.T) {
	dir := t.TempDir()
	_, err := offlinequeue.OpenSQLite(filepath.Join(dir, "a.db"), offlinequeue.SQLiteOptions{Synchronous: offlinequeue.Synchronous(9)})
	require.ErrorContains(t, err, "Synchronous")
	_, err = offlinequeue.OpenSQLite(filepath.Join(dir, "b.db"), offlinequeue.SQLiteOptions{BusyTimeout: -time.Second})
	require.ErrorContains(t, err, "BusyTimeout")
	require.Empty(t, dirEntries(t, dir), "refused options created a file")
}

func TestSQLitePathWithURICharacters(t *testing.T) {
	dir := t.TempDir()
	name := "queue ?#%41&mode=ro.db"
	q := openSQLite(t, filepath.Join(dir, name), offlinequeue.SQLiteOptions{})
	_, err := q.Enqueue(t.Context(), []byte("p"), "")
	require.NoError(t, err)
	require.Contains(t, dirEntries(t, dir), name, "the database file must have exactly the given name")
}

func TestSQLiteSyncNormalWorks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.db")
	opts := offlinequeue.SQLiteOptions{Synchronous: offlinequeue.SyncNormal, BusyTimeout: 250 * time.Millisecond}
	q, err := offlinequeue.OpenSQLite(path, opts)
	require.NoError(t, err)
	id, err := q.Enqueue(t.Context(), []byte("p"), "k")
	require.NoError(t, err)
	require.NoError(t, q.Close())

	q = openSQLite(t, path, opts)
	items, err := q.Peek(t.Context(), 0, 10)
	require.NoError(t, err)
	require.Len(t, items, 1)
	require.Equal(t, id, items[0].ID)
}

// A lock held by another connection makes a write wait for BusyTimeout and
// then fail cleanly: nothing written, the handle still usable.
func TestSQLiteBusyWriteFailsCleanly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.db")
	q := openSQLite(t, path, offlinequeue.SQLiteOptions{BusyTimeout: 50 * time.Millisecond})
	_, err := q.Enqueue(t.Context(), []byte("before"), "")
	require.NoError(t, err)

	other, err := sql.Open("sqlite3", "file:"+path+"?_txlock=immediate")
	require.NoError(t, err)
	defer other.Close()
	locker, err := other.Begin() // BEGIN IMMEDIATE: holds the write lock
	require.NoError(t, err)

	_, err = q.Enqueue(t.Context(), []byte("blocked"), "")
	require.Error(t, err)
	require.NotErrorIs(t, err, offlinequeue.ErrPoisoned)
	require.Contains(t, strings.ToLower(err.Error()), "locked")

	require.NoError(t, locker.Rollback())
	_, err = q.Enqueue(t.Context(), []byte("after"), "")
	require.NoError(t, err)
	items, err := q.Peek(t.Context(), 0, 10)
	require.NoError(t, err)
	require.Len(t, items, 2)
	require.Equal(t, "before", string(items[0].Payload))
	require.Equal(t, "after", string(items[1].Payload))
}

func TestSQLiteMetricsLabelIsPath(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := offlinequeue.NewMetrics(reg)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "queue.db")
	q := openSQLite(t, path, offlinequeue.SQLiteOptions{Options: offlinequeue.Options{Metrics: m}})
	_, err = q.Enqueue(t.Context(), []byte("p"), "")
	require.NoError(t, err)

	families, err := reg.Gather()
	require.NoError(t, err)
	found := false
	for _, f := range families {
		if f.GetName() != "syncd_client_queue_depth" {
			continue
		}
		require.Len(t, f.GetMetric(), 1)
		labels := f.GetMetric()[0].GetLabel()
		require.Len(t, labels, 1)
		require.Equal(t, "queue", labels[0].GetName())
		require.Equal(t, path, labels[0].GetValue())
		require.Equal(t, 1.0, f.GetMetric()[0].GetGauge().GetValue())
		found = true
	}
	require.True(t, found, "depth gauge not exported")
}
