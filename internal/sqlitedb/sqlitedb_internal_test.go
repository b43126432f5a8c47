package sqlitedb

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCreateDirsReturnsTheEntriesToSync(t *testing.T) {
	root := t.TempDir()
	existing := filepath.Join(root, "existing.db")
	require.NoError(t, os.WriteFile(existing, nil, 0o600))
	for _, c := range []struct {
		name, file string
		want       []string
	}{
		{"existing file", existing, nil},
		{"new file", filepath.Join(root, "new.db"), []string{root}},
		{"new directories", filepath.Join(root, "a", "b", "x.db"),
			[]string{filepath.Join(root, "a", "b"), filepath.Join(root, "a"), root}},
		{"a new file in a directory made before", filepath.Join(root, "a", "y.db"), []string{filepath.Join(root, "a")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := createDirs(c.file)
			require.NoError(t, err)
			require.Equal(t, c.want, got)
			require.DirExists(t, filepath.Dir(c.file))
		})
	}
}

// The path is a URI: characters SQLite would read as a query, a fragment
// or an escape are escaped, and the driver's parameters follow the only
// unescaped '?'.
func TestDSN(t *testing.T) {
	require.Equal(t, "file:/d/q %3f%23%2541&mode=ro.db?_stmt_cache_size=64&_txlock=immediate",
		dsn("/d/q ?#%41&mode=ro.db", false))
	require.Equal(t, "file:/d/x.db?_stmt_cache_size=64&_txlock=immediate&mode=ro", dsn("/d/x.db", true))
}
