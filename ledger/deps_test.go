package ledger_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Package ledger imports nothing of syncd; ledgertest imports only ledger.
func TestImportsNothingInternal(t *testing.T) {
	const module = "github.com/syncd-dev/syncd/"
	for dir, allowed := range map[string][]string{
		".":          nil,
		"ledgertest": {module + "ledger"},
	} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, files)
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			src, err := os.ReadFile(name)
			require.NoError(t, err)
			f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
			require.NoError(t, err)
			for _, imp := range f.Imports {
				path, err := strconv.Unquote(imp.Path.Value)
				require.NoError(t, err)
				if strings.HasPrefix(path, module) {
					require.Contains(t, allowed, path, "%s imports %s", name, path)
				}
			}
		}
	}
}
