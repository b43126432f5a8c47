package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/atomicfile"
)

// Write replaces; Create refuses to; both leave no temporary file, give
// the file its mode and create the directory.
func TestWriteReplacesCreateDoesNot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sub")
	path := filepath.Join(dir, "f")
	require.NoError(t, atomicfile.Create(path, []byte("one"), 0o600, 0o700))
	require.ErrorIs(t, atomicfile.Create(path, []byte("two"), 0o600, 0o700), atomicfile.ErrExists)
	require.ErrorIs(t, atomicfile.ErrExists, os.ErrExist)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "one", string(b), "Create left the file as it was")

	require.NoError(t, atomicfile.Write(path, []byte("three"), 0o640, 0o700))
	b, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "three", string(b))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
	di, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), di.Mode().Perm())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left")
}
