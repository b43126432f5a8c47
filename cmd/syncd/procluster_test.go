package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

func TestMain(m *testing.M) {
	if code, ok := fairChildMain(os.Args); ok {
		os.Exit(code)
	}
	code := m.Run()
	if syncdBuild.dir != "" {
		os.RemoveAll(syncdBuild.dir)
	}
	os.Exit(code)
}

// syncdBuild is this package built as users run it (go build, no race
// detector), once per test binary, on the first process test's demand.
// The process tests run their nodes on it: under go test -race the test
// binary itself, run as syncd, was five to tenfold slower, and it bought
// nothing the race detector does not already see of that code in the
// in-process cluster tests (server, replication/cluster) and in the short
// cluster soak, whose syncd is built with the detector.
var syncdBuild struct {
	once     sync.Once
	dir, bin string
	err      error
}

// syncdBinary returns the path of syncdBuild's binary, building it first.
func syncdBinary(t testing.TB) string {
	t.Helper()
	syncdBuild.once.Do(func() {
		if syncdBuild.dir, syncdBuild.err = os.MkdirTemp("", "syncd-proc-"); syncdBuild.err != nil {
			return
		}
		bin := filepath.Join(syncdBuild.dir, "syncd")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput()
		if err != nil {
			syncdBuild.err = fmt.Errorf("go build ./cmd/syncd: %w\n%s", err, out)
			return
		}
		syncdBuild.bin = bin
	})
	require.NoError(t, syncdBuild.err)
	return syncdBuild.bin
}

// waitsInParallel marks a process-cluster test that mostly waits (for a
// grace to run out, for the agreement's surveys, for a node to refuse or
// to serve again) and drives no writers: it runs in parallel. go test runs
// such tests after the package's serial ones, at most -parallel at a time
// (GOMAXPROCS: two on the two cores `make test` is sized for), so two of
// their waits overlap. Each has its own ports, directories and processes,
// and none touches process-wide state (no t.Setenv, no chdir). The tests
// under writers' load (Kills, RouteCut, EmptyDisk, the rolling upgrade)
// are CPU-bound under the race detector and stay serial.
func waitsInParallel(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// procStartTimeout bounds a node's start (quorum included) and
// procStopTimeout the wait for a killed node's exit.
const (
	procStartTimeout = 90 * time.Second
	procStopTimeout  = 20 * time.Second
)

// procNode is one `syncd --cluster` OS process with an embedded NATS
// server. Its ports stay fixed across restarts.
type procNode struct {
	name      string
	dir       string
	args      []string
	url       string // http://127.0.0.1:port, the public listener
	adminURL  string
	natsURL   string // the embedded NATS server's client listener, with the node user's credentials
	natsAddr  string // that listener's host:port
	routeAddr string // the embedded NATS server's route listener
	logPath   string
	bin       string // the binary it runs; "" is this package built (syncdBinary)

	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd's process has been waited for
	err    error         // its exit, once exited is closed
}

// procCluster is three syncd processes forming one cluster (R3), sharing
// one token file and one cluster secret.
type procCluster struct {
	nodes      []*procNode
	tokens     string
	adminToken string
	secret     cluster.Secret
}

// startProcCluster starts three nodes as processes and waits until each
// is ready. extra are added to every node's flags. Every node is killed
// when t ends.
func startProcCluster(t testing.TB, extra ...string) *procCluster {
	t.Helper()
	return startProcClusterVia(t, func(_, _ int, addr string) string { return addr }, extra...)
}

// startProcClusterVia is startProcCluster with node from's NATS route to
// node to dialed at via(from, to, addr), addr being to's route listener:
// a test puts a fault proxy there to cut routes.
func startProcClusterVia(t testing.TB, via func(from, to int, addr string) string, extra ...string) *procCluster {
	t.Helper()
	return startProcClusterEach(t, via, nil, extra...)
}

// startProcClusterEach is startProcClusterVia with each(i)'s flags added
// to node i's (each may be nil).
func startProcClusterEach(t testing.TB, via func(from, to int, addr string) string, each func(i int) []string, extra ...string) *procCluster {
	t.Helper()
	pc := newProcCluster(t, via, each, extra...)
	pc.startAll(t)
	return pc
}

// newProcCluster is startProcClusterEach without the start: a test sets
// what it must on the nodes (their binary) and calls startAll.
func newProcCluster(t testing.TB, via func(from, to int, addr string) string, each func(i int) []string, extra ...string) *procCluster {
	t.Helper()
	dir := t.TempDir()
	pc := &procCluster{tokens: filepath.Join(dir, "tokens.json")}
	var err error
	pc.adminToken, err = auth.Issue(pc.tokens, auth.Principal{Admin: true}, time.Now())
	require.NoError(t, err)
	var secretFile string
	pc.secret, secretFile = newSecretFile(t)
	routes := make([]string, 3)
	for i := range 3 {
		routes[i] = syncdtest.FreeAddr(t)
	}
	for i := range 3 {
		n := &procNode{name: fmt.Sprintf("node-%d", i+1), dir: filepath.Join(dir, fmt.Sprintf("node-%d", i+1))}
		listen, admin, natsAddr := syncdtest.FreeAddr(t), syncdtest.FreeAddr(t), syncdtest.FreeAddr(t)
		n.url, n.adminURL, n.natsAddr, n.routeAddr = "http://"+listen, "http://"+admin, natsAddr, routes[i]
		n.natsURL = "nats://" + cluster.NodeUser + ":" + pc.secret.NodePassword() + "@" + natsAddr
		n.logPath = filepath.Join(dir, n.name+".log")
		n.args = []string{"--cluster", "--node-id", n.name, "--data", filepath.Join(n.dir, "syncd.db"), "--tokens", pc.tokens, "--cluster-secret", secretFile,
			"--listen", listen, "--admin-listen", admin, "--nats-listen", natsAddr, "--nats-cluster-listen", routes[i],
			"--cluster-start-timeout", procStartTimeout.String()}
		for j, r := range routes {
			if j != i {
				n.args = append(n.args, "--nats-route", "nats-route://"+via(i, j, r))
			}
		}
		if each != nil {
			n.args = append(n.args, each(i)...)
		}
		n.args = append(n.args, extra...)
		pc.nodes = append(pc.nodes, n)
		t.Cleanup(func() { n.kill(t) })
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range pc.nodes {
				t.Logf("%s's log, without NATS's lines, ends:\n%s", n.name, syncdLines(n.logPath, 40))
			}
		}
	})
	return pc
}

// startAll starts every node and waits until each is ready: the three
// start together, each waiting for the others' quorum.
func (pc *procCluster) startAll(t testing.TB) {
	t.Helper()
	for _, n := range pc.nodes {
		n.start(t)
	}
	for _, n := range pc.nodes {
		n.waitReady(t)
	}
}

// start starts n's process; its output is appended to n.logPath.
func (n *procNode) start(t testing.TB) {
	t.Helper()
	log, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(t, err)
	defer log.Close()
	bin := n.bin
	if bin == "" {
		bin = syncdBinary(t)
	}
	n.cmd = exec.Command(bin, n.args...)
	n.cmd.Stdout, n.cmd.Stderr = log, log
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, n.cmd.Start())
	exited := make(chan struct{})
	n.exited = exited
	cmd := n.cmd
	go func() { // owned by n: ends when the process exits
		n.err = cmd.Wait()
		close(exited)
	}()
}

// running reports whether n's process is alive.
func (n *procNode) running() bool {
	if n.exited == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the process to exit.
func (n *procNode) kill(t testing.TB) {
	t.Helper()
	if !n.running() {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-n.exited:
	case <-time.After(procStopTimeout):
		t.Errorf("%s did not exit after SIGKILL", n.name)
	}
}

// waitReady waits until n answers /readyz with 200.
func (n *procNode) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(procStartTimeout)
	for time.Now().Before(deadline) {
		if !n.running() {
			logs, _ := os.ReadFile(n.logPath)
			t.Fatalf("%s exited while starting (%v):\n%s", n.name, n.err, tail(logs, 4000))
		}
		if n.ready() {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	logs, _ := os.ReadFile(n.logPath)
	t.Fatalf("%s not ready within %s:\n%s", n.name, procStartTimeout, tail(logs, 4000))
}

// ready reports whether n answers /readyz with 200.
func (n *procNode) ready() bool {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(n.url + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// syncdLines is the last n lines of the log at path that syncd wrote
// itself (the embedded NATS server's lines left out).
func syncdLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.Contains(l, "component=nats") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// admin is n's admin API as syncdtest's helpers read it.
func (pc *procCluster) admin(n *procNode) *syncdtest.Server {
	return &syncdtest.Server{URL: n.url, AdminURL: n.adminURL, AdminToken: pc.adminToken}
}

// member issues a token for clientID in tenant acme that may read and
// write every model. Nodes read the token file at start: issue before.
func (pc *procCluster) member(t testing.TB, clientID string) string {
	t.Helper()
	tok, err := auth.Issue(pc.tokens, auth.Principal{Tenant: "acme", ClientID: clientID,
		Read: []string{auth.Wildcard}, Write: []string{auth.Wildcard}}, time.Now())
	require.NoError(t, err)
	return tok
}

// streamLeader names the node leading the command stream's RAFT group,
// asked through a running node's NATS server.
func (pc *procCluster) streamLeader(t testing.TB) string {
	t.Helper()
	deadline := time.Now().Add(procStartTimeout)
	for time.Now().Before(deadline) {
		for _, n := range pc.nodes {
			if !n.running() {
				continue
			}
			if leader := askLeader(n.natsURL); leader != "" {
				return leader
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("no node knows the command stream's leader")
	return ""
}

func askLeader(url string) string {
	info := askStream(url)
	if info == nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

// askStream reads the command stream's info through the NATS server at
// url; nil when it does not answer.
func askStream(url string) *jetstream.StreamInfo {
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second))
	if err != nil {
		return nil
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, cluster.StreamName)
	if err != nil {
		return nil
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil
	}
	return info
}

// node returns the node named name.
func (pc *procCluster) node(name string) *procNode {
	for _, n := range pc.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// waitConverged waits until every node applied the stream's last message
// (as the stream tells, asked through a node's NATS server) with the same
// digest, and returns that status.
func (pc *procCluster) waitConverged(t testing.TB) adminapi.Node {
	t.Helper()
	var last []adminapi.Node
	var head uint64
	deadline := time.Now().Add(procStartTimeout)
	for time.Now().Before(deadline) {
		last = last[:0]
		for _, n := range pc.nodes {
			if st, ok := pc.selfStatus(n); ok {
				last = append(last, st)
			}
		}
		if info := pc.askAnyStream(); info != nil {
			head = info.State.LastSeq
			if len(last) == len(pc.nodes) && agree(last, head) {
				return last[0]
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("nodes did not converge on stream seq %d: %+v", head, last)
	return adminapi.Node{}
}

// agree reports whether every node is ready at the stream's last seq head
// with the same digest.
func agree(sts []adminapi.Node, head uint64) bool {
	for _, st := range sts {
		if !st.Ready || st.AppliedSeq != head || st.Digest != sts[0].Digest {
			return false
		}
	}
	return true
}

// askAnyStream is the command stream's info from the first running node
// whose NATS server gets the stream leader's answer (cluster.FromLeader);
// nil when none does.
func (pc *procCluster) askAnyStream() *jetstream.StreamInfo {
	for _, n := range pc.nodes {
		if n.running() {
			if info := askStream(n.natsURL); info != nil && cluster.FromLeader(info) {
				return info
			}
		}
	}
	return nil
}

// selfStatus is n's own cluster status from its admin API.
func (pc *procCluster) selfStatus(n *procNode) (adminapi.Node, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.adminURL+"/v1/admin/status", nil)
	if err != nil {
		return adminapi.Node{}, false
	}
	req.Header.Set("Authorization", "Bearer "+pc.adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return adminapi.Node{}, false
	}
	defer resp.Body.Close()
	var st adminapi.Status
	if resp.StatusCode != http.StatusOK || decodeJSONBody(resp, &st) != nil || st.Cluster == nil {
		return adminapi.Node{}, false
	}
	for _, s := range st.Cluster.Nodes {
		if s.Node == n.name {
			return s, true
		}
	}
	return adminapi.Node{}, false
}

// pushConn is one websocket session of a writer, on one node.
type pushConn struct {
	conn *websocket.Conn
}

// dialPush opens a session as clientID on n.
func dialPush(ctx context.Context, n *procNode, token, clientID string, clock *syncproto.Clock) (*pushConn, error) {
	return dialHello(ctx, n, token, &syncproto.Hello{ID: "hello", ClientID: clientID, HLC: clock.Now()})
}

// dialHello opens a session on n that starts with hello.
func dialHello(ctx context.Context, n *procNode, token string, hello *syncproto.Hello) (*pushConn, error) {
	ws := "ws" + n.url[len("http"):] + syncproto.SyncPath
	conn, _, err := websocket.Dial(ctx, ws, &websocket.DialOptions{
		Subprotocols: []string{syncproto.Subprotocol},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + token}},
	})
	if err != nil {
		return nil, err
	}
	conn.SetReadLimit(int64(syncproto.MaxFrameBytes))
	c := &pushConn{conn: conn}
	if _, err := c.roundTrip(ctx, hello); err != nil {
		conn.CloseNow()
		return nil, err
	}
	return c, nil
}

// roundTrip sends req and returns the answer with its id.
func (c *pushConn) roundTrip(ctx context.Context, req syncproto.Message) (syncproto.Message, error) {
	frame, err := syncproto.Encode(req)
	if err != nil {
		return nil, err
	}
	if err := c.conn.Write(ctx, websocket.MessageText, frame); err != nil {
		return nil, err
	}
	for range 1000 {
		_, b, err := c.conn.Read(ctx)
		if err != nil {
			return nil, err
		}
		msg, err := syncproto.Decode(b)
		if err != nil {
			return nil, err
		}
		if e, ok := msg.(*syncproto.Error); ok {
			return nil, e
		}
		if msg.RequestID() == req.RequestID() {
			return msg, nil
		}
	}
	return nil, errors.New("no answer among 1000 frames")
}

func (c *pushConn) close() { c.conn.CloseNow() }

// ackRecord is one acknowledged mutation as its writer saw it.
type ackRecord struct {
	opID    string
	seq     uint64
	version uint64
	hlc     syncproto.Timestamp
}

// writer pushes batches of new keys through one node at a time; when a
// push fails or goes unanswered it moves to the next node and resends the
// same push (same op ids) until it is acknowledged or the writer stops.
type writer struct {
	id    string
	token string
	home  int
	batch int

	mu    sync.Mutex
	acked []ackRecord
	acks  []time.Time     // when each push was acknowledged
	lat   []time.Duration // each push's first send to its acknowledgement
	moves int
}

// pushTimeout bounds one push's answer before the writer moves on.
const pushTimeout = 10 * time.Second

func (w *writer) run(ctx context.Context, pc *procCluster) error {
	clock := syncproto.NewClock(w.id, time.Now)
	at := w.home
	var conn *pushConn
	defer func() {
		if conn != nil {
			conn.close()
		}
	}()
	for round := 0; ctx.Err() == nil; round++ {
		push := &syncproto.Push{ID: fmt.Sprintf("p%d", round)}
		for i := range w.batch {
			op, err := syncproto.NewOpID()
			if err != nil {
				return err
			}
			push.Mutations = append(push.Mutations, syncproto.Mutation{OpID: op, Model: "notes", Key: fmt.Sprintf("%s-%d-%d", w.id, round, i),
				Op: syncproto.OpPut, Value: []byte(fmt.Sprintf(`{"round":%d}`, round)), HLC: clock.Now()})
		}
		sent := time.Now()
		for ctx.Err() == nil { // until acknowledged: resend, moving between nodes
			if conn == nil {
				dctx, cancel := context.WithTimeout(ctx, pushTimeout)
				c, err := dialPush(dctx, pc.nodes[at], w.token, w.id, clock)
				cancel()
				if err != nil {
					at = w.move(at, len(pc.nodes))
					sleepCtx(ctx, 100*time.Millisecond)
					continue
				}
				conn = c
			}
			pctx, cancel := context.WithTimeout(ctx, pushTimeout)
			ans, err := conn.roundTrip(pctx, push)
			cancel()
			res, ok := ans.(*syncproto.PushResult)
			if err != nil || !ok {
				conn.close()
				conn = nil
				at = w.move(at, len(pc.nodes))
				continue
			}
			if err := w.record(push, res, sent); err != nil {
				return err
			}
			break
		}
	}
	return nil
}

func (w *writer) move(at, n int) int {
	w.mu.Lock()
	w.moves++
	w.mu.Unlock()
	return (at + 1) % n
}

// record keeps the acknowledged results of push; a result other than
// applied (or a duplicate of an applied write) is a failure.
func (w *writer) record(push *syncproto.Push, res *syncproto.PushResult, sent time.Time) error {
	if len(res.Results) != len(push.Mutations) {
		return fmt.Errorf("%s: %d results for %d mutations", w.id, len(res.Results), len(push.Mutations))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, r := range res.Results {
		applied := r.Status == syncproto.StatusApplied ||
			(r.Status == syncproto.StatusDuplicate && r.OriginalStatus == syncproto.StatusApplied)
		if !applied || r.OpID != push.Mutations[i].OpID {
			return fmt.Errorf("%s: result %d of %s: %+v", w.id, i, push.ID, r)
		}
		w.acked = append(w.acked, ackRecord{opID: r.OpID, seq: r.Seq, version: r.Version, hlc: r.HLC})
	}
	now := time.Now()
	w.acks = append(w.acks, now)
	w.lat = append(w.lat, now.Sub(sent))
	return nil
}

// firstAckAfter is when w's first push acknowledged after at was, and
// whether there was one.
func (w *writer) firstAckAfter(at time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.acks {
		if a.After(at) {
			return a, true
		}
	}
	return time.Time{}, false
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// load is a set of writers spread over the nodes, running until stop.
type load struct {
	writers []*writer
	*group
}

// startLoad starts n writers (writer i's home is node i mod 3) pushing
// batches of batch new keys.
// loads counts the loads started, to name their writers apart.
var loads atomic.Int64

func startLoad(t testing.TB, pc *procCluster, n, batch int) *load {
	t.Helper()
	l := &load{group: newGroup(n)}
	gen := loads.Add(1) // writers of a later load write keys of their own
	for i := range n {
		w := &writer{id: fmt.Sprintf("writer-%d-%d", gen, i), home: i % len(pc.nodes), batch: batch}
		w.token = pc.member(t, w.id)
		l.writers = append(l.writers, w)
	}
	for _, w := range l.writers {
		l.run(func(ctx context.Context) error { return w.run(ctx, pc) })
	}
	return l
}

// group runs goroutines until stop and keeps the first error any of them
// returned; it owns them.
type group struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errs   chan error
}

// newGroup returns a group for up to n goroutines.
func newGroup(n int) *group {
	ctx, cancel := context.WithCancel(context.Background())
	return &group{ctx: ctx, cancel: cancel, errs: make(chan error, n)}
}

// run runs fn in a goroutine of g until fn returns or g stops.
func (g *group) run(fn func(ctx context.Context) error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := fn(g.ctx); err != nil {
			g.errs <- err
		}
	}()
}

// stop stops the goroutines, waits for them, and returns the first error
// any of them had. It may be called again.
func (g *group) stop() error {
	g.cancel()
	g.wg.Wait()
	select {
	case err := <-g.errs:
		return err
	default:
		return nil
	}
}

// resumeAfter is how long after at every writer had a push acknowledged
// again: the slowest writer's first acknowledgement after at.
func (l *load) resumeAfter(at time.Time) (time.Duration, bool) {
	var worst time.Duration
	for _, w := range l.writers {
		a, ok := w.firstAckAfter(at)
		if !ok {
			return 0, false
		}
		worst = max(worst, a.Sub(at))
	}
	return worst, true
}

func decodeJSONBody(resp *http.Response, out any) error {
	return json.NewDecoder(resp.Body).Decode(out)
}
