package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/syncd-dev/syncd/client/synccore"
	"github.com/syncd-dev/syncd/syncproto"
)

// ErrConnectionLost says the connection ended before an answer arrived: the
// request may or may not have been processed (a push is resent; the
// server's ledger answers what was already decided).
var ErrConnectionLost = errors.New("client: connection lost")

// dialTimeout bounds opening a websocket; helloTimeout bounds the
// handshake. A server that accepts TCP but never answers (a blackholed
// path) fails the attempt instead of hanging it.
const (
	dialTimeout  = 10 * time.Second
	helloTimeout = 10 * time.Second
)

// feedBuffer bounds the change-feed frames waiting for the feed goroutine;
// when it is full the connection's reader waits (backpressure).
const feedBuffer = 16

// conn is one websocket session with a syncd server. Requests may be sent
// from several goroutines; answers are matched to requests by id and handed
// to their waiters. Frames of the live subscription go to feed. The reader
// goroutine is owned by conn and stops when the connection ends; close
// waits for it.
type conn struct {
	ws      *websocket.Conn
	url     string
	welcome *syncproto.Welcome

	nextID  atomic.Uint64
	mu      sync.Mutex
	waiters map[string]waiter
	subID   string

	feed    chan syncproto.Message // changes and resync of the subscription
	closing chan struct{}          // closed by close: the reader stops feeding
	done    chan struct{}          // closed when the reader exits
	closeMu sync.Once
	errOnce sync.Once
	err     error
}

// dial opens a websocket to one server base URL (http(s):// or ws(s)://).
func dial(ctx context.Context, baseURL, token string, hc *http.Client) (*conn, error) {
	u, err := syncURL(baseURL)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPClient:   hc,
		Subprotocols: []string{syncproto.Subprotocol},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + token}},
	})
	if err != nil {
		if re := upgradeRefusal(resp); re != nil {
			return nil, fmt.Errorf("dial %s: %w", u, re)
		}
		return nil, fmt.Errorf("dial %s: %w", u, err)
	}
	if ws.Subprotocol() != syncproto.Subprotocol {
		ws.Close(websocket.StatusProtocolError, "subprotocol not negotiated")
		return nil, fmt.Errorf("dial %s: %w", u, &RefusedError{Code: codeIncompatible, Message: "server did not accept " + syncproto.Subprotocol})
	}
	ws.SetReadLimit(syncproto.MaxFrameBytes)
	c := &conn{ws: ws, url: baseURL, waiters: map[string]waiter{}, feed: make(chan syncproto.Message, feedBuffer), closing: make(chan struct{}), done: make(chan struct{})}
	go c.readLoop()
	return c, nil
}

// syncURL turns a base URL into the websocket URL of the sync endpoint.
func syncURL(base string) (string, error) {
	base = strings.TrimRight(base, "/")
	switch {
	case strings.HasPrefix(base, "http://"):
		base = "ws://" + strings.TrimPrefix(base, "http://")
	case strings.HasPrefix(base, "https://"):
		base = "wss://" + strings.TrimPrefix(base, "https://")
	case strings.HasPrefix(base, "ws://"), strings.HasPrefix(base, "wss://"):
	default:
		return "", fmt.Errorf("server URL %q: want http(s):// or ws(s)://", base)
	}
	return base + syncproto.SyncPath, nil
}

// httpURL turns a base URL into the http(s) URL of path.
func httpURL(base, path string) string {
	base = strings.TrimRight(base, "/")
	base = strings.Replace(base, "ws://", "http://", 1)
	base = strings.Replace(base, "wss://", "https://", 1)
	return base + path
}

func (c *conn) readLoop() {
	defer close(c.done)
	defer close(c.feed)
	for {
		_, frame, err := c.ws.Read(context.Background())
		if err != nil {
			c.fail(err)
			return
		}
		msg, err := syncproto.Decode(frame)
		if err != nil {
			c.fail(fmt.Errorf("undecodable frame from server: %w", err))
			c.ws.Close(websocket.StatusProtocolError, "undecodable frame")
			return
		}
		c.route(msg)
	}
}

// waiter takes the answer to one request, or nil when the connection ended
// before it. It runs on the reader goroutine, once; while it runs no frame
// is read, so it must hand the answer on and return, waiting at most until
// the connection closes (conn.closing).
type waiter func(syncproto.Message)

// route hands an answer to its waiter, or a feed frame to the feed.
func (c *conn) route(msg syncproto.Message) {
	id := msg.RequestID()
	c.mu.Lock()
	w, ok := c.waiters[id]
	if ok {
		delete(c.waiters, id)
	}
	sub := c.subID
	c.mu.Unlock()
	if ok {
		w(msg)
		return
	}
	if id != "" && id == sub {
		select {
		case c.feed <- msg:
		case <-c.closing:
		}
	}
	// Anything else answers a request nobody waits for any more (its
	// caller gave up): dropped.
}

func (c *conn) fail(err error) {
	c.errOnce.Do(func() {
		// err is set under mu with the waiters swapped out, so a request
		// either sees err or registers a waiter that is closed here.
		c.mu.Lock()
		c.err = err
		waiters := c.waiters
		c.waiters = map[string]waiter{}
		c.mu.Unlock()
		for _, w := range waiters {
			w(nil)
		}
	})
}

// request sends msg (its id set here) and waits for the answer. An error
// answer is returned as *syncproto.Error.
func (c *conn) request(ctx context.Context, msg syncproto.Message, setID func(string)) (syncproto.Message, error) {
	answers := make(chan syncproto.Message, 1)
	id, err := c.send(ctx, msg, setID, func(ans syncproto.Message) {
		if ans == nil {
			close(answers)
			return
		}
		answers <- ans
	})
	if err != nil {
		return nil, err
	}
	select {
	case ans, ok := <-answers:
		return c.answer(ans, ok)
	case <-ctx.Done():
		c.forget(id)
		return nil, ctx.Err()
	}
}

// send sends msg (its id set here) and registers w for its answer; when it
// fails, w is not called. It returns the request id.
func (c *conn) send(ctx context.Context, msg syncproto.Message, setID func(string), w waiter) (string, error) {
	id := "r" + strconv.FormatUint(c.nextID.Add(1), 10)
	setID(id)
	frame, err := syncproto.Encode(msg)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return "", fmt.Errorf("%w: %v", ErrConnectionLost, c.err)
	}
	c.waiters[id] = w
	c.mu.Unlock()
	if err := c.ws.Write(ctx, websocket.MessageText, frame); err != nil {
		c.forget(id)
		return "", fmt.Errorf("%w: %v", ErrConnectionLost, err)
	}
	return id, nil
}

// answer is what a request returns for the answer a waiter took (ok false:
// the connection ended first).
func (c *conn) answer(ans syncproto.Message, ok bool) (syncproto.Message, error) {
	if !ok {
		c.mu.Lock()
		err := c.err
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %v", ErrConnectionLost, err)
	}
	if e, isErr := ans.(*syncproto.Error); isErr {
		return nil, e
	}
	return ans, nil
}

func (c *conn) forget(id string) {
	c.mu.Lock()
	delete(c.waiters, id)
	c.mu.Unlock()
}

// hello binds the connection to the client and returns the welcome.
// dbID is the database the cursor came from ("" when unknown).
func (c *conn) hello(ctx context.Context, clientID string, cursor uint64, hlc syncproto.Timestamp, dbID string) (*syncproto.Welcome, error) {
	m := &syncproto.Hello{ClientID: clientID, Cursor: cursor, HLC: hlc, DatabaseID: dbID}
	ctx, cancel := context.WithTimeout(ctx, helloTimeout)
	defer cancel()
	ans, err := c.request(ctx, m, func(id string) { m.ID = id })
	if err != nil {
		return nil, fmt.Errorf("hello: %w", err)
	}
	w, ok := ans.(*syncproto.Welcome)
	if !ok {
		return nil, fmt.Errorf("hello: answered by %s", ans.Type())
	}
	c.welcome = w
	return w, nil
}

// push sends one batch and returns its results, in request order.
func (c *conn) push(ctx context.Context, muts []syncproto.Mutation) ([]syncproto.Result, error) {
	m := &syncproto.Push{Mutations: muts}
	ans, err := c.request(ctx, m, func(id string) { m.ID = id })
	return pushResults(ans, err, len(muts))
}

// pushAsync sends one batch and returns once it is written; answered then
// runs on the reader goroutine (see waiter) with the results, in request
// order, or the error push would return (ErrConnectionLost when the
// connection ended first). When the send fails, answered is not called.
func (c *conn) pushAsync(ctx context.Context, muts []syncproto.Mutation, answered func([]syncproto.Result, error)) error {
	m := &syncproto.Push{Mutations: muts}
	_, err := c.send(ctx, m, func(id string) { m.ID = id }, func(ans syncproto.Message) {
		ans, err := c.answer(ans, ans != nil)
		answered(pushResults(ans, err, len(muts)))
	})
	return err
}

// pushResults checks a push's answer: n results, in request order.
func pushResults(ans syncproto.Message, err error, n int) ([]syncproto.Result, error) {
	if err != nil {
		return nil, err
	}
	pr, ok := ans.(*syncproto.PushResult)
	if !ok || len(pr.Results) != n {
		return nil, fmt.Errorf("push: malformed answer %s", ans.Type())
	}
	return pr.Results, nil
}

// ping asks the server for a pong.
func (c *conn) ping(ctx context.Context) error {
	m := &syncproto.Ping{}
	_, err := c.request(ctx, m, func(id string) { m.ID = id })
	return err
}

// subscribe starts the live feed after a.After, replacing any earlier
// subscription; its frames (changes, backfill, resync), which carry the
// returned id, arrive on c.feed. To a server that declares scopes the
// scope members are always sent (PROTOCOL.md 19.3), never the legacy
// form: a.Scopes names every declared scope. To one that declares none
// they are left out (such a server refuses them, invalid_scope).
func (c *conn) subscribe(ctx context.Context, a synccore.Subscribe) (string, error) {
	id := "s" + strconv.FormatUint(c.nextID.Add(1), 10)
	frame, err := syncproto.Encode(&syncproto.Subscribe{ID: id, Cursor: a.After, Scopes: a.Scopes, Have: a.Have, Resume: a.Resume})
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	c.subID = id
	c.mu.Unlock()
	return id, c.ws.Write(ctx, websocket.MessageText, frame)
}

// close ends the connection at once, without a websocket close handshake,
// and waits for its reader. The client closes a connection only to abandon
// it (the network went offline, the link broke or is replaced, shutdown),
// and a handshake on a silent path would hold the caller, and with it the
// next reconnect, for the library's handshake timeouts (seconds).
func (c *conn) close() {
	c.abandon()
	<-c.done
}

// abandon closes the connection as close does, without waiting for the
// reader: the reader's own way to end it.
func (c *conn) abandon() {
	c.closeMu.Do(func() { close(c.closing) })
	c.ws.CloseNow()
}

// lost reports whether the connection has ended, and why.
func (c *conn) lost() (bool, error) {
	select {
	case <-c.done:
		return true, c.err
	default:
		return false, nil
	}
}
