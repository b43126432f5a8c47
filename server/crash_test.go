package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// crashChildEnv, when set to a directory, makes the test binary run as a
// syncd child (see runCrashChild) instead of running tests.
const crashChildEnv = "SYNCD_TEST_CRASH_CHILD_DIR"

// childReady prefixes the line a child prints once it serves:
// "syncd-child-ready <sync URL>".
const childReady = "syncd-child-ready "

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		if err := runCrashChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, "syncd child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runCrashChild serves syncd on dir/syncd.db with the tokens of
// dir/tokens.json on a loopback port it prints on stdout, until its stdin
// closes (the parent is done, or died), then shuts down gracefully.
func runCrashChild(dir string) error {
	ctx := context.Background()
	a, err := auth.NewAuthenticator(filepath.Join(dir, "tokens.json"), nil)
	if err != nil {
		return err
	}
	srv, err := server.New(ctx, server.Config{DataPath: filepath.Join(dir, "syncd.db"), Authenticator: a, RetentionInterval: -1})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: ioTimeout}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Printf("%sws://%s%s\n", childReady, ln.Addr(), syncproto.SyncPath)

	io.Copy(io.Discard, os.Stdin)
	sctx, cancel := context.WithTimeout(ctx, ioTimeout)
	defer cancel()
	err = errors.Join(srv.Shutdown(sctx), hs.Shutdown(sctx), srv.Close())
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// child is one syncd process started by the crash test.
type child struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stderr  *strings.Builder
	drained chan struct{} // closed when stdout reached EOF
	url     string
	ended   sync.Once // kill or stop ran
}

func startChild(t *testing.T, dir string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	c := &child{cmd: cmd, stdin: stdin, stderr: &strings.Builder{}, drained: make(chan struct{})}
	cmd.Stderr = c.stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(c.kill)

	ready := make(chan string, 1)
	go func() {
		defer close(c.drained)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if url, ok := strings.CutPrefix(sc.Text(), childReady); ok {
				ready <- url
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	select {
	case c.url = <-ready:
	case <-c.drained:
		c.kill()
		t.Fatalf("syncd child exited before serving: %s", c.stderr)
	case <-time.After(ioTimeout):
		c.kill()
		t.Fatalf("syncd child did not start: %s", c.stderr)
	}
	return c
}

// kill ends the child with SIGKILL and reaps it. It is safe to call
// concurrently and more than once.
func (c *child) kill() {
	c.ended.Do(func() {
		c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.drained
		c.cmd.Wait()
		c.stdin.Close()
	})
}

// stop asks the child to shut down gracefully and requires a clean exit.
func (c *child) stop(t *testing.T) {
	t.Helper()
	var err error
	c.ended.Do(func() {
		c.stdin.Close()
		<-c.drained
		err = c.cmd.Wait()
	})
	require.NoError(t, err, "child stderr: %s", c.stderr)
}

// crashBatch is one push the crash test sent.
type crashBatch struct {
	id   string
	muts []syncproto.Mutation
}

// acked is what the server answered for an op the first time it was
// decided.
type acked struct{ seq, version uint64 }

// crashState is the client's record across child lives.
type crashState struct {
	acked      map[string]acked // op id -> its applied result
	unacked    []crashBatch     // sent, no answer yet (in send order)
	ackedList  []crashBatch
	sent       int // ops ever sent
	resentNew  int // unacknowledged ops that were applied on resend
	resentDup  int // resent ops answered duplicate
	lifeAcks   []int
	nextPushID int
}

// TestCrashedServerKeepsEveryAcknowledgedOpExactlyOnce runs syncd as a child
// process, pushes batches at it and kills it with SIGKILL at random moments
// (seeded), restarting it on the same database each time. After each
// restart the client resends what was unacknowledged and some acknowledged
// batches (same op ids). At the end every acknowledged op is in the oplog
// exactly once with the seq it was acknowledged with, and nothing else is.
func TestCrashedServerKeepsEveryAcknowledgedOpExactlyOnce(t *testing.T) {
	const (
		seed  = 20241202
		kills = 22
	)
	rng := rand.New(rand.NewPCG(seed, seed))
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.json")
	token, err := auth.Issue(tokens, auth.Principal{Tenant: "acme", ClientID: "phone", Read: []string{"*"}, Write: []string{"*"}}, time.Now())
	require.NoError(t, err)

	st := &crashState{acked: map[string]acked{}}
	clock := syncproto.NewClock("phone", nil)
	for life := range kills + 1 {
		proc := startChild(t, dir)
		c := connectCrashClient(t, proc.url, token)
		st.resend(t, c, rng)
		if life == kills {
			c.conn.Close(websocket.StatusNormalClosure, "")
			proc.stop(t)
			break
		}
		// Kill at a random moment while batches are in flight.
		killer := time.AfterFunc(time.Duration(1+rng.IntN(120))*time.Millisecond, proc.kill)
		st.pushUntilCut(t, c, clock, rng)
		killer.Stop()
		proc.kill()
		c.conn.CloseNow()
	}
	require.Empty(t, st.unacked, "every batch was answered in the end")
	t.Logf("seed %d: %d kills, %d ops sent, acks per life %v, %d applied on resend, %d resends answered duplicate",
		seed, kills, st.sent, st.lifeAcks, st.resentNew, st.resentDup)

	db, err := sqlitedb.Open(context.Background(), filepath.Join(dir, "syncd.db"), sqlitedb.Options{ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	rows, err := db.Query(`SELECT op_id, seq, version FROM oplog ORDER BY seq`)
	require.NoError(t, err)
	defer rows.Close()
	count := map[string]int{}
	for rows.Next() {
		var op string
		var seq, version uint64
		require.NoError(t, rows.Scan(&op, &seq, &version))
		count[op]++
		a, ok := st.acked[op]
		require.True(t, ok, "op %s in the oplog was never acknowledged", op)
		require.Equal(t, a, acked{seq, version}, "op %s", op)
	}
	require.NoError(t, rows.Err())
	for op := range st.acked {
		require.Equal(t, 1, count[op], "acknowledged op %s present exactly once", op)
	}
	require.Len(t, count, st.sent, "every op sent was acknowledged in the end")
}

// connectCrashClient opens a session with the child at url.
func connectCrashClient(t *testing.T, url, token string) *wsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, url, dialOptions(token))
	require.NoError(t, err)
	t.Cleanup(func() { conn.CloseNow() })
	c := &wsClient{t: t, conn: conn}
	c.hello("phone", 0, syncproto.NewClock("phone", nil))
	return c
}

// resend sends every unacknowledged batch and up to two acknowledged ones,
// same op ids, and checks the answers: applied once or duplicate of the
// first decision.
func (st *crashState) resend(t *testing.T, c *wsClient, rng *rand.Rand) {
	t.Helper()
	batches := st.unacked
	for range min(2, len(st.ackedList)) {
		batches = append(batches, st.ackedList[rng.IntN(len(st.ackedList))])
	}
	for _, b := range batches {
		for i, r := range c.push(b.id, b.muts...) {
			op := b.muts[i].OpID
			require.Equal(t, op, r.OpID)
			prior, decided := st.acked[op]
			switch r.Status {
			case syncproto.StatusApplied:
				require.False(t, decided, "op %s applied twice", op)
				st.resentNew++
			case syncproto.StatusDuplicate:
				require.Equal(t, syncproto.StatusApplied, r.OriginalStatus)
				if decided {
					require.Equal(t, prior, acked{r.Seq, r.Version}, "a duplicate carries the original result")
				}
				st.resentDup++
			default:
				t.Fatalf("resent op %s answered %+v", op, r)
			}
			st.acked[op] = acked{r.Seq, r.Version}
		}
	}
	st.ackedList = append(st.ackedList, st.unacked...)
	st.unacked = nil
}

// pushUntilCut pushes fresh batches, up to three in flight, until the
// connection fails (the child was killed) or a bounded number of batches
// were answered.
func (st *crashState) pushUntilCut(t *testing.T, c *wsClient, clock *syncproto.Clock, rng *rand.Rand) {
	t.Helper()
	acks := 0
	defer func() { st.lifeAcks = append(st.lifeAcks, acks) }()
	inFlight := 0
	for sent := 0; sent < 400; {
		for inFlight < 3 {
			b := st.newBatch(t, clock, 1+rng.IntN(20))
			st.unacked = append(st.unacked, b)
			st.sent += len(b.muts)
			sent++
			inFlight++
			if c.trySend(&syncproto.Push{ID: b.id, Mutations: b.muts}) != nil {
				return
			}
		}
		msg, err := c.tryRecv()
		if err != nil {
			return
		}
		pr, ok := msg.(*syncproto.PushResult)
		require.True(t, ok, "want push_result, got %#v", msg)
		b := st.unacked[0]
		require.Equal(t, b.id, pr.ID, "answers come in push order")
		for i, r := range pr.Results {
			require.Equal(t, syncproto.StatusApplied, r.Status, "%+v", r)
			st.acked[b.muts[i].OpID] = acked{r.Seq, r.Version}
		}
		st.unacked = st.unacked[1:]
		st.ackedList = append(st.ackedList, b)
		inFlight--
		acks++
	}
}

func (st *crashState) newBatch(t *testing.T, clock *syncproto.Clock, n int) crashBatch {
	st.nextPushID++
	b := crashBatch{id: fmt.Sprintf("p%d", st.nextPushID)}
	for range n {
		op := newOpID(t)
		b.muts = append(b.muts, syncproto.Mutation{OpID: op, Model: "notes", Key: "k-" + op, Op: syncproto.OpPut, Value: []byte(`{"v":1}`), HLC: clock.Now()})
	}
	return b
}
