package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/server/auth/authtest"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// ioTimeout bounds every single network step of a test (a dial, a frame,
// an HTTP request), so a broken server fails a test instead of hanging it.
const ioTimeout = 10 * time.Second

// testServer is a real syncd on a loopback port with its own SQLite file
// and token file (syncdtest), or, in cluster mode, one node of a
// 3-node cluster.
type testServer struct {
	*syncdtest.Server
	srv        *server.Server
	url        string // http://127.0.0.1:port
	adminURL   string
	tokenPath  string
	adminToken string
	// nodes are every node of the cluster in cluster mode (the first is
	// this one), else this server alone.
	nodes []*syncdtest.Server
	// idp, in JWT mode (jwtMode), signs the tokens member hands out.
	idp *authtest.Provider
}

// startServer starts syncd with cfg (DataPath and Authenticator filled in
// when empty: a database and a token file holding an admin token in a
// fresh directory) and stops it when the test ends. Under a test that
// runs in cluster mode (inClusterMode), it starts a 3-node cluster and
// returns its first node.
func startServer(t testing.TB, cfg server.Config) *testServer {
	t.Helper()
	if jwtMode(t) {
		return startJWTServer(t, cfg, func(c *auth.JWTConfig) { c.ClientIDClaim = jwtClientIDClaim }).testServer
	}
	var nodes []*syncdtest.Server
	if clusterMode(t) {
		nodes = syncdtest.StartCluster(t, 3, cfg)
	} else {
		nodes = []*syncdtest.Server{syncdtest.Start(t, cfg)}
	}
	s := nodes[0]
	return &testServer{Server: s, srv: s.Server, url: s.URL, adminURL: s.AdminURL, tokenPath: s.TokenPath, adminToken: s.AdminToken, nodes: nodes}
}

// node returns the cluster's i-th node as a testServer of its own (the
// same tokens: the nodes share the token file). Stopping it stops that
// node alone.
func (ts *testServer) node(i int) *testServer {
	n := ts.nodes[i]
	return &testServer{Server: n, srv: n.Server, url: n.URL, adminURL: n.AdminURL, tokenPath: n.TokenPath, adminToken: n.AdminToken, nodes: ts.nodes, idp: ts.idp}
}

// stop shuts the server down gracefully and closes it; later calls do
// nothing.
func (ts *testServer) stop(t testing.TB) { ts.Stop(t) }

// runRetention runs one retention pass now: on a single node, directly; in
// a cluster, on the node holding the job lease, whose jobs every node
// applies.
func (ts *testServer) runRetention(t testing.TB) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, n := range ts.nodes {
			if n.RunRetention(t.Context()) == nil {
				return true
			}
		}
		return false
	}, ioTimeout, 20*time.Millisecond, "no node holds the job lease")
}

// Member, in JWT mode (jwtMode), hands out a JWT for clientID in tenant
// that may read and write every model; otherwise the kit's token.
func (ts *testServer) Member(t testing.TB, tenant, clientID string) string {
	t.Helper()
	if ts.idp != nil {
		return ts.idp.Sign("EdDSA", authtest.Claims(clientID+"@"+tenant, tenant, time.Now(), 10*time.Minute, map[string]any{jwtClientIDClaim: clientID}))
	}
	return ts.Server.Member(t, tenant, clientID)
}

func (ts *testServer) syncURL() string {
	return "ws" + strings.TrimPrefix(ts.url, "http") + syncproto.SyncPath
}

// dialOptions are the upgrade request of a well-behaved client with token.
func dialOptions(token string) *websocket.DialOptions {
	return &websocket.DialOptions{
		Subprotocols: []string{syncproto.Subprotocol},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + token}},
	}
}

// wsClient is a minimal protocol client for tests: frames in and out, with
// every step bounded by ioTimeout. Its methods use require and so belong
// to the test goroutine.
//
// While a subscription is active (subscribe), frames of its feed that
// arrive while the client waits for an answer are set aside in live, since
// the server interleaves them with answers (PROTOCOL.md section 4).
type wsClient struct {
	t     testing.TB
	conn  *websocket.Conn
	subID string             // the active subscription's id
	live  []syncproto.Change // entries its feed delivered, in order
}

func dial(t testing.TB, ts *testServer, token string) *wsClient {
	t.Helper()
	return dialWith(t, ts, dialOptions(token))
}

// dialWith upgrades with opts and requires success.
func dialWith(t testing.TB, ts *testServer, opts *websocket.DialOptions) *wsClient {
	t.Helper()
	c, resp, err := tryDial(ts, opts)
	require.NoError(t, err, "dial: %s", describeRefusal(resp))
	t.Cleanup(func() { c.conn.CloseNow() })
	c.t = t
	return c
}

// tryDial attempts an upgrade; on refusal it returns the HTTP response
// (whose body holds at most its first 1024 bytes).
func tryDial(ts *testServer, opts *websocket.DialOptions) (*wsClient, *http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, ts.syncURL(), opts)
	if err != nil {
		return nil, resp, err
	}
	conn.SetReadLimit(syncproto.MaxFrameBytes)
	return &wsClient{conn: conn}, resp, nil
}

func describeRefusal(resp *http.Response) string {
	if resp == nil {
		return "no response"
	}
	return resp.Status
}

// refusedUpgrade dials with opts, requires the upgrade to be refused with
// status, and returns the error the body holds.
func refusedUpgrade(t testing.TB, ts *testServer, opts *websocket.DialOptions, status int) *syncproto.Error {
	t.Helper()
	resp := refusal(t, ts, opts, status)
	defer resp.Body.Close()
	return httpErrorBody(t, resp)
}

// refusal dials with opts and requires the upgrade to be refused with
// status. The caller closes the response body.
func refusal(t testing.TB, ts *testServer, opts *websocket.DialOptions, status int) *http.Response {
	t.Helper()
	c, resp, err := tryDial(ts, opts)
	if err == nil {
		c.conn.CloseNow()
	}
	require.Error(t, err, "the upgrade must be refused")
	require.NotNil(t, resp, "a refusal is an HTTP answer: %v", err)
	require.Equal(t, status, resp.StatusCode)
	return resp
}

// httpErrorBody decodes the JSON error body PROTOCOL.md section 1 promises
// on every refused request.
func httpErrorBody(t testing.TB, resp *http.Response) *syncproto.Error {
	t.Helper()
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	require.NoError(t, err)
	msg, err := syncproto.Decode(body)
	require.NoError(t, err, "body %s", body)
	e, ok := msg.(*syncproto.Error)
	require.True(t, ok, "want an error object, got %s", body)
	return e
}

func (c *wsClient) send(msg syncproto.Message) {
	c.t.Helper()
	require.NoError(c.t, c.trySend(msg))
}

func (c *wsClient) write(typ websocket.MessageType, frame []byte) {
	c.t.Helper()
	require.NoError(c.t, c.tryWrite(typ, frame))
}

// trySend sends msg, returning the error of a connection that failed. The
// try methods are for tests in which the server may die at any moment.
func (c *wsClient) trySend(msg syncproto.Message) error {
	frame, err := syncproto.Encode(msg)
	require.NoError(c.t, err)
	return c.tryWrite(websocket.MessageText, frame)
}

func (c *wsClient) tryWrite(typ websocket.MessageType, frame []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	return c.conn.Write(ctx, typ, frame)
}

// tryRecv reads the next message, returning the error that ended the
// connection instead.
func (c *wsClient) tryRecv() (syncproto.Message, error) {
	frame, err := c.next()
	if err != nil {
		return nil, err
	}
	msg, err := syncproto.Decode(frame)
	require.NoError(c.t, err, "frame %s", frame)
	return msg, nil
}

// next reads the next frame, or the error that ended the connection.
func (c *wsClient) next() ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	_, frame, err := c.conn.Read(ctx)
	return frame, err
}

// recv reads the next message.
func (c *wsClient) recv() syncproto.Message {
	c.t.Helper()
	msg, err := c.tryRecv()
	require.NoError(c.t, err)
	return msg
}

// expect reads the next message other than a subscription's feed and
// requires it to be a T.
func expect[T syncproto.Message](c *wsClient) T {
	c.t.Helper()
	msg := c.recvAnswer()
	m, ok := msg.(T)
	require.True(c.t, ok, "want %T, got %#v", *new(T), msg)
	return m
}

// recvAnswer reads the next message, setting feed frames aside in live.
func (c *wsClient) recvAnswer() syncproto.Message {
	c.t.Helper()
	for range 1000 {
		msg := c.recv()
		if ch, ok := msg.(*syncproto.Changes); !ok || c.subID == "" || ch.ID != c.subID {
			return msg
		}
		c.live = append(c.live, msg.(*syncproto.Changes).Entries...)
	}
	c.t.Fatalf("no answer after 1000 feed frames")
	return nil
}

// subscribe starts the feed from cursor and returns its first frame: the
// first changes page (its entries also go to live) or a resync.
func (c *wsClient) subscribe(id string, cursor uint64) syncproto.Message {
	c.t.Helper()
	c.send(&syncproto.Subscribe{ID: id, Cursor: cursor})
	msg := c.recvAnswer()
	c.subID = id
	switch m := msg.(type) {
	case *syncproto.Changes:
		require.Equal(c.t, id, m.ID)
		c.live = append(c.live, m.Entries...)
	case *syncproto.Resync:
		require.Equal(c.t, id, m.ID)
		c.subID = ""
	default:
		c.t.Fatalf("subscribe answered by %#v", msg)
	}
	return msg
}

// waitLive reads until the feed has delivered n entries in all and returns
// them.
func (c *wsClient) waitLive(n int) []syncproto.Change {
	c.t.Helper()
	require.NotEmpty(c.t, c.subID, "no active subscription")
	for range 1000 {
		if len(c.live) >= n {
			return c.live
		}
		ch := expectFeed(c)
		c.live = append(c.live, ch.Entries...)
	}
	c.t.Fatalf("feed delivered %d entries, want %d", len(c.live), n)
	return nil
}

func expectFeed(c *wsClient) *syncproto.Changes {
	c.t.Helper()
	msg := c.recv()
	ch, ok := msg.(*syncproto.Changes)
	require.True(c.t, ok && ch.ID == c.subID, "want changes of %s, got %#v", c.subID, msg)
	return ch
}

// recvError reads the next message and requires it to be an error with
// code, answering request id.
func (c *wsClient) recvError(id string, code syncproto.Code) *syncproto.Error {
	c.t.Helper()
	e := expect[*syncproto.Error](c)
	require.Equal(c.t, code, e.Code, "error %+v", e)
	require.Equal(c.t, id, e.ID)
	require.Equal(c.t, code.Retryable(), e.Retryable)
	return e
}

// readToEnd reads until the connection ends and returns the frames read
// on the way and the error that ended it.
func (c *wsClient) readToEnd() ([]syncproto.Message, error) {
	c.t.Helper()
	var got []syncproto.Message
	for range 100 {
		frame, err := c.next()
		if err != nil {
			return got, err
		}
		msg, err := syncproto.Decode(frame)
		require.NoError(c.t, err, "frame %s", frame)
		got = append(got, msg)
	}
	c.t.Fatalf("no close after 100 frames")
	return nil, nil
}

// expectClose reads until the connection ends and requires it to end with
// the close code. Frames read on the way are returned.
func (c *wsClient) expectClose(code syncproto.CloseCode) []syncproto.Message {
	c.t.Helper()
	got, err := c.readToEnd()
	require.Equal(c.t, websocket.StatusCode(code), websocket.CloseStatus(err), "connection ended with %v", err)
	// PROTOCOL.md section 13: the reason is the code of the error frame
	// sent before the close.
	var ce websocket.CloseError
	require.ErrorAs(c.t, err, &ce)
	require.Contains(c.t, syncproto.Codes, syncproto.Code(ce.Reason), "close reason %q is an error code", ce.Reason)
	require.Equal(c.t, code, syncproto.CloseFor(syncproto.Code(ce.Reason)), "close reason %q names a code of close %d", ce.Reason, code)
	for _, msg := range got {
		if e, ok := msg.(*syncproto.Error); ok {
			require.Equal(c.t, string(e.Code), ce.Reason, "the close reason is the code of the error before it")
		}
	}
	return got
}

// expectClosing reads until the connection ends and requires the close
// PROTOCOL.md section 13 assigns to code, with code as the reason. Frames
// read on the way are returned.
func (c *wsClient) expectClosing(code syncproto.Code) []syncproto.Message {
	c.t.Helper()
	got, err := c.readToEnd()
	var ce websocket.CloseError
	require.ErrorAs(c.t, err, &ce, "the connection ends with a close frame")
	require.Equal(c.t, websocket.StatusCode(syncproto.CloseFor(code)), ce.Code, "close code for %s", code)
	require.Equal(c.t, string(code), ce.Reason, "the close reason is the code")
	return got
}

// expectRefusalClose expects an error frame with code, then the close
// PROTOCOL.md section 13 assigns to it with the code as the reason.
func (c *wsClient) expectRefusalClose(code syncproto.Code) *syncproto.Error {
	c.t.Helper()
	got := c.expectClosing(code)
	require.Len(c.t, got, 1, "one error frame before the close")
	e, ok := got[0].(*syncproto.Error)
	require.True(c.t, ok, "%T before the close", got[0])
	require.Equal(c.t, code, e.Code)
	return e
}

// barrier sends ping and waits for its pong: every answer to an earlier
// request precedes it (PROTOCOL.md 5.8). Frames before the pong, other
// than the active feed's, are returned.
func (c *wsClient) barrier() []syncproto.Message {
	c.t.Helper()
	c.send(&syncproto.Ping{ID: "barrier"})
	var got []syncproto.Message
	for range 100 {
		msg := c.recvAnswer()
		if p, ok := msg.(*syncproto.Pong); ok && p.ID == "barrier" {
			return got
		}
		got = append(got, msg)
	}
	c.t.Fatalf("no pong after 100 frames")
	return nil
}

// hello sends hello and returns the welcome.
func (c *wsClient) hello(clientID string, cursor uint64, clock *syncproto.Clock) *syncproto.Welcome {
	c.t.Helper()
	c.send(&syncproto.Hello{ID: "h1", ClientID: clientID, Cursor: cursor, HLC: clock.Now()})
	w := expect[*syncproto.Welcome](c)
	require.Equal(c.t, "h1", w.ID)
	return w
}

// push sends one push and returns its results.
func (c *wsClient) push(id string, muts ...syncproto.Mutation) []syncproto.Result {
	c.t.Helper()
	c.send(&syncproto.Push{ID: id, Mutations: muts})
	return c.pushResult(id, len(muts))
}

// pushResending sends one push and returns its results, resending the
// same mutations while the answer is a retryable error (a cluster node
// that is not serving for a moment answers server_busy): a client does
// so, and the ledger answers a resend of an applied op as a duplicate.
// It gives up after 30 s.
func (c *wsClient) pushResending(id string, muts ...syncproto.Mutation) []syncproto.Result {
	c.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		c.send(&syncproto.Push{ID: id, Mutations: muts})
		msg := c.recvAnswer()
		if e, ok := msg.(*syncproto.Error); ok && e.ID == id && e.Retryable && time.Now().Before(deadline) {
			time.Sleep(max(50*time.Millisecond, time.Duration(e.RetryAfterMS)*time.Millisecond))
			continue
		}
		pr, ok := msg.(*syncproto.PushResult)
		require.True(c.t, ok, "want *syncproto.PushResult, got %#v", msg)
		require.Equal(c.t, id, pr.ID)
		require.Len(c.t, pr.Results, len(muts))
		return pr.Results
	}
}

// pushResult reads the answer to push id and requires n results.
func (c *wsClient) pushResult(id string, n int) []syncproto.Result {
	c.t.Helper()
	pr := expect[*syncproto.PushResult](c)
	require.Equal(c.t, id, pr.ID)
	require.Len(c.t, pr.Results, n)
	return pr.Results
}

// pull sends one pull and returns its changes.
func (c *wsClient) pull(id string, cursor uint64) *syncproto.Changes {
	c.t.Helper()
	c.send(&syncproto.Pull{ID: id, Cursor: cursor, Limit: syncproto.MaxPullLimit})
	ch := expect[*syncproto.Changes](c)
	require.Equal(c.t, id, ch.ID)
	return ch
}

// session dials with token, says hello as clientID and returns the client
// and its clock.
func session(t testing.TB, ts *testServer, token, clientID string) (*wsClient, *syncproto.Clock) {
	t.Helper()
	c := dial(t, ts, token)
	clock := syncproto.NewClock(clientID, nil)
	c.hello(clientID, 0, clock)
	return c, clock
}

func newOpID(t testing.TB) string {
	t.Helper()
	id, err := syncproto.NewOpID()
	require.NoError(t, err)
	return id
}

func put(t testing.TB, clock *syncproto.Clock, model, key, value string) syncproto.Mutation {
	t.Helper()
	return syncproto.Mutation{OpID: newOpID(t), Model: model, Key: key, Op: syncproto.OpPut, Value: []byte(value), HLC: clock.Now()}
}

// putIf is put with a base version.
func putIf(t testing.TB, clock *syncproto.Clock, model, key, value string, base uint64) syncproto.Mutation {
	t.Helper()
	m := put(t, clock, model, key, value)
	m.BaseVersion = &base
	return m
}

// requireApplied requires every result to be applied.
func requireApplied(t testing.TB, results []syncproto.Result) {
	t.Helper()
	for i, r := range results {
		require.Equal(t, syncproto.StatusApplied, r.Status, "result %d: %+v", i, r)
	}
}

// adminGet GETs an admin path with token ("" for none), decodes a 2xx JSON
// body into out (when not nil) and returns the status.
func (ts *testServer) adminGet(t testing.TB, path, token string, out any) int {
	t.Helper()
	return syncdtest.GetJSON(t, ts.adminURL+path, token, out)
}

// head is the oplog head, read through the admin API.
func (ts *testServer) head(t testing.TB) uint64 { t.Helper(); return ts.Status(t).OplogHead }

// readOnly is a principal of tenant acting as clientID that may read the
// models and write none.
func readOnly(tenant, clientID string, models ...string) auth.Principal {
	return auth.Principal{Tenant: tenant, ClientID: clientID, Read: models}
}
