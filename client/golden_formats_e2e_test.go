package client_test

import (
	"encoding/json"
	"flag"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/mattn/go-sqlite3"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/soak/faultproxy"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite client/testdata/formats/v1 from this build (go test ./client -run TestGoldenFormats -update-golden)")

// goldenDir holds the device files of this release's formats, with writes
// in every state, for the next release's migration test to open: a SQLite
// queue holding the replica and outcomes (queue.db), and an NDJSON queue
// with its replica database (queue.ndjson, replica.db). manifest.json
// names the op ids by state.
const goldenDir = "testdata/formats/v1"

const goldenClient = "golden-1"

// goldenManifest names the golden files' writes by the state they are in.
type goldenManifest struct {
	Decided  string   `json:"decided"`  // applied, its outcome recorded
	Dead     string   `json:"dead"`     // dead-lettered (forbidden_model)
	Pending  []string `json:"pending"`  // queued, never sent
	Charged  string   `json:"charged"`  // queued, refused before: attempts 2 (one of Pending)
	Versions []uint64 `json:"versions"` // value_version of each Pending write
}

var goldenKinds = map[string]deviceOptions{"sqlite": {}, "ndjson": {fileQueue: true}}

// writeGolden makes the files of kind in dir through a real syncd.
func writeGolden(t *testing.T, kind, dir string) goldenManifest {
	s := startSyncd(t, server.Config{})
	o := goldenKinds[kind]
	o.token = s.Issue(t, auth.Principal{Tenant: tenant, ClientID: goldenClient, Read: []string{auth.Wildcard}, Write: []string{"notes"}})
	o.tweak = func(c *client.Config) { c.ModelVersions = map[string]uint64{"notes": 2} }
	d := openDevice(t, s, s.proxy(t), dir, goldenClient, o)
	var m goldenManifest
	m.Decided = d.put(t, "notes", "decided", `{"name":"applied"}`)
	d.requireApplied(t, []string{m.Decided})
	m.Dead = d.put(t, "ro", "dead", `{"name":"forbidden"}`)
	require.Equal(t, client.StatusDeadLettered, d.await(t, m.Dead).Status)
	d.offline()
	d.waitOffline(t)
	m.Pending = []string{d.put(t, "notes", "p1", `{"name":"pending"}`), d.put(t, "notes", "p2", `{"name":"charged"}`)}
	m.Charged = m.Pending[1]
	m.Versions = []uint64{2, 2}
	items := d.queued(t)
	require.Len(t, items, 2)
	require.NoError(t, d.queue.SetAttempts(t.Context(), items[1].ID, 2))
	require.NoError(t, d.Close())
	return m
}

// TestGoldenFormats opens this release's golden device files (see
// goldenDir) under the current client and replays them against a current
// syncd: every queued write is decided exactly once (the charged one
// keeps its attempts until then), the decided one is not sent again, the
// dead letter and the outcomes are kept. With -update-golden it first
// writes the files anew from this build.
func TestGoldenFormats(t *testing.T) {
	for kind := range goldenKinds {
		t.Run(kind, func(t *testing.T) {
			golden := filepath.Join(goldenDir, kind)
			if *updateGolden {
				tmp := t.TempDir()
				m := writeGolden(t, kind, tmp)
				require.NoError(t, os.RemoveAll(golden))
				require.NoError(t, os.MkdirAll(golden, 0o755))
				for _, f := range []string{"queue.db", "queue.ndjson", "replica.db"} {
					if b, err := os.ReadFile(filepath.Join(tmp, f)); err == nil {
						require.NoError(t, os.WriteFile(filepath.Join(golden, f), b, 0o644))
					}
				}
				b, err := json.MarshalIndent(m, "", "  ")
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(golden, "manifest.json"), append(b, '\n'), 0o644))
			}
			var m goldenManifest
			b, err := os.ReadFile(filepath.Join(golden, "manifest.json"))
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &m))
			dir := copyDir(t, golden)

			s := startSyncd(t, server.Config{})
			d := openGolden(t, s, kind, dir, s.token(t, goldenClient))
			requireGoldenReplays(t, s, d, m, tenant)
		})
	}
}

// openGolden opens a device over the golden files of kind copied into
// dir, reaching s with token, with the golden's model versions. Its
// network is down until requireGoldenReplays has read the queue as the
// files left it (a device online at open may replay it first).
func openGolden(t *testing.T, s *syncd, kind, dir, token string) *device {
	t.Helper()
	o := goldenKinds[kind]
	o.token = token
	o.tweak = func(c *client.Config) { c.ModelVersions = map[string]uint64{"notes": 2} }
	p := s.proxy(t)
	p.SetMode(faultproxy.Refuse)
	return openDevice(t, s, p, dir, goldenClient, o)
}

// requireGoldenReplays checks that d, opened over golden files whose
// writes m names, holds them in the states they were in and replays them
// against s in tenant: every queued write is decided exactly once (the
// charged one keeps its attempts until then), the decided one is not sent
// again, the dead letter and the outcomes are kept.
func requireGoldenReplays(t *testing.T, s *syncd, d *device, m goldenManifest, tenant string) {
	t.Helper()
	items := d.queued(t)
	require.Len(t, items, len(m.Pending))
	for i, it := range items {
		mut := queuedMutation(t, it)
		require.Equal(t, m.Pending[i], mut.OpID)
		require.Equal(t, m.Versions[i], mut.ValueVersion)
		if mut.OpID == m.Charged {
			require.EqualValues(t, 2, it.Attempts)
		}
	}
	d.online()
	require.NoError(t, d.Drain(t.Context()))
	d.requireApplied(t, m.Pending)
	counts := map[string]int{}
	for _, e := range s.Oplog(t, "&"+url.Values{adminapi.ParamTenant: {tenant}}.Encode()) {
		counts[e.OpID]++
	}
	for _, op := range m.Pending {
		require.Equal(t, 1, counts[op], "applied once")
	}
	require.Zero(t, counts[m.Decided], "a decided write is not sent again")
	o, found, err := d.Lookup(t.Context(), m.Decided)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, client.StatusApplied, o.Status)
	dead, err := d.DeadLetters(t.Context(), 0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, m.Dead, dead[0].Mutation.OpID)
	require.Contains(t, dead[0].Reason, "forbidden_model")
	require.Equal(t, 0, d.status(t).Pending)
}

// copyDir copies the files of dir into a fresh temporary directory.
func copyDir(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(out, e.Name()), b, 0o600))
	}
	return out
}
