package offlinequeue_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

// A queue path must be a regular file, or a symlink to one: a FIFO (whose
// open would block), a directory or a dangling symlink is refused before
// anything is opened, by both queue kinds.
func TestQueuePathMustBeARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	dangling := filepath.Join(dir, "dangling")
	require.NoError(t, os.Symlink(filepath.Join(dir, "nowhere", "q"), dangling))
	toFifo := filepath.Join(dir, "to-fifo")
	require.NoError(t, os.Symlink(fifo, toFifo))

	open := map[string]func(string) error{
		"file": func(p string) error {
			q, err := offlinequeue.OpenFile(p, offlinequeue.FileOptions{})
			if err == nil {
				q.Close()
			}
			return err
		},
		"sqlite": func(p string) error {
			q, err := offlinequeue.OpenSQLite(p, offlinequeue.SQLiteOptions{})
			if err == nil {
				q.Close()
			}
			return err
		},
	}
	for kind, openQueue := range open {
		for _, bad := range []string{fifo, dir, dangling, toFifo} {
			require.ErrorIs(t, openQueue(bad), offlinequeue.ErrNotRegularFile, "%s queue at %s", kind, bad)
		}
		real := filepath.Join(dir, kind+".q")
		require.NoError(t, openQueue(real), "a new path")
		link := filepath.Join(dir, kind+"-link")
		require.NoError(t, os.Symlink(real, link))
		require.NoError(t, openQueue(link), "a symlink to a regular file is followed")
	}
	_, err := os.Stat(filepath.Join(dir, "nowhere"))
	require.True(t, os.IsNotExist(err), "nothing was created through the dangling symlink")
}
