package replication_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestImports keeps the layering honest: replication's own code imports the
// standard library and syncproto, nothing else. The SQLite driver is the
// caller's choice, registered by whoever opens the database.
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		require.NoError(t, err)
		checked++
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			stdlib := !strings.Contains(strings.Split(path, "/")[0], ".")
			require.True(t, stdlib || path == "github.com/syncd-dev/syncd/syncproto",
				"%s imports %s", name, path)
		}
	}
	require.Positive(t, checked)
}
