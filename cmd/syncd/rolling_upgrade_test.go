package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// upgradeStopTimeout bounds a node's graceful stop (SIGTERM: it drains its
// sessions within --shutdown-timeout, 30 s by default).
const upgradeStopTimeout = time.Minute

// TestRollingUpgradeFromThePreviousRelease upgrades a running cluster of
// the previous release (testdata/previous-release, built from the
// repository's history: three syncd processes with embedded NATS, R3) to
// this build one node at a time, each restarted on its own data directory,
// while writers push through every node and subscribers follow the change
// feed. The nodes not being restarted serve throughout (their /readyz is
// sampled every 250 ms); every acknowledged write ends in every node's
// oplog exactly once and reaches every subscriber exactly once, in seq
// order; the digests agree. The cluster version stays at the previous
// release's format while any node runs it and moves to this release's
// once the last node is replaced, as `syncctl status` shows, and the first
// format it brings (the records check) then runs and agrees on every node.
// The writers' longest pause is printed, not asserted.
func TestRollingUpgradeFromThePreviousRelease(t *testing.T) {
	previous := buildAtCommit(t, previousRelease(t), "./cmd/syncd")
	syncctl := buildSyncctl(t)
	pc := newProcCluster(t, func(_, _ int, addr string) string { return addr }, nil)
	// Admin tokens issued by this release start "sda_", which the previous
	// release does not know; it issued them "sdk_", as every release still
	// accepts for an admin: an operator upgrading uses such a token.
	pc.adminToken = "sdk_" + strings.TrimPrefix(pc.adminToken, "sda_")
	for _, n := range pc.nodes {
		n.bin = previous
	}
	pc.startAll(t)
	ctl := func(n *procNode) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, syncctl, "status", "--server", n.adminURL)
		cmd.Env = append(cmd.Environ(), "SYNCCTL_TOKEN="+pc.adminToken)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "syncctl status: %s", out)
		return string(out)
	}
	// Before: every node of the previous release, announcing no format.
	for _, n := range pc.nodes {
		require.Equal(t, []string{"1 (unannounced)", "1 (unannounced)"}, statusFormats(t, ctl(pc.nodes[0]), n.name), n.name)
	}

	subs := startFeed(t, pc, 2)
	l := startLoad(t, pc, 6, 10)
	defer l.stop()
	watch := watchServing(pc)
	defer watch.stop()

	restarts := map[*procNode]time.Duration{}
	for i, n := range pc.nodes {
		time.Sleep(2 * time.Second) // load between restarts
		watch.restarting(n, true)
		began := time.Now()
		n.stop(t)
		n.bin = "" // this build
		n.args = append(n.args, "--cluster-records-check-every", "3s")
		n.start(t)
		n.waitReady(t)
		watch.restarting(n, false)
		restarts[n] = time.Since(began)
		t.Logf("%s: stopped on the previous release at %s and serving on this build after %s", n.name, began.Format("15:04:05.000"), restarts[n].Round(time.Millisecond))
		pc.waitCaughtUp(t, n)
		if i < len(pc.nodes)-1 {
			// Held at the previous release's format while any node runs it.
			st, ok := pc.selfStatus(n)
			require.True(t, ok)
			require.Equal(t, cluster.LatestFormat, st.Format, "%s announces this build's format", n.name)
			require.Equal(t, cluster.FormatBase, st.ClusterVersion, "%s: the cluster version while %d nodes run the previous release", n.name, len(pc.nodes)-1-i)
			require.Equal(t, []string{strconv.Itoa(cluster.LatestFormat), strconv.Itoa(cluster.FormatBase)}, statusFormats(t, ctl(n), n.name))
		}
	}

	// Every node on this build: the version moves, by itself, on every node.
	pc.waitVersion(t, cluster.LatestFormat)
	// syncctl status asks one node, which shows the others as their last
	// status reports said (one every few seconds): it shows the new
	// version for every node once each reported after the move.
	latest := []string{strconv.Itoa(cluster.LatestFormat), strconv.Itoa(cluster.LatestFormat)}
	shown := func(out string) bool {
		for _, n := range pc.nodes {
			if !slices.Equal(latest, statusFormats(t, out, n.name)) {
				return false
			}
		}
		return true
	}
	out := ctl(pc.nodes[0])
	for deadline := time.Now().Add(60 * time.Second); !shown(out); out = ctl(pc.nodes[0]) {
		require.True(t, time.Now().Before(deadline), "syncctl status shows format and version %v for every node within 60s; last:\n%s", latest, out)
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("syncctl status once every node runs this build:\n%s", out)
	// The format it brings is in use: a records check, compared on every node.
	pc.waitRecordsCheckMatched(t)
	time.Sleep(2 * time.Second) // writes under the new format

	require.NoError(t, l.stop())
	watch.stop()
	pc.requireOnceEverywhere(t, l)
	head := subs.requireEveryEntryOnce(t, pc)
	require.NoError(t, subs.stop())

	for _, n := range pc.nodes {
		out, why := watch.outside(n)
		t.Logf("%s: restarted in %s; longest span not serving outside it %s %s", n.name, restarts[n].Round(time.Millisecond), out.Round(time.Millisecond), why)
		require.Less(t, out, restarts[n], "%s stopped serving outside its own restart for longer than the restart (%s)", n.name, why)
	}
	var pause time.Duration
	var who string
	for _, w := range l.writers {
		if p := w.longestPause(); p > pause {
			pause, who = p, w.id
		}
	}
	t.Logf("rolling upgrade of %d nodes under %d writers and %d subscribers: oplog head %d; writers' longest pause %s (%s); subscribers reconnected %d times",
		len(pc.nodes), len(l.writers), len(subs.subs), head, pause.Round(time.Millisecond), who, subs.reconnects())
}

// buildSyncctl builds this tree's syncctl.
func buildSyncctl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "syncctl")
	out, err := exec.Command("go", "build", "-o", bin, "../syncctl").CombinedOutput()
	require.NoError(t, err, "go build syncctl: %s", out)
	return bin
}

// statusFormats is the FORMAT and VERSION columns of node's row in the
// cluster table of `syncctl status`.
func statusFormats(t *testing.T, out, node string) []string {
	t.Helper()
	lines := strings.Split(out, "\n")
	var header string
	for _, l := range lines {
		if strings.HasPrefix(l, "NODE") {
			header = l
			continue
		}
		f := strings.Fields(l)
		if header == "" || len(f) == 0 || f[0] != node {
			continue
		}
		format, version := strings.Index(header, "FORMAT"), strings.Index(header, "VERSION")
		ready := strings.Index(header, "READY")
		require.True(t, format > 0 && version > format && ready > version, "syncctl status header: %q", header)
		return []string{strings.TrimSpace(l[format:version]), strings.TrimSpace(l[version:ready])}
	}
	t.Fatalf("no row of %s in syncctl status:\n%s", node, out)
	return nil
}

// stop stops n gracefully (SIGTERM: it drains) and waits for it to exit.
func (n *procNode) stop(t testing.TB) {
	t.Helper()
	require.True(t, n.running(), "%s is not running", n.name)
	require.NoError(t, n.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-n.exited:
	case <-time.After(upgradeStopTimeout):
		n.kill(t)
		t.Fatalf("%s did not exit within %s of SIGTERM", n.name, upgradeStopTimeout)
	}
}

// waitVersion waits until every node reports the cluster version v.
func (pc *procCluster) waitVersion(t testing.TB, v int) {
	t.Helper()
	deadline := time.Now().Add(procStartTimeout)
	var seen []int
	for time.Now().Before(deadline) {
		seen = seen[:0]
		for _, n := range pc.nodes {
			if st, ok := pc.selfStatus(n); ok && st.ClusterVersion == v {
				seen = append(seen, st.ClusterVersion)
			}
		}
		if len(seen) == len(pc.nodes) {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("the cluster version did not reach %d on every node: %v", v, seen)
}

var recordsMatched = regexp.MustCompile(`(?m)^syncd_cluster_records_checks_total\{result="match"\} (\S+)$`)

// waitRecordsCheckMatched waits until every node compared a records check
// with a peer's and found them equal.
func (pc *procCluster) waitRecordsCheckMatched(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(procStartTimeout)
	for time.Now().Before(deadline) {
		matched := 0
		for _, n := range pc.nodes {
			if v, _ := metricValue(n.url+"/metrics", recordsMatched); v > 0 {
				matched++
			}
		}
		if matched == len(pc.nodes) {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatal("no records check agreed on every node")
}

// metricValue is the value re captures in the metrics at url.
func metricValue(url string, re *regexp.Regexp) (float64, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			return strconv.ParseFloat(m[1], 64)
		}
	}
	return 0, errors.Join(sc.Err(), errors.New("metric not found"))
}

// longestPause is the longest time w went without an acknowledgement
// while it ran: the longest push (resends included) or gap between two
// acknowledgements.
func (w *writer) longestPause() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var p time.Duration
	for i, a := range w.acks {
		p = max(p, w.lat[i])
		if i > 0 {
			p = max(p, a.Sub(w.acks[i-1]))
		}
	}
	return p
}

// servingWatch samples every node's /readyz and keeps, per node, how long
// it did not serve outside its own restart, and why.
type servingWatch struct {
	mu      sync.Mutex
	down    map[*procNode]bool          // restarting now
	since   map[*procNode]time.Time     // not serving since, outside a restart
	longest map[*procNode]time.Duration // the longest such span
	why     map[*procNode]string        // what /readyz said in it
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func watchServing(pc *procCluster) *servingWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &servingWatch{down: map[*procNode]bool{}, since: map[*procNode]time.Time{}, longest: map[*procNode]time.Duration{},
		why: map[*procNode]string{}, cancel: cancel}
	for _, n := range pc.nodes {
		w.wg.Add(1)
		go func() { // owned by w: ends at stop
			defer w.wg.Done()
			for ctx.Err() == nil {
				w.sample(n, readiness(n))
				sleepCtx(ctx, 250*time.Millisecond)
			}
		}()
	}
	return w
}

// readiness is "" when n answers /readyz with 200, else what it answered.
func readiness(n *procNode) string {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(n.url + "/readyz")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return ""
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
}

func (w *servingWatch) sample(n *procNode, problem string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	switch {
	case problem == "" || w.down[n]:
		delete(w.since, n)
		return
	case w.since[n].IsZero():
		w.since[n] = now
	}
	if span := max(now.Sub(w.since[n]), time.Millisecond); span >= w.longest[n] { // one failed sample is a span
		w.longest[n], w.why[n] = span, fmt.Sprintf("(at %s: %s)", now.Format("15:04:05.000"), problem)
	}
}

// restarting marks n as in its own restart (or no longer).
func (w *servingWatch) restarting(n *procNode, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.down[n] = on
	delete(w.since, n)
}

// outside is the longest span n did not serve outside its own restart,
// and what it answered then.
func (w *servingWatch) outside(n *procNode) (time.Duration, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.longest[n], w.why[n]
}

func (w *servingWatch) stop() {
	w.cancel()
	w.wg.Wait()
}

// feedFollower follows the change feed from its cursor through one node at
// a time, moving to the next node (from the same cursor) when its session
// ends, and counts every entry it is given.
type feedFollower struct {
	id, token string
	home      int

	mu         sync.Mutex
	cursor     uint64
	last       uint64         // the highest seq delivered
	seen       map[string]int // deliveries per op id
	reconnects int
}

// feed is a set of followers running until stop.
type feed struct {
	subs []*feedFollower
	*group
}

func startFeed(t testing.TB, pc *procCluster, n int) *feed {
	t.Helper()
	f := &feed{group: newGroup(n)}
	for i := range n {
		s := &feedFollower{id: fmt.Sprintf("reader-%d", i), home: (i + 1) % len(pc.nodes), seen: map[string]int{}}
		s.token = pc.member(t, s.id)
		f.subs = append(f.subs, s)
	}
	for _, s := range f.subs {
		f.run(func(ctx context.Context) error { return s.run(ctx, pc) })
	}
	t.Cleanup(func() { _ = f.stop() })
	return f
}

func (f *feed) reconnects() int {
	n := 0
	for _, s := range f.subs {
		s.mu.Lock()
		n += s.reconnects
		s.mu.Unlock()
	}
	return n
}

// errFeedBroken is a feed that went wrong: a resync, an entry out of seq
// order or delivered twice.
var errFeedBroken = errors.New("feed broken")

func (s *feedFollower) run(ctx context.Context, pc *procCluster) error {
	clock := syncproto.NewClock(s.id, time.Now)
	at := s.home
	for ctx.Err() == nil {
		s.mu.Lock()
		cursor := s.cursor
		s.mu.Unlock()
		dctx, cancel := context.WithTimeout(ctx, pushTimeout)
		c, err := dialHello(dctx, pc.nodes[at], s.token, &syncproto.Hello{ID: "hello", ClientID: s.id, Cursor: cursor, HLC: clock.Now()})
		cancel()
		if err == nil {
			err = s.follow(ctx, c)
			c.close()
		}
		if errors.Is(err, errFeedBroken) {
			return err
		}
		if ctx.Err() == nil {
			s.mu.Lock()
			s.reconnects++
			s.mu.Unlock()
			at = (at + 1) % len(pc.nodes)
			sleepCtx(ctx, 100*time.Millisecond)
		}
	}
	return nil
}

// follow subscribes on c from the cursor and takes pages until the session
// ends.
func (s *feedFollower) follow(ctx context.Context, c *pushConn) error {
	s.mu.Lock()
	sub := &syncproto.Subscribe{ID: "feed", Cursor: s.cursor}
	s.mu.Unlock()
	frame, err := syncproto.Encode(sub)
	if err != nil {
		return err
	}
	if err := c.conn.Write(ctx, websocket.MessageText, frame); err != nil {
		return err
	}
	for {
		_, b, err := c.conn.Read(ctx)
		if err != nil {
			return err
		}
		msg, err := syncproto.Decode(b)
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *syncproto.Changes:
			if m.ID == sub.ID {
				if err := s.take(m); err != nil {
					return err
				}
			}
		case *syncproto.Resync:
			return fmt.Errorf("%w: %s was told to resync: %+v", errFeedBroken, s.id, m)
		case *syncproto.Error:
			return m // cursor ahead of a node that is behind, shutting down: move on
		}
	}
}

func (s *feedFollower) take(m *syncproto.Changes) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range m.Entries {
		if e.Seq <= s.last {
			return fmt.Errorf("%w: %s was given seq %d after %d", errFeedBroken, s.id, e.Seq, s.last)
		}
		s.last = e.Seq
		s.seen[e.OpID]++
	}
	s.cursor = max(s.cursor, m.Cursor)
	return nil
}

// requireEveryEntryOnce waits until every follower reached the head of
// the (converged) oplog and requires each to have been given every entry
// of it exactly once and nothing else; it returns the head.
func (f *feed) requireEveryEntryOnce(t testing.TB, pc *procCluster) uint64 {
	t.Helper()
	oplog := pc.admin(pc.nodes[0]).Oplog(t, "")
	head := oplogHead(oplog)
	deadline := time.Now().Add(procStartTimeout)
	for _, s := range f.subs {
		for {
			s.mu.Lock()
			last := s.last
			s.mu.Unlock()
			if last >= head {
				break
			}
			require.True(t, time.Now().Before(deadline), "%s reached seq %d of %d", s.id, last, head)
			time.Sleep(200 * time.Millisecond)
		}
		s.mu.Lock()
		require.Len(t, s.seen, len(oplog), "%s: distinct op ids delivered", s.id)
		for _, e := range oplog {
			require.Equal(t, 1, s.seen[e.OpID], "%s: op %s (seq %d) delivered %d times", s.id, e.OpID, e.Seq, s.seen[e.OpID])
		}
		s.mu.Unlock()
	}
	return head
}

// TestClusterUpgradeFlags: the records check's cadence and the format
// hold are flags and SYNCD_* variables, listed by --help, validated with
// the range they take, and reach the node's cluster options.
func TestClusterUpgradeFlags(t *testing.T) {
	base := []string{"--cluster", "--cluster-secret", "s", "--replicas", "1"}
	none := func(string) string { return "" }
	o, err := parseFlags(base, none, io.Discard)
	require.NoError(t, err)
	require.Equal(t, cluster.DefaultRecordsCheckEvery, o.cluster.recordsCheckEvery)
	require.Zero(t, o.cluster.maxFormat, "0: this release's latest")

	env := map[string]string{"SYNCD_CLUSTER_MAX_FORMAT": "1", "SYNCD_CLUSTER_RECORDS_CHECK_EVERY": "10m"}
	o, err = parseFlags(base, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, cluster.FormatBase, o.cluster.maxFormat)
	require.Equal(t, 10*time.Minute, o.cluster.recordsCheckEvery)

	for _, bad := range [][]string{
		{"--cluster-max-format", strconv.Itoa(cluster.LatestFormat + 1)},
		{"--cluster-max-format", "-1"},
	} {
		_, err := parseFlags(append(base, bad...), none, io.Discard)
		require.ErrorContains(t, err, fmt.Sprintf("this release understands formats %d to %d", cluster.FormatBase, cluster.LatestFormat), "%v", bad)
	}
	_, err = parseFlags(append(base, "--cluster-records-check-every", "0s"), none, io.Discard)
	require.ErrorContains(t, err, "--cluster-records-check-every 0s: want a positive duration")

	var help syncdtest.Buffer
	_, err = parseFlags([]string{"--help"}, none, &help)
	require.Error(t, err)
	for _, f := range []string{"-cluster-records-check-every", "-cluster-max-format"} {
		require.Contains(t, help.String(), f)
	}
}
