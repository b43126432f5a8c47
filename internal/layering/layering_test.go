// Package layering holds the test that keeps the package dependency
// direction of DESIGN.md section 2 honest: it fails when a package imports
// (directly or not, outside tests) a package of this module it must not.
package layering

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/syncd-dev/syncd"

// allowed lists, per package, the module's packages it may depend on
// directly; what those may depend on is allowed with them (reachable).
// internal/sqlitedb is a leaf shared by both sides: it opens SQLite with the
// pragma order durability depends on, and imports nothing of the module.
// internal/jsonscan, the JSON walker under syncproto's fast readers, is a
// leaf too: syncproto may import it and nothing else of the module.
// cmd/, soak/, examples/ and tools/ may import anything.
var allowed = map[string][]string{
	"syncproto":                     {"internal/jsonscan"},
	"internal/jsonscan":             {},
	"ledger":                        {},
	"internal/sqlitedb":             {},
	"internal/textsafe":             {},
	"internal/loopback":             {},
	"internal/atomicfile":           {},
	"internal/buildinfo":            {},
	"internal/datalock":             {},
	"replication":                   {"syncproto", "ledger"},
	"client/offlinequeue":           {"internal/sqlitedb"},
	"client/netmonitor":             {},
	"client/reconnect":              {},
	"client/synccore":               {"syncproto"},
	"client":                        {"syncproto", "client/synccore", "client/offlinequeue", "client/netmonitor", "client/reconnect", "internal/sqlitedb"},
	"server/auth":                   {"syncproto", "internal/atomicfile"},
	"server/auth/authtest":          {"server/auth"},
	"server":                        {"syncproto", "replication", "replication/cluster", "ledger", "server/auth", "internal/sqlitedb", "internal/buildinfo"},
	"replication/logtest":           {"replication", "syncproto", "ledger"},
	"replication/cluster":           {"replication", "syncproto", "ledger", "internal/sqlitedb", "internal/atomicfile"},
	"ledger/ledgertest":             {"ledger"},
	"client/offlinequeue/queuetest": {"client/offlinequeue", "internal/sqlitedb"},
}

// testOnly is the package that starts real syncd servers for tests: only
// _test.go files may import it (go list's Deps leave test files out, so any
// import it sees is a non-test one).
const testOnly = "internal/syncdtest"

// thirdParty lists, for the packages that promise to stay small, the only
// modules outside the standard library they may depend on: syncproto is
// what a client in any language mirrors, so it stays plain.
var thirdParty = map[string][]string{
	"syncproto": {"github.com/google/uuid"},
}

type pkg struct {
	ImportPath string
	Deps       []string
}

func TestPackagesRespectTheDependencyDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Deps", module+"/...").Output()
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for dec.More() {
		var p pkg
		require.NoError(t, dec.Decode(&p))
		name := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if slices.Contains(p.Deps, module+"/"+testOnly) {
			t.Errorf("%s depends on %s, which only tests may import", name, testOnly)
		}
		rules, ruled := allowed[name]
		if !ruled {
			continue
		}
		checked++
		ok := reachable(rules)
		external, limited := thirdParty[name]
		for _, d := range p.Deps {
			dep, inModule := strings.CutPrefix(d, module+"/")
			switch {
			case inModule && !ok[dep]:
				t.Errorf("%s depends on %s, which DESIGN.md section 2 does not allow", name, dep)
			case !inModule && limited && !isStdlib(d) && !slices.ContainsFunc(external, func(m string) bool { return strings.HasPrefix(d, m) }):
				t.Errorf("%s depends on %s; it may use only the standard library and %v", name, d, external)
			}
		}
	}
	require.Equal(t, len(allowed), checked, "every ruled package exists")
}

// reachable returns the packages rules allow and, through them, every
// package those may depend on: a package may use what its allowed packages
// use (everything that uses syncproto uses internal/jsonscan under it).
func reachable(rules []string) map[string]bool {
	ok := map[string]bool{}
	var visit func(pkgs []string)
	visit = func(pkgs []string) {
		for _, p := range pkgs {
			if !ok[p] {
				ok[p] = true
				visit(allowed[p])
			}
		}
	}
	visit(rules)
	return ok
}

// isStdlib reports whether an import path is the standard library's: its
// first element has no dot.
func isStdlib(path string) bool {
	return !strings.Contains(strings.SplitN(path, "/", 2)[0], ".")
}
