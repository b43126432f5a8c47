package offlinequeue_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

// openers open each durable queue at a path and close it again.
var openers = map[string]func(path string) error{
	"sqlite": func(path string) error {
		q, err := offlinequeue.OpenSQLite(path, offlinequeue.SQLiteOptions{})
		if err == nil {
			err = q.Close()
		}
		return err
	},
	"file": func(path string) error {
		q, err := offlinequeue.OpenFile(path, offlinequeue.FileOptions{})
		if err == nil {
			err = q.Close()
		}
		return err
	},
}

// TestOpenRefusesNonRegularPaths: a queue path that is a symbolic link (to a
// queue or to nothing), a FIFO, a device or a directory is refused with
// *PathError before anything is opened: the open returns at once (a FIFO
// would block an open), the link is still a link, and the target is
// untouched.
func TestOpenRefusesNonRegularPaths(t *testing.T) {
	for name, open := range openers {
		t.Run(name, func(t *testing.T) {
			for _, tc := range []struct {
				kind string
				make func(t *testing.T, path string) string // returns the path to open
			}{
				{"symlink to a queue", func(t *testing.T, path string) string {
					target := filepath.Join(t.TempDir(), "real")
					require.NoError(t, open(target))
					require.NoError(t, os.Symlink(target, path))
					return path
				}},
				{"dangling symlink", func(t *testing.T, path string) string {
					require.NoError(t, os.Symlink(filepath.Join(t.TempDir(), "absent"), path))
					return path
				}},
				{"FIFO", func(t *testing.T, path string) string {
					require.NoError(t, syscall.Mkfifo(path, 0o600))
					return path
				}},
				// A device node cannot be made without privileges; use one
				// that every Linux has.
				{"device", func(*testing.T, string) string { return "/dev/null" }},
				{"directory", func(t *testing.T, path string) string {
					require.NoError(t, os.Mkdir(path, 0o700))
					return path
				}},
			} {
				t.Run(tc.kind, func(t *testing.T) {
					path := tc.make(t, filepath.Join(t.TempDir(), "queue"))
					before, err := os.Lstat(path)
					require.NoError(t, err)
					err = open(path)
					var perr *offlinequeue.PathError
					require.ErrorAs(t, err, &perr)
					require.ErrorIs(t, err, offlinequeue.ErrNotRegularFile)
					require.Equal(t, path, perr.Path)
					after, err := os.Lstat(path)
					require.NoError(t, err)
					require.Equal(t, before.Mode(), after.Mode(), "the path was changed")
				})
			}
		})
	}
}

// TestOpenRefusesNonRegularCompanions: the files a queue keeps beside its
// path (SQLite's -wal and -shm, the file queue's .lock) are held to the
// same rule, so a link planted there cannot redirect the queue's writes.
func TestOpenRefusesNonRegularCompanions(t *testing.T) {
	for name, companion := range map[string]string{"sqlite": "-wal", "file": ".lock"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "queue")
			victim := filepath.Join(dir, "victim")
			require.NoError(t, os.WriteFile(victim, []byte("keep"), 0o600))
			require.NoError(t, os.Symlink(victim, path+companion))
			err := openers[name](path)
			require.ErrorIs(t, err, offlinequeue.ErrNotRegularFile)
			got, err := os.ReadFile(victim)
			require.NoError(t, err)
			require.Equal(t, "keep", string(got))
			_, err = os.Lstat(path)
			require.True(t, errors.Is(err, os.ErrNotExist), "the queue file was created: %v", err)
		})
	}
}

// TestCreatedFilesArePrivate: every file a new queue creates is 0600, not
// the 0644 a usual umask lets SQLite give it.
func TestCreatedFilesArePrivate(t *testing.T) {
	for name := range openers {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "queue")
			switch name {
			case "sqlite":
				q, err := offlinequeue.OpenSQLite(path, offlinequeue.SQLiteOptions{})
				require.NoError(t, err)
				t.Cleanup(func() { q.Close() })
				_, err = q.Enqueue(t.Context(), []byte("x"), "")
				require.NoError(t, err)
			case "file":
				q, err := offlinequeue.OpenFile(path, offlinequeue.FileOptions{})
				require.NoError(t, err)
				t.Cleanup(func() { q.Close() })
				_, err = q.Enqueue(t.Context(), []byte("x"), "")
				require.NoError(t, err)
			}
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.NotEmpty(t, entries)
			for _, e := range entries {
				fi, err := e.Info()
				require.NoError(t, err)
				require.Equal(t, offlinequeue.FileMode, fi.Mode().Perm(), "%s", e.Name())
			}
		})
	}
}
