package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// The shape of issue 24's fairness scenario, as server.BenchmarkFairness
// runs it in syncd's own process: tenant A floods from fairFloodConns
// sessions (one token each) in closed loop with pushes of fairPushSize
// mutations; tenant B's one device does fairWrites sequential awaited
// writes; A alone is measured over fairAloneWindow, after fairWarmup.
const (
	fairFloodConns  = 50
	fairPushSize    = 100
	fairWrites      = 500
	fairAloneWindow = 2 * time.Second
	fairWarmup      = 200 * time.Millisecond
	// fairChildLimit bounds a fairness child's life whatever its parent
	// does; the parent waits for a child's exit at most fairChildLimit
	// plus procStopTimeout.
	fairChildLimit = 10 * time.Minute
)

// fairDeviceEnv names BenchmarkFairnessProcesses's device form:
// fairDeviceClient (unset), fairDeviceClientNormal or fairDeviceRaw.
const fairDeviceEnv = "SYNCD_BENCH_FAIR_DEVICE"

// BenchmarkFairnessProcesses is server.BenchmarkFairness the way users
// run syncd: the syncd binary (this package built, syncdBinary) in its own
// process at its default flags (beside a fresh data directory, the token
// file and loopback listeners), tenant A's flood in a child process and
// tenant B's device (the client library over its SQLite queue) in
// another, so A's load competes with B's session for the machine's cores
// but not inside syncd's scheduler. Same phases (B alone; A alone for
// fairAloneWindow; A flooding while B writes) and the same metrics:
//
//	b_p99_alone_ms, b_p99_flood_ms  B's awaited-write p99
//	b_p99_ratio                     flood over alone (aimed: <= 2)
//	a_mut/s_alone, a_mut/s_shared   A's mutations per second
//	a_ratio                         shared over alone (aimed: >= 0.8)
//
// and two figures of what the load's processes took from the cores syncd
// runs on (in a deployment, other machines'): a_gen_cores, the cores A's
// generator kept busy while it flooded beside B (its CPU time over its
// life), and b_dev_cpu_ms/write, B's device's CPU time (its opening
// included) over its writes, in that phase.
//
// A's shared rate is over B's writes (the first one's start to the last
// one's end, as B's process saw them). One op is the whole scenario, on a
// fresh syncd. fairDeviceEnv picks B's device's form, to tell the parts of
// B's latency apart: the client library at its defaults (the default),
// its queue at synchronous=NORMAL, or a raw session as
// server.BenchmarkFairness's device.
func BenchmarkFairnessProcesses(b *testing.B) {
	form := cmp.Or(os.Getenv(fairDeviceEnv), fairDeviceClient)
	var bAlone, bFlood, aAlone, aShared, genCores, devCPU []float64
	for range b.N {
		r := startFairRig(b, []string{"flooder-alone", "flooder"}, []string{"honest-alone", "honest"})
		bAlone = append(bAlone, p99(r.device(b, "honest-alone", fairWrites, form).Lat))

		f := r.startFlood(b, "flooder-alone", 1<<20, fairPushSize)
		time.Sleep(fairWarmup)
		from := time.Now()
		time.Sleep(fairAloneWindow)
		aAlone = append(aAlone, f.stop(b).rate(fairPushSize, from, time.Now()))

		f = r.startFlood(b, "flooder", 1<<20, fairPushSize)
		time.Sleep(fairWarmup)
		dev := r.device(b, "honest", fairWrites, form)
		flood := f.stop(b)
		aShared = append(aShared, flood.rate(fairPushSize, time.Unix(0, dev.From), time.Unix(0, dev.To)))
		genCores = append(genCores, flood.CPU.Seconds()/flood.Took.Seconds())
		devCPU = append(devCPU, ms(dev.CPU)/float64(len(dev.Lat)))
		bFlood = append(bFlood, p99(dev.Lat))
		r.node.kill(b)
	}
	syncdtest.ReportFairness(b, bAlone, bFlood, aAlone, aShared)
	slices.Sort(genCores)
	slices.Sort(devCPU)
	b.ReportMetric(genCores[len(genCores)/2], "a_gen_cores")
	b.ReportMetric(devCPU[len(devCPU)/2], "b_dev_cpu_ms/write")
}

// With tenant A flooding the syncd process from 50 sessions in a child
// process, tenant B's device in another process gets every one of its
// sequential awaited writes applied, A's pushes are all applied, and the
// server holds exactly what each was told: B's keys and A's acknowledged
// writes, no more, no fewer, nothing left queued. Outcomes only;
// BenchmarkFairnessProcesses measures the latencies.
func TestFairnessProcessesFloodingTenantLeavesAnotherItsWrites(t *testing.T) {
	const writes, pushes, pushSize = 100, 20, 20 // the benchmark's shape, smaller: bounded in count
	r := startFairRig(t, []string{"flooder"}, []string{"honest"})
	f := r.startFlood(t, "flooder", pushes, pushSize)
	dev := r.device(t, "honest", writes, fairDeviceClient)
	flood := f.stop(t) // once B is done, if A is not
	require.Len(t, dev.Lat, writes, "B's device did every write")
	require.NotEmpty(t, flood.Acks, "A's pushes were served while B wrote")
	aMutations := len(flood.Acks) * pushSize
	during := flood.rate(pushSize, time.Unix(0, dev.From), time.Unix(0, dev.To)) * float64(dev.To-dev.From) / float64(time.Second)
	t.Logf("A's mutations acknowledged: %d, %.0f of them during B's writes", aMutations, during)

	srv := r.pc.admin(r.node)
	require.Equal(t, fmt.Sprint(writes), srv.Metric(t, `syncd_commit_served_mutations_total{tenant="honest"}`))
	require.Equal(t, fmt.Sprint(aMutations), srv.Metric(t, `syncd_commit_served_mutations_total{tenant="flooder"}`))
	require.Equal(t, "0", srv.Metric(t, `syncd_commit_queued_mutations{tenant="flooder"}`), "nothing left queued")

	_, recs := srv.Snapshot(t, r.tenants["honest"][0].Token)
	var keys []string
	for _, rec := range recs {
		keys = append(keys, rec.Key)
	}
	want := make([]string, writes)
	for i := range want {
		want[i] = fmt.Sprintf("k%d", i)
	}
	require.ElementsMatch(t, want, keys, "B's tenant holds exactly B's writes")
	_, recs = srv.Snapshot(t, r.tenants["flooder"][0].Token)
	require.Len(t, recs, aMutations, "A's tenant holds exactly A's acknowledged writes")
}

// fairRig is one syncd process at its defaults with the fairness
// tenants' tokens issued.
type fairRig struct {
	pc      *procCluster
	node    *procNode
	dir     string
	tenants map[string][]fairDevice
}

// startFairRig starts syncd (startProcSingle: its defaults, a fresh data
// directory, loopback listeners) and issues fairFloodConns tokens in each
// flood tenant and one in each device tenant, then waits until syncd
// admits them (it reads a changed token file within a second or so).
func startFairRig(t testing.TB, floods, devices []string) *fairRig {
	t.Helper()
	pc := startProcSingle(t)
	r := &fairRig{pc: pc, node: pc.nodes[0], dir: t.TempDir(), tenants: map[string][]fairDevice{}}
	var ps []auth.Principal
	add := func(tenant, clientID string) {
		r.tenants[tenant] = append(r.tenants[tenant], fairDevice{ClientID: clientID})
		ps = append(ps, auth.Principal{Tenant: tenant, ClientID: clientID, Read: []string{auth.Wildcard}, Write: []string{auth.Wildcard}})
	}
	for _, tenant := range floods {
		for i := range fairFloodConns {
			add(tenant, fmt.Sprintf("%s-%d", tenant, i))
		}
	}
	for _, tenant := range devices {
		add(tenant, "device")
	}
	tokens, err := auth.IssueMany(pc.tokens, ps, time.Now())
	require.NoError(t, err)
	i := 0
	for _, tenant := range append(slices.Clone(floods), devices...) {
		for j := range r.tenants[tenant] {
			r.tenants[tenant][j].Token = tokens[i]
			i++
		}
	}
	last := ps[len(ps)-1]
	deadline := time.Now().Add(procStartTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := dialPush(ctx, r.node, tokens[len(tokens)-1], last.ClientID, syncproto.NewClock(last.ClientID, nil))
		cancel()
		if err == nil {
			c.close()
			return r
		}
		require.True(t, time.Now().Before(deadline), "syncd did not admit the issued tokens: %v", err)
		time.Sleep(100 * time.Millisecond)
	}
}

// fairChild is one fairness child process.
type fairChild struct {
	*procNode
	spec fairSpec
}

// startChild starts the child of spec (its role and devices; the rest is
// filled in here) named name; it is killed when t ends if it still runs.
func (r *fairRig) startChild(t testing.TB, name string, spec fairSpec) *fairChild {
	t.Helper()
	dir := filepath.Join(r.dir, name)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	spec.URL, spec.Dir, spec.Limit = r.node.url, dir, fairChildLimit
	spec.Ready, spec.Out = filepath.Join(dir, "ready"), filepath.Join(dir, "report.json")
	b, err := json.Marshal(spec)
	require.NoError(t, err)
	specPath := filepath.Join(dir, "spec.json")
	require.NoError(t, os.WriteFile(specPath, b, 0o600))
	c := &fairChild{procNode: &procNode{name: name, dir: dir, bin: os.Args[0], args: []string{fairChildArg, specPath}, logPath: filepath.Join(dir, "child.log")}, spec: spec}
	t.Cleanup(func() { c.kill(t) })
	c.start(t)
	return c
}

// startFlood starts tenant's flood in a child process, each session
// pushing at most pushes pushes of pushSize, and waits until every session
// is open and pushing.
func (r *fairRig) startFlood(t testing.TB, tenant string, pushes, pushSize int) *fairChild {
	t.Helper()
	c := r.startChild(t, tenant, fairSpec{Role: fairFlood, Devices: r.tenants[tenant], Pushes: pushes, PushSize: pushSize})
	deadline := time.Now().Add(procStartTimeout)
	for {
		if _, err := os.Stat(c.spec.Ready); err == nil {
			return c
		}
		if !c.running() {
			c.wait(t) // fails t with the child's report
		}
		require.True(t, time.Now().Before(deadline), "%s's sessions not open within %s:\n%s", tenant, procStartTimeout, syncdLines(c.logPath, 20))
		time.Sleep(20 * time.Millisecond)
	}
}

// device runs tenant's device of the given form in a child process to
// its end and returns its report: every write applied, or t fails.
func (r *fairRig) device(t testing.TB, tenant string, writes int, form string) fairReport {
	t.Helper()
	return r.startChild(t, tenant, fairSpec{Role: fairDeviceRole, Devices: r.tenants[tenant], Writes: writes, Device: form}).wait(t)
}

// stop asks c to stop (SIGTERM: a flood ends its pushes in flight) and
// returns its report.
func (c *fairChild) stop(t testing.TB) fairReport {
	t.Helper()
	if c.running() {
		require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	}
	return c.wait(t)
}

// wait waits for c's exit and returns its report, failing t when the
// child failed.
func (c *fairChild) wait(t testing.TB) fairReport {
	t.Helper()
	select {
	case <-c.exited:
	case <-time.After(fairChildLimit + procStopTimeout):
		t.Fatalf("%s did not exit within %s", c.name, fairChildLimit+procStopTimeout)
	}
	b, err := os.ReadFile(c.spec.Out)
	require.NoError(t, err, "%s (%v) wrote no report:\n%s", c.name, c.err, syncdLines(c.logPath, 20))
	var rep fairReport
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Empty(t, rep.Err, "%s failed", c.name)
	require.NoError(t, c.err, "%s's exit:\n%s", c.name, syncdLines(c.logPath, 20))
	return rep
}

// rate is a flood's mutations a second acknowledged in (from, to], its
// pushes being of pushSize mutations.
func (rep fairReport) rate(pushSize int, from, to time.Time) float64 {
	n := 0
	for _, at := range rep.Acks {
		if at > from.UnixNano() && at <= to.UnixNano() {
			n++
		}
	}
	return float64(n*pushSize) / to.Sub(from).Seconds()
}

// p99 is the 99th percentile of lat in milliseconds.
func p99(lat []time.Duration) float64 {
	s := loadStats{lat: lat}
	return ms(s.quantile(0.99))
}
