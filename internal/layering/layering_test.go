// Package layering holds the test that keeps the package dependency
// direction of DESIGN.md section 2 honest: it fails when a package imports
// (directly or not, outside tests) a package of this module it must not.
package layering

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/syncd-dev/syncd"

// allowed lists, per package, the module's packages it may depend on.
// internal/sqlitedb is a leaf shared by both sides: it opens SQLite with the
// pragma order durability depends on, and imports nothing of the module.
// cmd/, soak/, examples/ and tools/ may import anything.
var allowed = map[string][]string{
	"syncproto":                     {},
	"ledger":                        {},
	"internal/sqlitedb":             {},
	"replication":                   {"syncproto"},
	"client/offlinequeue":           {"internal/sqlitedb"},
	"client/netmonitor":             {},
	"client/reconnect":              {},
	"client":                        {"syncproto", "client/offlinequeue", "client/netmonitor", "client/reconnect", "internal/sqlitedb"},
	"server/auth":                   {"syncproto"},
	"server":                        {"syncproto", "replication", "ledger", "server/auth", "internal/sqlitedb"},
	"replication/logtest":           {"replication", "syncproto"},
	"ledger/ledgertest":             {"ledger"},
	"client/offlinequeue/queuetest": {"client/offlinequeue", "internal/sqlitedb"},
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
		rules, ruled := allowed[name]
		if !ruled {
			continue
		}
		checked++
		ok := map[string]bool{}
		for _, r := range rules {
			ok[r] = true
		}
		for _, d := range p.Deps {
			dep, inModule := strings.CutPrefix(d, module+"/")
			if inModule && !ok[dep] {
				t.Errorf("%s depends on %s, which DESIGN.md section 2 does not allow", name, dep)
			}
		}
	}
	require.Equal(t, len(allowed), checked, "every ruled package exists")
}
