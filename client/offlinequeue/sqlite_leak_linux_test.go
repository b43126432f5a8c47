package offlinequeue

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mattn/go-sqlite3"
	"github.com/stretchr/testify/require"
)

// openFilesUnder lists the files under dir that this process has open.
func openFilesUnder(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	var open []string
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue // closed since ReadDir, or the directory's own descriptor
		}
		if target == dir || strings.HasPrefix(target, dir+string(filepath.Separator)) {
			open = append(open, target)
		}
	}
	return open
}

// A failed open closes every connection it made, whatever step failed.
func TestSQLiteFailedOpenLeaksNoFile(t *testing.T) {
	for _, c := range []struct {
		name    string
		prepare func(t *testing.T, dir string) string // returns the path to open
		hooks   sqliteHooks
	}{
		{"not a database", func(t *testing.T, dir string) string {
			path := filepath.Join(dir, "garbage.db")
			require.NoError(t, os.WriteFile(path, []byte(strings.Repeat("garbage!", 512)), 0o600))
			return path
		}, sqliteHooks{}},
		{"directory", func(t *testing.T, dir string) string { return dir }, sqliteHooks{}},
		{"connection setting fails", func(t *testing.T, dir string) string { return filepath.Join(dir, "queue.db") },
			sqliteHooks{connect: func(*sqlite3.SQLiteConn) error { return errors.New("injected setting failure") }}},
		{"journal mode reads back wrong", func(t *testing.T, dir string) string { return filepath.Join(dir, "queue.db") },
			sqliteHooks{connect: func(c *sqlite3.SQLiteConn) error {
				_, err := c.Exec("PRAGMA journal_mode=DELETE", nil)
				return err
			}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := c.prepare(t, dir)
			q, err := openSQLite(path, SQLiteOptions{}, c.hooks)
			require.Error(t, err)
			require.Nil(t, q)
			require.Empty(t, openFilesUnder(t, dir), "a failed open left files open")
		})
	}
}

func TestSQLiteCloseReleasesFiles(t *testing.T) {
	dir := t.TempDir()
	q, err := OpenSQLite(filepath.Join(dir, "queue.db"), SQLiteOptions{})
	require.NoError(t, err)
	_, err = q.Enqueue(t.Context(), []byte("p"), "")
	require.NoError(t, err)
	_, err = q.Peek(t.Context(), 0, 1)
	require.NoError(t, err)
	require.NotEmpty(t, openFilesUnder(t, dir), "precondition: an open queue holds its files")
	require.NoError(t, q.Close())
	require.Empty(t, openFilesUnder(t, dir), "Close left files open")
}
