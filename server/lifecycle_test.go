package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// gate is a conflict hook that holds every decision until released, so a
// test can keep a push in flight inside the committer.
type gate struct {
	entered chan struct{}
	release chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}, 1), release: make(chan struct{})} }

func (g *gate) hook(ctx context.Context, _ replication.Record, _ bool, _ replication.Proposal) (replication.HookResult, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	select {
	case <-g.release:
		return replication.Accept(), nil
	case <-ctx.Done():
		return replication.HookResult{}, ctx.Err()
	}
}

// waitEntered waits until a decision is held by the gate.
func (g *gate) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(ioTimeout):
		t.Fatal("no push reached the committer")
	}
}

func TestShutdownAnswersPushesInFlightThenClosesGoingAway(t *testing.T) {
	g := newGate()
	ts := startServer(t, server.Config{
		Policies: replication.Config{"gated": syncproto.PolicyHook},
		Hook:     g.hook, HookTimeout: time.Minute,
	})
	token := ts.Member(t, "acme", "phone")
	c, clock := session(t, ts, token, "phone")
	readyz := func() int { return syncdtest.GetJSON(t, ts.url+"/readyz", "", nil) }
	require.Equal(t, http.StatusOK, readyz())

	m := put(t, clock, "gated", "k", `"in flight"`)
	c.send(&syncproto.Push{ID: "p1", Mutations: []syncproto.Mutation{m}})
	g.waitEntered(t)

	shutdown := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
		defer cancel()
		shutdown <- ts.srv.Shutdown(ctx)
	}()
	require.Eventually(t, func() bool { return readyz() == http.StatusServiceUnavailable }, ioTimeout, 5*time.Millisecond)
	busy := refusedUpgrade(t, ts, dialOptions(token), http.StatusServiceUnavailable)
	require.Equal(t, syncproto.CodeShuttingDown, busy.Code)
	require.True(t, busy.Retryable)
	require.Equal(t, int64(5000), busy.RetryAfterMS, "the body says what Retry-After says")
	require.True(t, ts.Status(t).Draining)

	close(g.release)
	res := c.pushResult("p1", 1)[0]
	require.Equal(t, syncproto.StatusApplied, res.Status, "the push in flight is answered")
	require.True(t, c.expectRefusalClose(syncproto.CodeShuttingDown).Retryable)
	require.NoError(t, <-shutdown)

	ans, found := ts.Decided(t, "acme", m.OpID)
	require.True(t, found, "an answered push is durable")
	require.Equal(t, res.Seq, ans.Result.Seq)
}

func TestShutdownDeadlineCutsSessions(t *testing.T) {
	g := newGate()
	ts := startServer(t, server.Config{
		Policies: replication.Config{"gated": syncproto.PolicyHook},
		Hook:     g.hook, HookTimeout: time.Minute,
	})
	c, clock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	c.send(&syncproto.Push{ID: "p1", Mutations: []syncproto.Mutation{put(t, clock, "gated", "k", `1`)}})
	g.waitEntered(t)

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the deadline has passed already
	require.ErrorIs(t, ts.srv.Shutdown(ctx), context.Canceled)
	// The session is cut; a shutting_down error frame may get out first
	// (section 13), nothing else.
	f, err := c.next()
	if err == nil {
		require.JSONEq(t, `{"type":"error","code":"shutting_down","message":"server shutting down; reconnect and resend unanswered pushes","retryable":true}`, string(f))
		f, err = c.next()
	}
	require.Error(t, err, "the session was cut: got %s", f)
	close(g.release) // the committer finishes its group; Close waits for it
}

func TestConnectionCap(t *testing.T) {
	ts := startServer(t, server.Config{MaxConnections: 1})
	token := ts.Member(t, "acme", "phone")
	first := dial(t, ts, token)
	busy := refusedUpgrade(t, ts, dialOptions(token), http.StatusServiceUnavailable)
	require.Equal(t, syncproto.CodeServerBusy, busy.Code)
	require.True(t, busy.Retryable)
	require.Equal(t, int64(5000), busy.RetryAfterMS, "the body says what Retry-After says")

	first.conn.CloseNow()
	require.Eventually(t, func() bool {
		c, _, err := tryDial(ts, dialOptions(token))
		if err != nil {
			return false
		}
		c.conn.CloseNow()
		return true
	}, ioTimeout, 5*time.Millisecond, "a freed slot takes a new connection")
}

func TestRateLimitRefusesWithoutApplying(t *testing.T) {
	// Two requests in the burst (hello and one push), then one per 100 s.
	ts := startServer(t, server.Config{RequestsPerSecond: 0.01, RequestBurst: 2})
	c := dial(t, ts, ts.Member(t, "acme", "phone"))
	clock := syncproto.NewClock("phone", nil)
	w := c.hello("phone", 0, clock)
	require.Equal(t, 0.01, w.Limits.RequestsPerSecond)
	require.Equal(t, 2, w.Limits.RequestBurst)
	requireApplied(t, c.push("p1", put(t, clock, "notes", "a", `1`)))
	head := ts.head(t)

	m := put(t, clock, "notes", "b", `2`)
	c.send(&syncproto.Push{ID: "p2", Mutations: []syncproto.Mutation{m}})
	e := c.recvError("p2", syncproto.CodeRateLimited)
	require.Equal(t, int64(100_000), e.RetryAfterMS)
	require.Equal(t, head, ts.head(t), "nothing applied")
	_, found := ts.Decided(t, "acme", m.OpID)
	require.False(t, found)
	require.Equal(t, "1", ts.Metric(t, "syncd_rate_limited_total"))
}

func TestIdleSessionIsClosedWith4000(t *testing.T) {
	// No keepalive pings, so the silent client sends no frame at all, not
	// even a pong.
	ts := startServer(t, server.Config{IdleTimeout: 200 * time.Millisecond, PingInterval: time.Hour})
	c, _ := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	c.expectRefusalClose(syncproto.CodeIdleTimeout)
}

// A client whose websocket stack does not answer pings (here: one that
// does not read) keeps its session with ping messages (PROTOCOL.md
// section 14): unanswered keepalive pings end nothing by themselves.
func TestPingMessagesKeepASessionWithoutPongs(t *testing.T) {
	// A ping every quarter of the idle timeout leaves the test three
	// quarters (900 ms) of scheduling stall on a loaded machine before
	// the session would rightly be closed.
	const idle = 1200 * time.Millisecond
	ts := startServer(t, server.Config{IdleTimeout: idle, PingInterval: 20 * time.Millisecond, WriteTimeout: 50 * time.Millisecond})
	c, _ := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	const pings = 12 // three idle timeouts' worth, a ping every quarter
	for i := range pings {
		c.send(&syncproto.Ping{ID: fmt.Sprintf("k%d", i)})
		time.Sleep(idle / 4)
	}
	for i := range pings {
		pong := expect[*syncproto.Pong](c)
		require.Equal(t, fmt.Sprintf("k%d", i), pong.ID, "the session outlived its unanswered pings")
	}
}

// A device restored away from its server (syncctl restore gave the
// database a new id) says hello with its old database id and a cursor
// beyond the head: it is welcomed to resync, and that is a resync, not a
// protocol error (PROTOCOL.md 5.1).
func TestHelloFromAnotherDatabaseIsAResync(t *testing.T) {
	ts := startServer(t, server.Config{})
	c := dial(t, ts, ts.Member(t, "acme", "phone"))
	clock := syncproto.NewClock("phone", nil)
	c.send(&syncproto.Hello{ID: "h1", ClientID: "phone", Cursor: 1000, HLC: clock.Now(), DatabaseID: "an-older-database"})
	w := expect[*syncproto.Welcome](c)
	require.NotEqual(t, "an-older-database", w.DatabaseID)
	require.Equal(t, "1", ts.Metric(t, "syncd_resyncs_total"))
	require.Empty(t, ts.Metric(t, `syncd_protocol_errors_total{code="cursor_ahead"}`), "no protocol error counted")

	other := dial(t, ts, ts.Member(t, "acme", "laptop"))
	other.send(&syncproto.Hello{ID: "h1", ClientID: "laptop", Cursor: 1000, HLC: syncproto.NewClock("laptop", nil).Now(), DatabaseID: w.DatabaseID})
	require.Equal(t, syncproto.CodeCursorAhead, other.expectRefusalClose(syncproto.CodeCursorAhead).Code, "the same database: the cursor is checked")
}

// A client that sends websocket pings and nothing else, its own stack
// answering none of the server's pings (it does not read), keeps its
// session (PROTOCOL.md section 14: a websocket ping is a frame heard).
func TestWebsocketPingsKeepASession(t *testing.T) {
	const idle = 1200 * time.Millisecond
	ts := startServer(t, server.Config{IdleTimeout: idle, PingInterval: 20 * time.Millisecond, WriteTimeout: 50 * time.Millisecond})
	c, _ := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	for range 12 { // three idle timeouts' worth, a ping every quarter
		// Nothing reads the server's pong, so each Ping gives up waiting
		// for it; the ping frame itself was sent.
		ctx, cancel := context.WithTimeout(t.Context(), idle/4)
		err := c.conn.Ping(ctx)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	c.send(&syncproto.Ping{ID: "k1"})
	pong := expect[*syncproto.Pong](c)
	require.Equal(t, "k1", pong.ID, "the session outlived three idle timeouts of websocket pings")
}

// A revoked token's open sessions end (PROTOCOL.md sections 12 and 13):
// error unauthorized, then close 1008, within about the token file's
// reload interval.
func TestRevokedTokenClosesItsSessions(t *testing.T) {
	ts := startServer(t, server.Config{TokenRecheck: 20 * time.Millisecond})
	token := ts.Member(t, "acme", "phone")
	c, clock := session(t, ts, token, "phone")
	other, _ := session(t, ts, ts.Member(t, "acme", "laptop"), "laptop")
	requireApplied(t, c.push("p1", put(t, clock, "notes", "n", `1`)))

	id := strings.SplitN(token, "_", 3)[1]
	require.NoError(t, auth.Revoke(ts.tokenPath, id))
	c.expectRefusalClose(syncproto.CodeUnauthorized)
	require.Empty(t, other.barrier(), "another token's session goes on")
}
