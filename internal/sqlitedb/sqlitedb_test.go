package sqlitedb_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mattn/go-sqlite3"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
)

func TestOpenAppliesPragmasOnEveryConnection(t *testing.T) {
	ctx := context.Background()
	var zero sqlitedb.Synchronous
	for _, sync := range []sqlitedb.Synchronous{zero, sqlitedb.Full, sqlitedb.Normal} {
		path := filepath.Join(t.TempDir(), "sub", "x.db")
		db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{Synchronous: sync})
		require.NoError(t, err)
		db.SetMaxIdleConns(0) // force fresh connections
		want := map[sqlitedb.Synchronous]int{sqlitedb.Full: 2, sqlitedb.Normal: 1}[sync]
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

func TestParseSynchronous(t *testing.T) {
	for name, want := range map[string]sqlitedb.Synchronous{"FULL": sqlitedb.Full, "full": sqlitedb.Full, "Normal": sqlitedb.Normal} {
		got, err := sqlitedb.ParseSynchronous(name)
		require.NoError(t, err, name)
		require.Equal(t, want, got, name)
		again, err := sqlitedb.ParseSynchronous(got.String())
		require.NoError(t, err)
		require.Equal(t, got, again)
	}
	for _, name := range []string{"", "OFF", "EXTRA", "2"} {
		_, err := sqlitedb.ParseSynchronous(name)
		require.ErrorIs(t, err, sqlitedb.ErrUnknownSynchronous, name)
	}
	require.Equal(t, "Synchronous(9)", sqlitedb.Synchronous(9).String())
}

func TestOpenRefusesBadInputAndLeavesFilesAlone(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	_, err := sqlitedb.Open(ctx, filepath.Join(dir, "x.db"), sqlitedb.Options{Synchronous: 9})
	require.ErrorIs(t, err, sqlitedb.ErrUnknownSynchronous)
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

// holdConns takes n distinct connections from db at once and releases them
// at the end of the test.
func holdConns(t *testing.T, db *sql.DB, n int) []*sql.Conn {
	t.Helper()
	var conns []*sql.Conn
	for range n {
		conn, err := db.Conn(t.Context())
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		conns = append(conns, conn)
	}
	return conns
}

func TestOpenPathWithURICharactersNamesExactlyThatFile(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	// '&mode=ro' would make the handle read-only, and '%41' would name
	// "A", if the path were not escaped.
	name := "q ?#%41&mode=ro.db"
	path := filepath.Join(dir, name)
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{})
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "CREATE TABLE t (v TEXT); INSERT INTO t VALUES ('kept')")
	require.NoError(t, err)
	require.NoError(t, db.Close())

	entries := dirEntries(t, dir)
	require.Contains(t, entries, name)
	for _, e := range entries {
		require.True(t, strings.HasPrefix(e, name), "Open created %q besides %q", e, name)
	}

	db, err = sqlitedb.Open(ctx, path, sqlitedb.Options{ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	var got string
	require.NoError(t, db.QueryRowContext(ctx, "SELECT v FROM t").Scan(&got))
	require.Equal(t, "kept", got)
}

func TestOpenInspectRunsBeforeWAL(t *testing.T) {
	type seen struct {
		busy, level int64
		mode        string
	}
	var mu sync.Mutex
	var calls []seen
	inspect := func(c *sqlite3.SQLiteConn) error {
		var s seen
		for _, read := range []struct {
			query string
			dst   any
		}{{"PRAGMA busy_timeout", &s.busy}, {"PRAGMA synchronous", &s.level}, {"PRAGMA journal_mode", &s.mode}} {
			v, err := sqlitedb.QueryValue(c, read.query)
			if err != nil {
				return err
			}
			switch dst := read.dst.(type) {
			case *int64:
				*dst = v.(int64)
			case *string:
				*dst = v.(string)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, s)
		return nil
	}
	db, err := sqlitedb.Open(t.Context(), filepath.Join(t.TempDir(), "x.db"), sqlitedb.Options{
		Synchronous: sqlitedb.Normal, BusyTimeout: 1500 * time.Millisecond, Inspect: inspect,
	})
	require.NoError(t, err)
	defer db.Close()
	holdConns(t, db, 3)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, calls, 3, "Inspect runs on every connection")
	// The first connection sees the fresh file before the switch; later ones
	// see the WAL mode the file keeps.
	require.Equal(t, seen{1500, 1, "delete"}, calls[0], "Inspect runs after busy_timeout and synchronous, before WAL")
	for _, c := range calls[1:] {
		require.Equal(t, seen{1500, 1, "wal"}, c)
	}
}

var errForeign = errors.New("not ours")

// refuseNonEmpty is an Inspect hook refusing any database with a schema.
func refuseNonEmpty(c *sqlite3.SQLiteConn) error {
	n, err := sqlitedb.QueryValue(c, "SELECT count(*) FROM sqlite_schema")
	if err != nil {
		return err
	}
	if n != int64(0) {
		return fmt.Errorf("%d schema objects: %w", n, errForeign)
	}
	return nil
}

func TestOpenInspectRefusalLeavesFileByteIdentical(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "other.db")
	other, err := sql.Open("sqlite3", path) // a rollback-journal database
	require.NoError(t, err)
	_, err = other.Exec("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('theirs')")
	require.NoError(t, err)
	require.NoError(t, other.Close())
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	db, err := sqlitedb.Open(t.Context(), path, sqlitedb.Options{Inspect: refuseNonEmpty})
	require.ErrorIs(t, err, errForeign)
	require.ErrorContains(t, err, path)
	require.Nil(t, db)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, bytes.Equal(before, after), "a refused open changed the file")
	require.Equal(t, []string{"other.db"}, dirEntries(t, dir), "a refused open left a WAL or journal behind")

	// The same hook admits an empty database, which Open then switches to WAL.
	db, err = sqlitedb.Open(t.Context(), filepath.Join(dir, "new.db"), sqlitedb.Options{Inspect: refuseNonEmpty})
	require.NoError(t, err)
	require.NoError(t, db.Close())
}

func TestOpenConfigureRunsLastAndIsReadBack(t *testing.T) {
	t.Run("every connection, after WAL", func(t *testing.T) {
		var mu sync.Mutex
		var modes []any
		db, err := sqlitedb.Open(t.Context(), filepath.Join(t.TempDir(), "x.db"), sqlitedb.Options{
			Configure: func(c *sqlite3.SQLiteConn) error {
				mode, err := sqlitedb.QueryValue(c, "PRAGMA journal_mode")
				mu.Lock()
				defer mu.Unlock()
				modes = append(modes, mode)
				return err
			},
		})
		require.NoError(t, err)
		defer db.Close()
		holdConns(t, db, 3)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []any{"wal", "wal", "wal"}, modes)
	})
	for _, c := range []struct {
		name, undo string
		want       []string
	}{
		// The WAL failure says what to do.
		{"journal mode", "PRAGMA journal_mode = DELETE", []string{`journal_mode is "delete", not "wal"`, "local disk"}},
		{"synchronous", "PRAGMA synchronous = OFF", []string{"synchronous reads back as 0, want 2"}},
		{"busy timeout", "PRAGMA busy_timeout = 0", []string{"busy_timeout reads back as 0, want 5000"}},
		{"foreign keys", "PRAGMA foreign_keys = OFF", []string{"foreign_keys reads back as 0, want 1"}},
	} {
		t.Run("undoing "+c.name, func(t *testing.T) {
			_, err := sqlitedb.Open(t.Context(), filepath.Join(t.TempDir(), "x.db"), sqlitedb.Options{
				Configure: func(conn *sqlite3.SQLiteConn) error {
					_, err := conn.Exec(c.undo, nil)
					return err
				},
			})
			for _, want := range c.want {
				require.ErrorContains(t, err, want)
			}
		})
	}
}

func TestOpenBusyTimeout(t *testing.T) {
	ctx := t.Context()
	for _, c := range []struct {
		timeout time.Duration
		want    int64
	}{
		{0, 5000},
		{1500 * time.Millisecond, 1500},
		{time.Microsecond, 1}, // never rounded down to "no timeout"
	} {
		db, err := sqlitedb.Open(ctx, filepath.Join(t.TempDir(), "x.db"), sqlitedb.Options{BusyTimeout: c.timeout})
		require.NoError(t, err)
		var got int64
		require.NoError(t, db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&got))
		require.Equal(t, c.want, got, "BusyTimeout %v", c.timeout)
		require.NoError(t, db.Close())
	}

	dir := t.TempDir()
	_, err := sqlitedb.Open(ctx, filepath.Join(dir, "sub", "x.db"), sqlitedb.Options{BusyTimeout: -time.Second})
	require.ErrorContains(t, err, "negative BusyTimeout")
	_, err = sqlitedb.Open(ctx, filepath.Join(dir, "sub", "x.db"), sqlitedb.Options{BusyTimeout: 30 * 24 * time.Hour})
	require.ErrorContains(t, err, "beyond SQLite's limit")
	require.Empty(t, dirEntries(t, dir), "refused options created something")
}

func TestOpenCreatesMissingDirectories(t *testing.T) {
	ctx := t.Context()
	root := t.TempDir()
	path := filepath.Join(root, "a", "b", "c", "x.db")
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{})
	require.NoError(t, err, "creating, then syncing, four directory entries")
	require.NoError(t, db.Close())
	require.FileExists(t, path)

	// Reopening an existing file (nothing to sync) works too.
	db, err = sqlitedb.Open(ctx, path, sqlitedb.Options{})
	require.NoError(t, err)
	require.NoError(t, db.Close())
}

func TestOpenReadOnlyCreatesNothingAndNeedsWAL(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	_, err := sqlitedb.Open(ctx, filepath.Join(dir, "sub", "missing.db"), sqlitedb.Options{ReadOnly: true})
	require.Error(t, err)
	require.Empty(t, dirEntries(t, dir), "a read-only open created something")

	path := filepath.Join(dir, "rollback.db")
	other, err := sql.Open("sqlite3", path)
	require.NoError(t, err)
	_, err = other.Exec("CREATE TABLE t (v INTEGER)")
	require.NoError(t, err)
	require.NoError(t, other.Close())
	_, err = sqlitedb.Open(ctx, path, sqlitedb.Options{ReadOnly: true})
	require.ErrorContains(t, err, "a read-only open does not switch it")
}

func TestQueryValue(t *testing.T) {
	db, err := sqlitedb.Open(t.Context(), filepath.Join(t.TempDir(), "x.db"), sqlitedb.Options{})
	require.NoError(t, err)
	defer db.Close()
	conn := holdConns(t, db, 1)[0]
	require.NoError(t, conn.Raw(func(dc any) error {
		c := dc.(*sqlite3.SQLiteConn)
		got, err := sqlitedb.QueryValue(c, "SELECT 7, 'ignored'")
		require.NoError(t, err)
		require.Equal(t, int64(7), got)
		got, err = sqlitedb.QueryValue(c, "SELECT 'text'")
		require.NoError(t, err)
		require.Equal(t, "text", got)
		_, err = sqlitedb.QueryValue(c, "SELECT 1 WHERE 0")
		require.ErrorContains(t, err, "returned no row")
		_, err = sqlitedb.QueryValue(c, "SELECT * FROM missing")
		require.ErrorContains(t, err, "no such table")
		return nil
	}))
}

// Database files are private to their owner, whatever the umask: the main
// file, and the -wal and -shm files SQLite creates beside it.
func TestOpenCreatesFilesOwnerOnly(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "private.db")
	db, err := sqlitedb.Open(t.Context(), path, sqlitedb.Options{})
	require.NoError(t, err)
	defer db.Close()
	_, err = db.ExecContext(t.Context(), `CREATE TABLE t (x)`)
	require.NoError(t, err)
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(f)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(sqlitedb.FileMode), st.Mode().Perm(), f)
	}
}
