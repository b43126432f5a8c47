package syncproto_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestImportsNothingInternal keeps syncproto at the bottom of the layering:
// both client and server import it, so it may import no syncd package, and
// outside the standard library only github.com/google/uuid.
func TestImportsNothingInternal(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			stdlib := !strings.Contains(strings.SplitN(path, "/", 2)[0], ".")
			require.True(t, stdlib || path == "github.com/google/uuid", "%s imports %s", file, path)
		}
	}
}
