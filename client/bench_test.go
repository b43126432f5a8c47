package client_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// The client's benchmarks (issue 4), each beside what bounds it, measured in
// the same run:
//
//	BenchmarkReplay       queued writes replayed into syncd over loopback,
//	                      beside the server's raw SQLite row writes for them
//	BenchmarkInitialSync  a fresh replica loaded from syncd's snapshot,
//	                      beside a raw SQLite insert of the same rows
//	BenchmarkReplayRSS    the client's peak RSS replaying a deep queue, in a
//	                      child process of its own
//
// Each one does a fixed amount of work per iteration (not b.N-scaled: the
// point is the rate at a given depth), so one iteration runs whatever
// -benchtime asks. The counts come from environment variables, for a quick
// look at smaller depths:
//
//	SYNCD_BENCH_REPLAY_N  queued writes BenchmarkReplay replays (100000)
//	SYNCD_BENCH_SYNC_N    server records BenchmarkInitialSync loads (1000000)
//	SYNCD_BENCH_RSS_N     queued writes BenchmarkReplayRSS replays (1000000)
//	SYNCD_BENCH_WAIT      how long one benchmark may run (20m); never past
//	                      the test binary's -test.timeout, less a margin
//
// A benchmark whose client has not finished by its deadline fails, saying how
// far it got; none waits longer.
const (
	envReplayN   = "SYNCD_BENCH_REPLAY_N"
	envSyncN     = "SYNCD_BENCH_SYNC_N"
	envRSSN      = "SYNCD_BENCH_RSS_N"
	envWait      = "SYNCD_BENCH_WAIT"
	envRSSChild  = "SYNCD_BENCH_RSS_CHILD" // set by BenchmarkReplayRSS for its child
	defaultWait  = 20 * time.Minute
	benchTenant  = "acme"
	benchModel   = "notes"
	pollInterval = 50 * time.Millisecond
)

// BenchmarkReplay replays SYNCD_BENCH_REPLAY_N (100,000) queued puts of new
// keys into a real syncd over loopback and reports:
//
//	mut/s          writes replayed per second, from client.Open until the
//	               queue is empty (every outcome recorded, every item done)
//	ceiling_mut/s  the server's raw SQLite row writes for the same writes
//	               (replayCeiling), in transactions of one push batch
//	ratio          mut/s over ceiling_mut/s (target >= 0.4)
//
// Before the timer, the queue is filled through offlinequeue's public API by
// concurrent producers (benchFillQueue) and the client is opened once with no
// server reachable, so the replica's pending overlay holds the writes as it
// would after the app made them with Put while offline; the timed Open only
// replays. Every write's outcome is checked (applied) after the timer.
func BenchmarkReplay(b *testing.B) {
	n := benchEnvInt(b, envReplayN, 100_000)
	ctx := benchContext(b)
	var replaySecs, ceilingSecs float64
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		const clientID = "replay-device"
		muts := benchMutations(b, clientID, n)
		ceilingSecs += replayCeiling(ctx, b, filepath.Join(dir, "ceiling.db"), muts)

		srv := startBenchSyncd(b, filepath.Join(dir, "syncd.db"), clientID)
		queuePath, replicaPath := filepath.Join(dir, "queue.db"), filepath.Join(dir, "replica.db")
		benchFillQueue(ctx, b, queuePath, n, func(i int) syncproto.Mutation { return muts[i] })
		benchBuildOverlay(b, srv.token, clientID, queuePath, replicaPath)

		b.StartTimer()
		start := time.Now()
		c := openBenchClient(b, srv.url, srv.token, clientID, queuePath, replicaPath)
		err := waitDrained(ctx, c, n)
		replaySecs += time.Since(start).Seconds()
		b.StopTimer()
		if err != nil {
			c.Close()
			b.Fatalf("replay of %d writes: %v", n, err)
		}
		requireApplied(ctx, b, c, muts)
		require.NoError(b, c.Close())
	}
	rate := float64(n*b.N) / replaySecs
	ceiling := float64(n*b.N) / ceilingSecs
	b.ReportMetric(rate, "mut/s")
	b.ReportMetric(ceiling, "ceiling_mut/s")
	b.ReportMetric(rate/ceiling, "ratio")
}

// BenchmarkInitialSync loads SYNCD_BENCH_SYNC_N (1,000,000) server records
// into a fresh client's replica and reports:
//
//	records/s          records per second, from client.Open until
//	                   Status().Cursor reaches the server's head (the
//	                   snapshot is loaded and the feed follows)
//	ceiling_records/s  a raw SQLite insert of the same rows into a table of
//	                   the replica's records shape, one transaction, same
//	                   pragmas (replicaCeiling)
//	ratio              records/s over ceiling_records/s (target >= 0.3)
//
// Before the timer, syncd's database is seeded through replication's
// SQLiteLog.AppendAll and Records.Put in transactions of seedTxRows (seedSyncd),
// as if one other device had written every record once. After the timer, a
// sample of the records is read back through Client.Get.
func BenchmarkInitialSync(b *testing.B) {
	n := benchEnvInt(b, envSyncN, 1_000_000)
	ctx := benchContext(b)
	var syncSecs, ceilingSecs float64
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		ceilingSecs += replicaCeiling(ctx, b, filepath.Join(dir, "ceiling.db"), n)

		dataPath := filepath.Join(dir, "syncd.db")
		head := seedSyncd(ctx, b, dataPath, n)
		const clientID = "fresh-device"
		srv := startBenchSyncd(b, dataPath, clientID)
		replicaPath := filepath.Join(dir, "replica.db")

		b.StartTimer()
		start := time.Now()
		c := openBenchClient(b, srv.url, srv.token, clientID, filepath.Join(dir, "queue.db"), replicaPath)
		err := benchPoll(ctx, func() (bool, string, error) {
			st, err := c.Status(ctx)
			return st.Cursor >= head, fmt.Sprintf("cursor %d of head %d (connected %v)", st.Cursor, head, st.Connected), err
		})
		syncSecs += time.Since(start).Seconds()
		b.StopTimer()
		if err != nil {
			c.Close()
			b.Fatalf("initial sync of %d records: %v", n, err)
		}
		requireSeeded(ctx, b, c, n)
		require.NoError(b, c.Close())
	}
	rate := float64(n*b.N) / syncSecs
	ceiling := float64(n*b.N) / ceilingSecs
	b.ReportMetric(rate, "records/s")
	b.ReportMetric(ceiling, "ceiling_records/s")
	b.ReportMetric(rate/ceiling, "ratio")
}

// BenchmarkReplayRSS measures the client's peak resident memory while it
// replays SYNCD_BENCH_RSS_N (1,000,000) queued writes, and reports:
//
//	peak_rss_MiB  VmHWM of a child process that holds only the client
//	              (target < 100)
//	mut/s         the child's replay rate, for reference
//
// The parent runs syncd, fills the queue through offlinequeue's public API
// with concurrent producers and builds the replica's pending overlay (as
// BenchmarkReplay does), then re-executes this test binary running only this
// benchmark with SYNCD_BENCH_RSS_CHILD set. The child opens the queue and the
// client, waits until the queue is drained or its deadline passes, and writes
// its VmHWM (/proc/self/status, Linux only) and progress to a file. A sample
// of the outcomes (every 1000th write) is checked afterwards.
func BenchmarkReplayRSS(b *testing.B) {
	if cfgPath := os.Getenv(envRSSChild); cfgPath != "" {
		rssChild(b, cfgPath)
		return
	}
	n := benchEnvInt(b, envRSSN, 1_000_000)
	ctx := benchContext(b)
	var peakKiB int64
	var replaySecs float64
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		const clientID = "deep-device"
		srv := startBenchSyncd(b, filepath.Join(dir, "syncd.db"), clientID)
		queuePath, replicaPath := filepath.Join(dir, "queue.db"), filepath.Join(dir, "replica.db")
		w := newBenchWorkload(clientID)
		sample := make([]string, (n+rssSampleEvery-1)/rssSampleEvery)
		benchFillQueue(ctx, b, queuePath, n, func(i int) syncproto.Mutation {
			m := w.mutation(i)
			if i%rssSampleEvery == 0 {
				sample[i/rssSampleEvery] = m.OpID
			}
			return m
		})
		benchBuildOverlay(b, srv.token, clientID, queuePath, replicaPath)

		b.StartTimer()
		res := runRSSChild(ctx, b, rssChildConfig{
			ServerURL: srv.url, Token: srv.token, ClientID: clientID,
			QueuePath: queuePath, ReplicaPath: replicaPath, ResultPath: filepath.Join(dir, "result.json"),
			Mutations: n,
		})
		b.StopTimer()
		if !res.Drained {
			b.Fatalf("the client replayed %d of %d writes in %.0f s before its deadline (%d pending, %d dead letters); peak RSS so far %.1f MiB",
				res.Replayed, n, res.Seconds, res.Pending, res.DeadLetters, float64(res.PeakRSSKiB)/1024)
		}
		require.Zero(b, res.DeadLetters, "dead letters after the replay")
		requireSampleApplied(ctx, b, srv.token, clientID, queuePath, replicaPath, sample)
		peakKiB = max(peakKiB, res.PeakRSSKiB)
		replaySecs += res.Seconds
	}
	b.ReportMetric(float64(peakKiB)/1024, "peak_rss_MiB")
	b.ReportMetric(float64(n*b.N)/replaySecs, "mut/s")
}

// rssSampleEvery is the stride of the op ids BenchmarkReplayRSS checks.
const rssSampleEvery = 1000

// rssChildConfig is what BenchmarkReplayRSS hands its child, as JSON in the
// file SYNCD_BENCH_RSS_CHILD names.
type rssChildConfig struct {
	ServerURL, Token, ClientID string
	QueuePath, ReplicaPath     string
	ResultPath                 string
	Mutations                  int
	Deadline                   time.Time
}

// rssChildResult is what the child reports back, also when its deadline
// passed before the queue drained.
type rssChildResult struct {
	PeakRSSKiB  int64   // VmHWM when the child stopped waiting
	Drained     bool    // the queue was empty before the deadline
	Replayed    int     // writes no longer pending
	Pending     int     // writes still pending
	DeadLetters int     // writes dead-lettered
	Seconds     float64 // from client.Open until drained or the deadline
}

// runRSSChild runs the child and returns its result. The child gets the
// parent's deadline, and is killed shortly after it if it overruns.
func runRSSChild(ctx context.Context, b *testing.B, cfg rssChildConfig) rssChildResult {
	b.Helper()
	deadline, _ := ctx.Deadline()
	cfg.Deadline = deadline.Add(-childGrace)
	cfgPath := filepath.Join(filepath.Dir(cfg.ResultPath), "child.json")
	raw, err := json.Marshal(cfg)
	require.NoError(b, err)
	require.NoError(b, os.WriteFile(cfgPath, raw, 0o600))
	exe, err := os.Executable()
	require.NoError(b, err)
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$", "-test.bench=^BenchmarkReplayRSS$", "-test.benchtime=1x",
		"-test.timeout="+time.Until(deadline).Round(time.Second).String())
	cmd.Env = append(os.Environ(), envRSSChild+"="+cfgPath)
	cmd.WaitDelay = childGrace
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("child process: %v\n%s", err, tail(out, 4096))
	}
	raw, err = os.ReadFile(cfg.ResultPath)
	require.NoError(b, err, "child output:\n%s", tail(out, 4096))
	var res rssChildResult
	require.NoError(b, json.Unmarshal(raw, &res))
	return res
}

// childGrace is how long before the parent's deadline the child stops
// waiting, so it can report and exit before the parent gives up on it.
const childGrace = 30 * time.Second

// rssChild is BenchmarkReplayRSS in the child process: open the client over
// the prepared queue and replica, wait for the queue to drain (or the
// deadline), and report VmHWM and progress.
func rssChild(b *testing.B, cfgPath string) {
	raw, err := os.ReadFile(cfgPath)
	require.NoError(b, err)
	var cfg rssChildConfig
	require.NoError(b, json.Unmarshal(raw, &cfg))
	ctx, cancel := context.WithDeadline(context.Background(), cfg.Deadline)
	defer cancel()

	start := time.Now()
	c := openBenchClient(b, cfg.ServerURL, cfg.Token, cfg.ClientID, cfg.QueuePath, cfg.ReplicaPath)
	defer c.Close()
	waitErr := waitDrained(ctx, c, cfg.Mutations)
	res := rssChildResult{Drained: waitErr == nil, Seconds: time.Since(start).Seconds()}
	if waitErr != nil && !errors.Is(waitErr, context.DeadlineExceeded) {
		b.Fatal(waitErr)
	}
	st, err := c.Status(context.Background())
	require.NoError(b, err)
	res.Pending, res.DeadLetters, res.Replayed = st.Pending, st.DeadLetters, cfg.Mutations-st.Pending
	res.PeakRSSKiB, err = vmHWM()
	require.NoError(b, err)
	out, err := json.Marshal(res)
	require.NoError(b, err)
	require.NoError(b, os.WriteFile(cfg.ResultPath, out, 0o600))
}

// vmHWM reads this process's peak resident set size, in KiB.
func vmHWM() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("peak RSS: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("peak RSS: %w", err)
	}
	return 0, errors.New("peak RSS: no VmHWM line in /proc/self/status")
}

// tail returns the last limit bytes of out.
func tail(out []byte, limit int) []byte {
	if len(out) > limit {
		return out[len(out)-limit:]
	}
	return out
}

// waitDrained waits until the client's queue is empty: every write was
// answered, its outcome recorded and its item marked done. A write that was
// dead-lettered or is left pending when ctx ends fails the wait.
func waitDrained(ctx context.Context, c *client.Client, n int) error {
	return benchPoll(ctx, func() (bool, string, error) {
		st, err := c.Status(ctx)
		if err == nil && st.DeadLetters > 0 {
			err = fmt.Errorf("%d writes dead-lettered", st.DeadLetters)
		}
		return st.Pending == 0, fmt.Sprintf("%d of %d writes pending (connected %v)", st.Pending, n, st.Connected), err
	})
}

// requireApplied checks that every write's durable outcome is "applied".
func requireApplied(ctx context.Context, b *testing.B, c *client.Client, muts []syncproto.Mutation) {
	b.Helper()
	for _, m := range muts {
		o, found, err := c.Lookup(ctx, m.OpID)
		require.NoError(b, err)
		require.True(b, found, "no outcome for %s", m.OpID)
		require.Equal(b, client.StatusApplied, o.Status, "outcome of %s: %+v", m.OpID, o)
	}
}

// requireSampleApplied reopens the child's client with no server reachable
// and checks that each sampled write's outcome is "applied" and the queue is
// empty.
func requireSampleApplied(ctx context.Context, b *testing.B, token, clientID, queuePath, replicaPath string, opIDs []string) {
	b.Helper()
	c := openBenchClient(b, "http://"+syncdtest.FreeAddr(b), token, clientID, queuePath, replicaPath)
	defer c.Close()
	st, err := c.Status(ctx)
	require.NoError(b, err)
	require.Zero(b, st.Pending, "writes left in the queue")
	for _, id := range opIDs {
		o, found, err := c.Lookup(ctx, id)
		require.NoError(b, err)
		require.True(b, found, "no outcome for %s", id)
		require.Equal(b, client.StatusApplied, o.Status, "outcome of %s: %+v", id, o)
	}
}

// requireSeeded reads every 1000th seeded record, and the last one, through
// Client.Get and checks it holds the seeded value.
func requireSeeded(ctx context.Context, b *testing.B, c *client.Client, n int) {
	b.Helper()
	check := func(i int) {
		rec, found, err := c.Get(ctx, benchModel, benchKey(i))
		require.NoError(b, err)
		require.True(b, found, "record %s missing from the replica", benchKey(i))
		require.JSONEq(b, string(benchValue(i)), string(rec.Value))
		require.False(b, rec.Pending)
	}
	for i := 0; i < n; i += 1000 {
		check(i)
	}
	check(n - 1)
}

// openBenchClient opens the SQLite queue at queuePath and a client over it
// with every other setting at its default. The client owns the queue.
func openBenchClient(b *testing.B, url, token, clientID, queuePath, replicaPath string) *client.Client {
	b.Helper()
	q, err := offlinequeue.OpenSQLite(queuePath, offlinequeue.SQLiteOptions{})
	require.NoError(b, err)
	c, err := client.Open(context.Background(), client.Config{
		ServerURLs: []string{url}, Token: token, ClientID: clientID,
		Queue: q, ReplicaPath: replicaPath,
	})
	if err != nil {
		q.Close()
		b.Fatal(err)
	}
	return c
}

// benchBuildOverlay opens the client once with no server reachable and closes
// it: Open copies the queued writes into the replica's pending overlay, so
// the replica then holds what it would after the app made them with Put while
// offline.
func benchBuildOverlay(b *testing.B, token, clientID, queuePath, replicaPath string) {
	b.Helper()
	c := openBenchClient(b, "http://"+syncdtest.FreeAddr(b), token, clientID, queuePath, replicaPath)
	require.NoError(b, c.Close())
}

// benchPoll calls cond every pollInterval until it reports done or an error,
// or ctx ends; a timeout error carries cond's last description of progress.
func benchPoll(ctx context.Context, cond func() (done bool, progress string, err error)) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		done, progress, err := cond()
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s", ctx.Err(), progress)
		case <-t.C:
		}
	}
}

// benchEnvInt reads a positive count from the environment, def when unset.
func benchEnvInt(b *testing.B, name string, def int) int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive count", name, v)
	}
	return n
}

// BenchmarkReplayAfterTheServerReturns: at the library's default probe and
// retry intervals, the time from the server's return (its path restored)
// to the write queued meanwhile applied. Aim: within a second.
func BenchmarkReplayAfterTheServerReturns(b *testing.B) {
	s := startSyncd(b, server.Config{})
	d := openDevice(b, s, s.proxy(b), b.TempDir(), "phone-1", deviceOptions{tweak: atDefaults})
	require.NoError(b, d.WaitConnected(b.Context()))
	var total time.Duration
	for b.Loop() {
		total += replayAfterReturn(b, d)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/return")
}
