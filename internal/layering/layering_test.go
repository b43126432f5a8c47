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
// internal/dirsync, the one directory fsync, is a leaf under it.
// internal/jsonscan, the JSON walker under syncproto's fast readers, is a
// leaf too: syncproto may import it and nothing else of the module.
//
// The programs have rules too. syncctl talks to syncd through adminapi and
// never links the server (nor, through replication/cluster, NATS); it
// reads and writes the files an operator hands it offline: device queue
// files (client/...), the token file (server/auth) and a database backup
// it re-identifies (replication). syncd is the one program that links the
// server (and the client library only for its credential format). The soak drives syncd as a separate
// process through its admin API: it links the client, never the server
// (replication/cluster only to read the command stream). The example app
// uses the client library alone.
//
// Every package of the module has a rule (a new package adds its own), but
// the packages in anything.
var allowed = map[string][]string{
	"syncproto":                     {"internal/jsonscan"},
	"internal/jsonscan":             {},
	"ledger":                        {},
	"internal/sqlitedb":             {"internal/dirsync", "internal/crashpoint"},
	"internal/crashpoint":           {},
	"internal/crashpoint/crashtest": {"internal/crashpoint"},
	"internal/dirsync":              {},
	"internal/textsafe":             {},
	"internal/loopback":             {},
	"internal/fakeclock":            {},
	"internal/race":                 {},
	"internal/fairshare":            {},
	"internal/atomicfile":           {"internal/dirsync"},
	"internal/buildinfo":            {},
	"internal/datalock":             {},
	"internal/breaker":              {},
	"internal/peerbench":            {},
	"replication":                   {"syncproto", "ledger", "internal/breaker", "internal/sqlitedb"},
	"client/offlinequeue":           {"internal/sqlitedb", "internal/dirsync"},
	"client/netmonitor":             {},
	"client/reconnect":              {},
	"client/synccore":               {"syncproto"},
	"client":                        {"syncproto", "client/synccore", "client/offlinequeue", "client/netmonitor", "client/reconnect", "internal/sqlitedb", "internal/dirsync"},
	"server/auth":                   {"syncproto", "adminapi", "internal/atomicfile"},
	"server/auth/authtest":          {"server/auth"},
	"server":                        {"syncproto", "replication", "replication/cluster", "ledger", "server/auth", "server/console", "adminapi", "internal/sqlitedb", "internal/buildinfo", "internal/fairshare"},
	"server/console":                {"adminapi", "syncproto"},
	"adminapi":                      {"syncproto"},
	"replication/logtest":           {"replication", "syncproto", "ledger"},
	"replication/cluster":           {"replication", "syncproto", "ledger", "internal/dirsync", "internal/atomicfile", "internal/fairshare"},
	"ledger/ledgertest":             {"ledger"},
	"client/offlinequeue/queuetest": {"client/offlinequeue", "internal/sqlitedb", "internal/fakeclock"},
	"internal/layering":             {},
	"internal/metricscatalogue":     {},
	"cmd/syncctl":                   {"adminapi", "syncproto", "client", "client/offlinequeue", "server/auth", "replication", "internal/atomicfile", "internal/jsonscan", "internal/sqlitedb", "internal/textsafe", "internal/buildinfo", "internal/datalock"},
	"cmd/syncd":                     {"server", "server/auth", "replication", "replication/cluster", "client", "internal/sqlitedb", "internal/buildinfo", "internal/datalock"},
	"soak":                          {"adminapi", "client", "client/offlinequeue", "client/reconnect", "server/auth", "replication/cluster", "internal/loopback", "internal/sqlitedb", "soak/checker", "soak/faultproxy", "soak/journal", "soak/report"},
	"soak/checker":                  {"client", "client/offlinequeue", "replication", "syncproto", "internal/sqlitedb", "soak/journal"},
	"soak/report":                   {"soak/checker"},
	"soak/journal":                  {},
	"soak/faultproxy":               {},
	"soak/cmd/soak":                 {"soak"},
	"examples/notes":                {"client", "client/offlinequeue", "internal/textsafe"},
	"tools/benchtable":              {},
}

// anything lists the packages that may import any package of the module:
// the test kit, which starts the whole server for tests.
var anything = []string{testOnly}

// testOnly is the package that starts real syncd servers for tests: only
// _test.go files may import it (go list's Deps leave test files out, so any
// import it sees is a non-test one).
const testOnly = "syncdtest"

// thirdParty lists, for the packages that promise to stay small, the only
// modules outside the standard library they may depend on: syncproto is
// what a client in any language mirrors, so it stays plain.
var thirdParty = map[string][]string{
	"syncproto": {"github.com/google/uuid"},
}

// neverLinks lists, for the programs that promise to stay light, module
// path prefixes they must not depend on: the admin CLI does not carry an
// embedded NATS server.
var neverLinks = map[string][]string{
	"cmd/syncctl": {"github.com/nats-io/"},
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
			if !slices.Contains(anything, name) {
				t.Errorf("%s has no rule: add what it may import to allowed (DESIGN.md section 2)", name)
			}
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
			case !inModule && underAny(d, neverLinks[name]):
				t.Errorf("%s depends on %s, which it promises never to link", name, d)
			case !inModule && limited && !isStdlib(d) && !underAny(d, external):
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

// underAny reports whether an import path starts with one of prefixes.
func underAny(path string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(path, p) })
}

// isStdlib reports whether an import path is the standard library's: its
// first element has no dot.
func isStdlib(path string) bool {
	return !strings.Contains(strings.SplitN(path, "/", 2)[0], ".")
}
