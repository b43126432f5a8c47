package soak

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/soak/checker"
	"github.com/syncd-dev/syncd/soak/journal"
	"github.com/syncd-dev/syncd/soak/report"
)

// Bounds and tolerances of the end of a run.
const (
	sampleEvery = time.Second
	// leakSettle bounds the wait for syncd's counts to fall back to
	// baseline once every client is gone.
	leakSettle = 20 * time.Second
)

// leakTolerance is how far above its baseline syncd may end (invariant 6)
// with clients clients. Both readings include the harness's own scrape (a
// socket and a goroutine); the rest of the goroutine and file margin is
// for what the runtime starts lazily. The baseline is taken right after a
// start, when database/sql holds one SQLite connection; every connection
// holds the database file and its WAL open (the shared-memory file is
// opened once per process), and SQLite keeps a closed connection's
// descriptors while another connection holds a lock, reusing them later.
// syncd reads with at most one connection per session at a time, plus its
// committer and its snapshot, admin and retention readers, hence two
// descriptors per client and four connections more. A leak proportional
// to work (sessions, requests) outgrows these bounds: a run opens
// thousands of sessions.
//
// A cluster node's baseline is taken when it starts, before the cluster
// has done what it does once and then keeps: the snapshot object store's
// stream and its raft group appear with the first snapshot, routes and
// JetStream consumers come back after a cut or a peer's restart with
// their own goroutines and block files. clusterLeakMargin bounds that
// state; it does not grow with sessions or requests.
func leakTolerance(clients, nodes int) checker.Sample {
	t := checker.Sample{Goroutines: 3, FDs: 3, DatabaseFDs: 2 * (clients + 4)}
	if nodes > 1 {
		t.Goroutines += clusterLeakMargin.Goroutines
		t.FDs += clusterLeakMargin.FDs
	}
	return t
}

// clusterLeakMargin is the extra goroutines and open files a cluster node
// may end with above its baseline (see leakTolerance).
var clusterLeakMargin = checker.Sample{Goroutines: 16, FDs: 16}

// Result is what a run found.
type Result struct {
	// Dir holds the run's state, logs and report; ReportPath the report.
	Dir        string
	ReportPath string
	Seed       int64
	Check      checker.Result
	Faults     map[FaultKind]int
	Coverage   []report.Coverage
	// Health lists the harness's findings (processes that exited on their
	// own, unclean stops, race or panic reports).
	Health []string
	// Nodes is how many syncd processes ran; with more than one,
	// Converged says whether every node ended at the same applied stream
	// sequence with the same digest (the same records).
	Nodes     int
	Converged bool
	// Quiesced is false when the clients did not drain and catch up
	// within QuiesceTimeout; the state was checked anyway.
	Quiesced bool
	// Passed: every invariant holds, every coverage requirement is met,
	// the run quiesced and the harness found nothing.
	Passed bool
}

// Run runs one soak: it starts syncd and the clients, injects faults for
// cfg.Duration, quiesces, checks the invariants and writes the report. It
// returns an error only when the run could not be carried out (syncd would
// not build or start, a directory could not be written); a run that found
// violations returns them in Result. Every process it started is gone when
// it returns, also when ctx is cancelled.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	start := time.Now()
	dir := filepath.Join(cfg.Dir, start.UTC().Format("20060102T150405.000Z"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	r := &runner{cfg: cfg, dir: dir, start: start, counts: &counts{faults: map[FaultKind]int{}}}
	defer r.teardown()
	res, err := r.run(ctx)
	if err != nil {
		return nil, fmt.Errorf("soak: %w (state in %s)", err, dir)
	}
	return res, nil
}

// runner is one run in progress.
type runner struct {
	cfg     Config
	dir     string
	start   time.Time
	prof    []profile
	syncd   *syncdProc   // nodes[0]: the one whose database is checked
	nodes   []*syncdProc // every syncd process
	routes  *routes      // a cluster's NATS routes; nil with one node
	clients []*clientProc
	counts  *counts
	chaos   *chaos
	events  *os.File

	// convergence is each node's status when the nodes converged or the
	// wait for it ended (a cluster only).
	convergence []string

	mu       sync.Mutex // guards samples
	samples  []report.DepthSample
	quiesceT time.Duration
}

func (r *runner) path(name ...string) string {
	return filepath.Join(append([]string{r.dir}, name...)...)
}

// teardown kills whatever is still running; after a completed run it finds
// nothing to do but close the proxies and the event log.
func (r *runner) teardown() {
	for _, c := range r.clients {
		if c.running() {
			c.kill()
		}
		c.proxies.Close()
	}
	for _, n := range r.nodes {
		if n.running() {
			n.kill(context.Background())
		}
	}
	if r.routes != nil {
		r.routes.Close()
	}
	if r.events != nil {
		r.events.Close()
	}
}

func (r *runner) run(ctx context.Context) (*Result, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	bin := r.cfg.SyncdBinary
	if bin == "" {
		if bin, err = BuildSyncd(ctx, r.dir, r.cfg.BuildRace); err != nil {
			return nil, err
		}
	}
	r.start = time.Now() // the churn's time starts once syncd is built
	if r.events, err = os.Create(r.path("events.log")); err != nil {
		return nil, err
	}
	fmt.Fprintf(r.events, "soak run, seed %d\n", r.cfg.Seed)
	r.prof = population(&r.cfg)
	tokens, adminToken, err := issueTokens(r.path("tokens.json"), r.prof)
	if err != nil {
		return nil, err
	}
	sentinelToken, err := auth.Issue(r.path("tokens.json"), auth.Principal{Tenant: tenantMain, ClientID: sentinelClient, Read: []string{ModelNotes}, Write: []string{ModelNotes}}, time.Now())
	if err != nil {
		return nil, err
	}
	if err := r.newNodes(bin, adminToken); err != nil {
		return nil, err
	}
	var addrs []string
	for _, n := range r.nodes {
		addrs = append(addrs, n.addr)
	}
	var users []string
	for _, p := range r.prof {
		if p.scoped() {
			users = append(users, p.User)
		}
	}
	for i, p := range r.prof {
		cdir := r.path("clients", p.ID)
		if err := os.MkdirAll(cdir, 0o755); err != nil {
			return nil, err
		}
		proxies, err := newProxySet(addrs)
		if err != nil {
			return nil, err
		}
		queue := "queue.ndjson"
		if p.Queue == checker.QueueSQLite {
			queue = "queue.db"
		}
		r.clients = append(r.clients, &clientProc{
			cfg: childConfig{
				Profile: p, Token: tokens[i], ServerURLs: proxies.urls(i % len(r.nodes)),
				QueuePath: filepath.Join(cdir, queue), ReplicaPath: filepath.Join(cdir, "replica.db"), JournalPath: filepath.Join(cdir, "journal.ndjson"),
				Seed: r.cfg.Seed + int64(i+1)*1_000_003, WriteEvery: r.cfg.WriteEvery, Keys: r.cfg.Keys, HotKeys: r.cfg.HotKeys,
				ForgetAttempts: r.cfg.Break == BreakForgetAttempts, Users: users,
			},
			cfgPath: filepath.Join(cdir, "client.json"), logPath: filepath.Join(cdir, "client.log"), self: self, proxies: proxies,
		})
	}
	r.chaos = newChaos(&r.cfg, r.clients, r.nodes, r.routes, r.counts, r.events, r.start)
	r.chaos.wipeLedger = r.wipeLedger
	if err := r.chaos.startAll(ctx); err != nil {
		return nil, err
	}
	for _, c := range r.clients {
		if err := c.start(); err != nil {
			return nil, err
		}
	}

	sampleCtx, stopSampling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.sample(sampleCtx)
	}()
	err = r.chaos.run(ctx, r.start.Add(r.cfg.Duration))
	if err == nil {
		err = r.chaos.calm(ctx)
	}
	quiesced := false
	if err == nil {
		quiesced, err = r.quiesce(ctx)
	}
	if err == nil && quiesced {
		quiesced, err = r.sentinel(ctx, sentinelToken, r.cfg.QuiesceTimeout)
	}
	stopSampling()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	r.takeSample()
	return r.finish(ctx, quiesced)
}

// newNodes configures the syncd processes: one, as it always was, or a
// cluster whose routes go through fault proxies, each node on its own
// database under nodes/<id>/.
func (r *runner) newNodes(bin, adminToken string) error {
	addrs := func(n int) ([]string, error) {
		out := make([]string, n)
		for i := range out {
			a, err := freeAddr()
			if err != nil {
				return nil, err
			}
			out[i] = a
		}
		return out, nil
	}
	if r.cfg.Nodes == 1 {
		a, err := addrs(2)
		if err != nil {
			return err
		}
		r.syncd = newSyncd(bin, r.path("syncd.db"), r.path("tokens.json"), a[0], a[1], adminToken, r.path("syncd.log"), r.cfg.MaxClockSkew, scopeArgs...)
		r.nodes = []*syncdProc{r.syncd}
		return nil
	}
	routeAddrs, err := addrs(r.cfg.Nodes)
	if err != nil {
		return err
	}
	secret, err := cluster.NewSecret()
	if err != nil {
		return err
	}
	if err := cluster.WriteSecretFile(r.path("cluster.secret"), secret); err != nil {
		return err
	}
	var routeFlags [][]string
	if r.routes, routeFlags, err = newRoutes(routeAddrs); err != nil {
		return err
	}
	for i := range r.cfg.Nodes {
		a, err := addrs(3)
		if err != nil {
			return err
		}
		name := nodeName(i)
		if err := os.MkdirAll(r.path("nodes", name), 0o755); err != nil {
			return err
		}
		n := newSyncd(bin, r.path("nodes", name, "syncd.db"), r.path("tokens.json"), a[0], a[1], adminToken, r.path("nodes", name, "syncd.log"),
			r.cfg.MaxClockSkew, append(clusterArgs(i, a[2], routeAddrs[i], r.path("cluster.secret"), routeFlags[i]), scopeArgs...)...)
		n.name, n.readyTimeout, n.natsAddr, n.natsPassword = name, clusterReadyTimeout, a[2], secret.NodePassword()
		r.nodes = append(r.nodes, n)
	}
	r.syncd = r.nodes[0]
	return nil
}

// issueTokens writes the token file: one token per client (its tenant,
// client id and models) and an admin token.
func issueTokens(path string, prof []profile) (clients []string, admin string, err error) {
	now := time.Now()
	if admin, err = auth.Issue(path, auth.Principal{Admin: true}, now); err != nil {
		return nil, "", err
	}
	for _, p := range prof {
		tok, err := auth.Issue(path, auth.Principal{Tenant: p.Tenant, ClientID: p.ID, User: p.User, Read: p.Read, Write: p.Write, Scopes: p.Grants}, now)
		if err != nil {
			return nil, "", err
		}
		clients = append(clients, tok)
	}
	return clients, admin, nil
}

// wipeLedger deletes every decision of syncd's replay ledger, behind its
// back, keeping its per-tenant counts in step and its floors as they were
// (BreakLedgerAmnesia only).
func (r *runner) wipeLedger(ctx context.Context) error {
	db, err := sqlitedb.Open(ctx, r.path("syncd.db"), sqlitedb.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op after Commit
	for _, stmt := range []string{`DELETE FROM ledger_decisions`, `UPDATE ledger_scopes SET entries = 0`} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// sample records the clients' queue depths every sampleEvery and prints a
// progress line every ProgressEvery, until ctx ends.
func (r *runner) sample(ctx context.Context) {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	lastProgress := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s := r.takeSample()
		if r.cfg.Progress != nil && time.Since(lastProgress) >= r.cfg.ProgressEvery {
			lastProgress = time.Now()
			r.progress(ctx, s)
		}
	}
}

// takeSample records the clients' queue depths as they last reported them.
func (r *runner) takeSample() report.DepthSample {
	s := report.DepthSample{At: time.Since(r.start)}
	for _, c := range r.clients {
		st := c.status()
		s.Pending += st.Pending
		s.MaxPending = max(s.MaxPending, st.Pending)
		s.DeadLetters += st.DeadLetters
	}
	r.mu.Lock()
	r.samples = append(r.samples, s)
	r.mu.Unlock()
	return s
}

func (r *runner) progress(ctx context.Context, s report.DepthSample) {
	faults, restarts, health, _ := r.counts.snapshot()
	head := "-"
	if st, err := r.syncd.status(ctx); err == nil {
		head = fmt.Sprint(st.OplogHead)
	}
	phase := fmt.Sprintf("%v/%v", s.At.Round(time.Second), r.cfg.Duration)
	if s.At > r.cfg.Duration {
		phase = "quiescing " + (s.At - r.cfg.Duration).Round(time.Second).String()
	}
	fmt.Fprintf(r.cfg.Progress, "soak %s: oplog head %s, pending %d (max %d), dead letters %d, flaps %d, client crashes %d (restarts %d), syncd kills %d restarts %d, findings %d\n",
		phase, head, s.Pending, s.MaxPending, s.DeadLetters, flapsOf(faults), faults[FaultClientCrash]+faults[FaultOfflineCrash], restarts,
		faults[FaultSyncdCrash], faults[FaultSyncdRestart], len(health))
}

// quiesce tells every client to stop writing and waits, within
// QuiesceTimeout, until twice in a row every client has settled with the
// oplog's head unchanged.
func (r *runner) quiesce(ctx context.Context) (bool, error) {
	begin := time.Now()
	for _, c := range r.clients {
		r.counts.finding(c.send(cmdQuiesce))
	}
	deadline := begin.Add(r.cfg.QuiesceTimeout)
	stable, lastHead := 0, uint64(0)
	for {
		st, err := r.syncd.status(ctx)
		ok := err == nil
		for _, c := range r.clients {
			if !ok || !r.settled(ctx, c, st.OplogHead) {
				ok = false
				break
			}
		}
		if ok && st.OplogHead == lastHead {
			stable++
		} else {
			stable = 0
		}
		lastHead = st.OplogHead
		if stable >= 2 {
			r.quiesceT = time.Since(begin)
			fmt.Fprintf(r.events, "%9.3fs quiescent at oplog head %d after %v\n", time.Since(r.start).Seconds(), lastHead, r.quiesceT.Round(time.Millisecond))
			return true, nil
		}
		if time.Now().After(deadline) {
			r.quiesceT = time.Since(begin)
			for _, c := range r.clients {
				s := c.status()
				fmt.Fprintf(r.events, "%9.3fs not quiescent: %s pending %d connected %t cursor %d (head %d) err %q\n",
					time.Since(r.start).Seconds(), c.cfg.Profile.ID, s.Pending, s.Connected, s.Cursor, st.OplogHead, s.Err)
			}
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// settled reports whether client c has quiesced: it stopped writing, its
// queue holds nothing but dead letters, it is connected, and its cursor is
// at the head or past every entry it may read.
func (r *runner) settled(ctx context.Context, c *clientProc, head uint64) bool {
	s := c.status()
	if !s.Quiescing || s.Err != "" || s.Pending != 0 || !s.Connected {
		return false
	}
	if s.Cursor == head {
		return true
	}
	p := c.cfg.Profile
	done, err := r.syncd.caughtUp(ctx, p.Tenant, unscoped(p.Read), s.Cursor)
	return err == nil && done
}

// unscoped returns models without those a scope covers: a device is sent
// no entry of a value it does not follow, so its cursor may stay below
// such entries; sentinel covers what it does follow.
func unscoped(models []string) []string {
	var out []string
	for _, m := range models {
		if m != ModelTasks && m != ModelMembers {
			out = append(out, m)
		}
	}
	return out
}

// sentinelKey is the note the harness writes once the clients quiesced.
const sentinelKey = "soak-sentinel"

// sentinel writes one note of the main tenant as the harness (after every
// write of the run: the clients quiesced) and waits, within limit, until
// every client of the tenant that reads notes has its cursor there. The
// feed delivers in seq order and ends a value's backfill before its next
// frame, so a client past the sentinel has every entry and eviction of
// the values it follows: what the checker compares its replica with.
func (r *runner) sentinel(ctx context.Context, token string, limit time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	c, err := client.Open(ctx, client.Config{
		ServerURLs: []string{"http://" + r.syncd.addr}, Token: token, ClientID: sentinelClient,
		Queue: offlinequeue.NewMemory(offlinequeue.Options{}), ReplicaPath: r.path("sentinel-replica.db"),
		RetryInterval: 100 * time.Millisecond, MaxRetryInterval: time.Second,
	})
	if err != nil {
		return false, err
	}
	defer c.Close()
	op, err := c.Put(ctx, ModelNotes, sentinelKey, journal.Value{Write: "harness/sentinel"}.Encode())
	if err != nil {
		return false, err
	}
	o, err := c.Await(ctx, op)
	if err != nil || o.Status != client.StatusApplied {
		return false, errors.Join(err, fmt.Errorf("sentinel write: %s %s", o.Status, o.Reason))
	}
	fmt.Fprintf(r.events, "%9.3fs sentinel note at seq %d\n", time.Since(r.start).Seconds(), o.Seq)
	for {
		behind := ""
		for _, cl := range r.clients {
			p := cl.cfg.Profile
			if s := cl.status(); p.Tenant == tenantMain && s.Cursor < o.Seq {
				behind = fmt.Sprintf("%s at cursor %d", p.ID, s.Cursor)
				break
			}
		}
		if behind == "" {
			return true, nil
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(r.events, "%9.3fs not past the sentinel: %s\n", time.Since(r.start).Seconds(), behind)
			return false, nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// finish stops everything cleanly, measures syncd against its baseline,
// checks the state and writes the report.
func (r *runner) finish(ctx context.Context, quiesced bool) (*Result, error) {
	var wg sync.WaitGroup
	for _, c := range r.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.counts.finding(c.stop())
		}()
	}
	wg.Wait()
	for _, c := range r.clients {
		c.proxies.Close()
	}
	converged := true
	if len(r.nodes) > 1 {
		r.convergence, converged = converge(ctx, r.nodes)
		fmt.Fprintf(r.events, "%9.3fs nodes converged: %t: %s\n", time.Since(r.start).Seconds(), converged, joinLines(r.convergence))
		if !converged {
			r.counts.finding(fmt.Errorf("the nodes' records differ or lag: %s", joinLines(r.convergence)))
		}
	}
	proc := r.measureLeaks(ctx)
	for _, n := range r.nodes {
		r.counts.finding(n.terminate(ctx))
	}
	r.scanLogs()

	layout := checker.Layout{ServerDB: r.syncd.dbPath, Policies: policies, Scopes: scopes, Process: proc}
	for _, c := range r.clients {
		p := c.cfg.Profile
		layout.Clients = append(layout.Clients, checker.ClientLayout{ID: p.ID, Tenant: p.Tenant, Read: p.Read, User: p.User, Grants: p.Grants, Want: p.want(),
			QueueKind: p.Queue, QueuePath: c.cfg.QueuePath, ReplicaPath: c.cfg.ReplicaPath, JournalPath: c.cfg.JournalPath})
	}
	state, err := checker.Load(ctx, layout)
	if err != nil {
		return nil, err
	}
	check := checker.Check(state)
	faults, _, health, _ := r.counts.snapshot()
	res := &Result{Dir: r.dir, Seed: r.cfg.Seed, Nodes: len(r.nodes), Converged: converged, Check: check, Faults: faults, Health: health, Quiesced: quiesced}
	res.Coverage = r.coverage(faults)
	res.Passed = check.Holds() && quiesced && converged && len(health) == 0
	for _, c := range res.Coverage {
		res.Passed = res.Passed && c.OK()
	}
	if res.ReportPath, err = report.Write(r.dir, r.reportData(res, state)); err != nil {
		return nil, err
	}
	return res, nil
}

// clusterSummary describes a cluster's run for the report; the syncd
// counters of the other rows are node-1's alone.
func (r *runner) clusterSummary(res *Result, f map[FaultKind]int) string {
	return fmt.Sprintf("%d as a cluster (counters above are node-1's); route cuts %d; every node's records equal (same applied seq and digest): %t (%s)",
		len(r.nodes), f[FaultRouteCut], res.Converged, joinLines(r.convergence))
}

// coverage lists every enabled fault kind (each required once) and the
// flaps in total (MinFlaps required).
func (r *runner) coverage(faults map[FaultKind]int) []report.Coverage {
	var out []report.Coverage
	for _, k := range r.cfg.Faults {
		out = append(out, report.Coverage{Kind: string(k), Count: faults[k], Required: 1})
	}
	return append(out, report.Coverage{Kind: "network flaps, all kinds", Count: flapsOf(faults), Required: r.cfg.MinFlaps})
}

// measureLeaks waits (up to leakSettle) for syncd's goroutines and open
// files to fall back within tolerance of the baseline of its newest start,
// and returns the last reading.
func (r *runner) measureLeaks(ctx context.Context) checker.Process {
	p := checker.Process{Baseline: r.chaos.baselines[0], Tolerance: leakTolerance(r.cfg.Clients, r.cfg.Nodes)}
	deadline := time.Now().Add(leakSettle)
	for {
		sample, files, err := r.syncd.sample(ctx)
		if err != nil {
			p.Measured, p.Error = false, err.Error()
			return p
		}
		p.Measured, p.Final = true, sample
		base, tol := p.Baseline, p.Tolerance
		settled := sample.Goroutines <= base.Goroutines+tol.Goroutines && sample.FDs-sample.DatabaseFDs <= base.FDs-base.DatabaseFDs+tol.FDs &&
			sample.DatabaseFDs <= base.DatabaseFDs+tol.DatabaseFDs
		if settled || time.Now().After(deadline) {
			fmt.Fprintf(r.events, "%9.3fs syncd at quiescence: %d goroutines, %d open files (%d of the database): %s\n", time.Since(r.start).Seconds(),
				sample.Goroutines, sample.FDs, sample.DatabaseFDs, strings.Join(files, " "))
			return p
		}
		select {
		case <-ctx.Done():
			p.Measured, p.Error = false, ctx.Err().Error()
			return p
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// scanLogs reports race-detector reports and panics in the processes'
// logs as findings.
func (r *runner) scanLogs() {
	var logs []string
	for _, n := range r.nodes {
		logs = append(logs, n.logPath)
	}
	for _, c := range r.clients {
		logs = append(logs, c.logPath)
	}
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				r.counts.finding(err)
			}
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if strings.Contains(line, "WARNING: DATA RACE") || strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") {
				r.counts.finding(fmt.Errorf("%s:%d: %s", path, n, line))
			}
		}
		f.Close()
	}
}

// reportData assembles the report.
func (r *runner) reportData(res *Result, state *checker.State) report.Data {
	st := res.Check.Stats
	f := res.Faults
	_, restarts, _, markers := r.counts.snapshot()
	r.mu.Lock()
	samples := append([]report.DepthSample(nil), r.samples...)
	r.mu.Unlock()
	verdict := "FAIL"
	if res.Passed {
		verdict = "PASS"
	}
	made := 0
	var byClass []string
	for _, c := range sortedClasses(st.Made) {
		made += st.Made[c]
		byClass = append(byClass, fmt.Sprintf("%s %d", c, st.Made[c]))
	}
	var flapKinds []string
	for _, k := range NetworkFaults {
		if f[k] > 0 {
			flapKinds = append(flapKinds, fmt.Sprintf("%s %d", k, f[k]))
		}
	}
	quiesce := fmt.Sprintf("reached in %v", r.quiesceT.Round(100*time.Millisecond))
	if !res.Quiesced {
		quiesce = fmt.Sprintf("**not reached** within %v (see events.log)", r.cfg.QuiesceTimeout)
	}
	mutations := []string{}
	for _, s := range []string{"applied", "duplicate", "superseded", "conflict", "rejected", "expired"} {
		mutations = append(mutations, fmt.Sprintf("%s %.0f", s, r.syncd.counter(`syncd_mutations_total{status="`+s+`"}`)))
	}
	lat := st.Latency
	summary := []report.Row{
		{Name: "verdict", Value: verdict},
		{Name: "seed", Value: fmt.Sprintf("%d (replay with --seed %d)", r.cfg.Seed, r.cfg.Seed)},
		{Name: "churn", Value: fmt.Sprintf("%v with %d clients", r.cfg.Duration, r.cfg.Clients)},
		{Name: "quiescence", Value: quiesce},
		{Name: "writes made", Value: fmt.Sprintf("%d (%s)", made, strings.Join(byClass, ", "))},
		{Name: "calls that failed / interrupted by a crash", Value: fmt.Sprintf("%d / %d", st.Failed, st.CrashWindow)},
		{Name: "network flaps", Value: fmt.Sprintf("%d (%s)", flapsOf(f), strings.Join(flapKinds, ", "))},
		{Name: "client crashes (SIGKILL)", Value: fmt.Sprintf("%d (online %d, while offline %d); restarts %d", f[FaultClientCrash]+f[FaultOfflineCrash], f[FaultClientCrash], f[FaultOfflineCrash], restarts)},
		{Name: "syncd kills (SIGKILL) / graceful restarts", Value: fmt.Sprintf("%d / %d (%d generations)", f[FaultSyncdCrash], f[FaultSyncdRestart], r.syncd.gen)},
		{Name: "duplicates absorbed (syncd_ledger_hits_total)", Value: fmt.Sprintf("at least %.0f", r.syncd.counter("syncd_ledger_hits_total"))},
		{Name: "conflicts", Value: fmt.Sprintf("%.0f conflict-log rows (syncd_conflicts_total); outcomes superseded %d, conflict %d (handler rebased %d, dropped %d)",
			r.syncd.counter("syncd_conflicts_total"), st.Outcomes["superseded"], st.Outcomes["conflict"], st.Rebased, st.Dropped)},
		{Name: "dead letters", Value: fmt.Sprint(st.DeadLetters)},
		{Name: "rows of scoped models received and judged at the wire", Value: fmt.Sprint(st.Received)},
		{Name: "replay latency (Put returned to outcome recorded)", Value: fmt.Sprintf("p50 %v, p90 %v, p99 %v, max %v over %d writes",
			lat.P50.Round(time.Millisecond), lat.P90.Round(time.Millisecond), lat.P99.Round(time.Millisecond), lat.Max.Round(time.Millisecond), lat.N)},
		{Name: "pushed mutations by result (syncd_mutations_total, at least)", Value: strings.Join(mutations, ", ")},
		{Name: "server at the end", Value: fmt.Sprintf("oplog head %d, %d entries, %d records, %d conflict-log rows", state.Server.Head, st.Oplog, st.Records, st.Conflicts)},
	}
	if len(r.nodes) > 1 {
		summary = append(summary, report.Row{Name: "syncd cluster", Value: r.clusterSummary(res, f)})
	}
	var skews []string
	for _, p := range r.prof {
		desc := fmt.Sprintf("%s: %s, %s queue", p.ID, p.Tenant, p.Queue)
		if p.Skew != 0 {
			desc += fmt.Sprintf(", clock %+v", p.Skew)
		}
		if !p.writesDocs() {
			desc += ", notes only"
		}
		skews = append(skews, desc)
	}
	faultsOn := make([]string, len(r.cfg.Faults))
	for i, k := range r.cfg.Faults {
		faultsOn[i] = string(k)
	}
	cfg := []report.Row{
		{Name: "duration", Value: r.cfg.Duration.String()},
		{Name: "clients", Value: fmt.Sprint(r.cfg.Clients)},
		{Name: "faults on", Value: strings.Join(faultsOn, ", ")},
		{Name: "mean time between flaps / client crashes / syncd restarts", Value: fmt.Sprintf("%v / %v / %v", r.cfg.FlapEvery, r.cfg.ClientCrashEvery, r.cfg.SyncdCrashEvery)},
		{Name: "mean time between writes of one client", Value: r.cfg.WriteEvery.String()},
		{Name: "keys per model (hot)", Value: fmt.Sprintf("%d (%d)", r.cfg.Keys, r.cfg.HotKeys)},
		{Name: "models", Value: "notes=lww, docs=optimistic, audit (read-only for every token: the poison target)"},
		{Name: "syncd --max-clock-skew", Value: r.cfg.MaxClockSkew.String()},
		{Name: "quiesce timeout", Value: r.cfg.QuiesceTimeout.String()},
		{Name: "leak tolerance", Value: fmt.Sprintf("+%d goroutines, +%d open files besides the database's, +%d of the database's",
			leakTolerance(r.cfg.Clients, r.cfg.Nodes).Goroutines, leakTolerance(r.cfg.Clients, r.cfg.Nodes).FDs, leakTolerance(r.cfg.Clients, r.cfg.Nodes).DatabaseFDs)},
		{Name: "deliberately broken", Value: breakName(r.cfg.Break)},
		{Name: "population", Value: strings.Join(skews, "; ")},
	}
	rm := make([]report.Marker, len(markers))
	for i, m := range markers {
		rm[i] = report.Marker{At: m.at, Label: m.label}
	}
	return report.Data{
		Title: "syncd soak " + filepath.Base(r.dir), Passed: res.Passed,
		Hypothesis: "while clients write through network flaps, client and syncd crashes, skewed clocks and poison writes, " +
			"no write is lost, none is applied twice, and every replica converges on the server's records once the faults stop.",
		Summary: summary, Verdicts: res.Check.Verdicts, Coverage: res.Coverage, Health: res.Health, Config: cfg,
		Depth: samples, Markers: rm,
		Files: []report.Row{
			{Name: "events.log", Value: "every fault and restart, with its time"},
			{Name: "syncd.db, syncd.log", Value: "the server's database and every generation's log"},
			{Name: "clients/cNN/", Value: "journal.ndjson, the queue, replica.db and client.log of each client; client.json, its configuration (token included, mode 0600)"},
			{Name: "tokens.json", Value: "the token file syncd ran with (hashes only)"},
		},
	}
}

func breakName(b Break) string {
	if b == BreakNone {
		return "nothing"
	}
	return string(b)
}

func sortedClasses[K ~string, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
