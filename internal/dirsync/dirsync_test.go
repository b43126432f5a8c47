package dirsync

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSyncMakesADirectoryDurable(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o600))
	require.NoError(t, Sync(dir))
}

func TestSyncReportsAMissingDirectory(t *testing.T) {
	err := Sync(filepath.Join(t.TempDir(), "missing"))
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorContains(t, err, "open directory for sync")
}

// A file system that cannot sync directories answers EINVAL or ENOTSUP
// (Linux) or ErrUnsupported; nothing else is excused.
func TestUnsupportedIsOnlyTheCannotSyncAnswers(t *testing.T) {
	for _, err := range []error{syscall.EINVAL, syscall.ENOTSUP, errors.ErrUnsupported, &os.PathError{Op: "sync", Path: "d", Err: syscall.EINVAL}} {
		require.True(t, unsupported(err), "%v", err)
	}
	for _, err := range []error{nil, syscall.EIO, syscall.ENOSPC, fs.ErrPermission} {
		require.False(t, unsupported(err), "%v", err)
	}
}
