package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/syncd-dev/syncd/syncproto"
)

// benchConn is one simulated device: a websocket session with its own
// token and client id. Its reader goroutine (read) owns the socket's read
// side; a pusher writes pushes. It is safe for concurrent use.
type benchConn struct {
	run        *benchRun
	id, token  string
	base       string // the node it talks to
	subscriber bool

	conn  *websocket.Conn
	clock *syncproto.Clock
	head  uint64 // the server's head at welcome

	slots   chan struct{} // one per push in flight
	mu      sync.Mutex
	pending map[string]sentPush
	reqs    int
	cursor  atomic.Uint64 // the feed's cursor (subscribers)
	live    atomic.Bool   // the session is open
	leaving atomic.Bool   // the generator is closing it: its end is no error
	dead    chan struct{} // closed when the reader ends

	// Preload pushes the server refused (rate_limited, server_busy), to
	// send again; redoReady is poked when one is added.
	redo      []*preloadBatch
	redoReady chan struct{}
}

type sentPush struct {
	at      time.Time
	preload *preloadBatch // nil: a measured push
	entries int
}

// preloadBatch is one preload push: its mutations (sent again as they
// are, op ids included, when refused), the refusals so far and the wait
// the last one asked for.
type preloadBatch struct {
	muts     []syncproto.Mutation
	refusals int
	wait     time.Duration
}

// dial opens the session, says hello and, for a subscriber, subscribes at
// the head and waits for the first (empty) page, so the feed is live before
// any measured push. Its error names the failure for the errors table.
func (c *benchConn) dial(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	wsURL, err := websocketURL(c.base)
	if err != nil {
		return err
	}
	conn, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{
		Subprotocols: []string{syncproto.Subprotocol},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + c.token}},
		HTTPClient:   c.run.dialer,
	})
	if err != nil {
		if resp != nil {
			return fmt.Errorf("connect: http %d", resp.StatusCode)
		}
		if ctx.Err() != nil {
			return errors.New("connect: timeout")
		}
		return errors.New("connect: refused or reset")
	}
	conn.SetReadLimit(syncproto.MaxFrameBytes)
	c.conn = conn
	c.clock = syncproto.NewClock(c.id, nil)
	if err := c.write(ctx, &syncproto.Hello{ID: "hello", ClientID: c.id, HLC: c.clock.Now()}); err != nil {
		conn.CloseNow()
		return errors.New("connect: hello not sent")
	}
	first, err := c.readOne(ctx)
	if err != nil {
		conn.CloseNow()
		return errors.New("connect: no welcome")
	}
	w, ok := first.(*syncproto.Welcome)
	if !ok {
		conn.CloseNow()
		return fmt.Errorf("hello: %s", describeRefusal(first))
	}
	c.head = w.Head
	if c.subscriber {
		if err := c.write(ctx, &syncproto.Subscribe{ID: "feed", Cursor: w.Head}); err != nil {
			conn.CloseNow()
			return errors.New("subscribe: not sent")
		}
		msg, err := c.readOne(ctx)
		if err != nil {
			conn.CloseNow()
			return errors.New("subscribe: no answer")
		}
		ch, ok := msg.(*syncproto.Changes)
		if !ok {
			conn.CloseNow()
			return fmt.Errorf("subscribe: %s", describeRefusal(msg))
		}
		c.cursor.Store(ch.Cursor)
	}
	c.live.Store(true)
	return nil
}

// benchDialer is the HTTP client devices dial with: nil (the default
// client) unless readBuffer sets each socket's receive buffer (SO_RCVBUF,
// before it connects, so the TCP window is sized from it).
func benchDialer(readBuffer int) *http.Client {
	if readBuffer == 0 {
		return nil
	}
	d := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, readBuffer)
		})
		return errors.Join(err, serr)
	}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, Proxy: http.ProxyFromEnvironment}}
}

// describeRefusal names an unexpected answer for the errors table.
func describeRefusal(msg syncproto.Message) string {
	if e, ok := msg.(*syncproto.Error); ok {
		return string(e.Code)
	}
	return "answered " + string(msg.Type())
}

func (c *benchConn) write(ctx context.Context, msg syncproto.Message) error {
	frame, err := syncproto.Encode(msg)
	if err != nil {
		return err
	}
	return c.conn.Write(ctx, websocket.MessageText, frame)
}

func (c *benchConn) readOne(ctx context.Context) (syncproto.Message, error) {
	_, frame, err := c.conn.Read(ctx)
	if err != nil {
		return nil, err
	}
	return syncproto.Decode(frame)
}

// benchFrame is what the reader needs of any frame the server sends,
// decoded in one pass without validating values: the generator must read
// a thousand subscribers' feeds on the machine the server runs on.
type benchFrame struct {
	Type    syncproto.Type     `json:"type"`
	ID      string             `json:"id"`
	Results []syncproto.Result `json:"results"`
	Entries []struct {
		Seq uint64 `json:"seq"`
	} `json:"entries"`
	Cursor       uint64         `json:"cursor"`
	Code         syncproto.Code `json:"code"`
	RetryAfterMS int64          `json:"retry_after_ms"`
}

// read serves the session until it ends: push results feed the ack
// latency, changes feed the delivery ledger. Keepalive pings are answered
// by the websocket library while it reads.
//
// It reads every frame into one buffer of its own, and ends by ctx through
// one callback that closes the connection rather than a context watched
// by every read: the generator shares the machine with the server, and a
// buffer and a watch per frame were half of its CPU.
func (c *benchConn) read(ctx context.Context) {
	defer close(c.dead)
	defer c.live.Store(false)
	stop := context.AfterFunc(ctx, func() { c.conn.CloseNow() })
	defer stop()
	r := c.run
	var buf bytes.Buffer
	for {
		data, err := c.readFrame(&buf)
		if err != nil {
			if ctx.Err() == nil && !r.closing.Load() && !c.leaving.Load() {
				r.errors.add(closeReason(err), 1)
			}
			return
		}
		now := time.Now()
		if cursor, ok := scanChanges(data, func(seq uint64) { r.deliveries.seen(seq, now) }); ok {
			c.cursor.Store(cursor)
			continue
		}
		var f benchFrame
		if err := json.Unmarshal(data, &f); err != nil {
			r.errors.add("unreadable frame", 1)
			continue
		}
		switch f.Type {
		case syncproto.TypePushResult:
			c.answered(f.ID, now, f.Results, nil)
		case syncproto.TypeChanges:
			for _, e := range f.Entries {
				r.deliveries.seen(e.Seq, now)
			}
			c.cursor.Store(f.Cursor)
		case syncproto.TypeError:
			c.answered(f.ID, now, nil, &f)
		case syncproto.TypeResync:
			r.errors.add("resync", 1)
		}
	}
}

// readFrame reads the next message into buf, whose bytes are valid until
// the next call. It has no deadline: the session's end ends it.
func (c *benchConn) readFrame(buf *bytes.Buffer) ([]byte, error) {
	_, rd, err := c.conn.Reader(context.Background())
	if err != nil {
		return nil, err
	}
	buf.Reset()
	if _, err := buf.ReadFrom(rd); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// closeReason names how a session ended for the errors table.
func closeReason(err error) string {
	if s := websocket.CloseStatus(err); s != -1 {
		return "closed " + strconv.Itoa(int(s))
	}
	return "connection lost"
}

// answered settles the push with request id: its latency and results, or
// the error that refused it. A refused preload push that may be sent again
// is queued for the preload to send again after the wait asked for.
func (c *benchConn) answered(id string, now time.Time, results []syncproto.Result, refusal *benchFrame) {
	c.mu.Lock()
	p, ok := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	r := c.run
	if !ok {
		if refusal != nil {
			r.errors.add(string(refusal.Code), 1)
		}
		return
	}
	// A preload push's outcome is recorded before its slot is freed: the
	// preload is over once every slot is free and nothing is left to send
	// again.
	if p.preload != nil {
		switch {
		case refusal == nil:
			r.preloaded.Add(int64(len(results)))
		case refusal.Code == syncproto.CodeRateLimited || refusal.Code == syncproto.CodeServerBusy:
			p.preload.refusals++
			p.preload.wait = time.Duration(refusal.RetryAfterMS) * time.Millisecond
			r.preloadRetries.Add(1)
			c.mu.Lock()
			c.redo = append(c.redo, p.preload)
			c.mu.Unlock()
			select {
			case c.redoReady <- struct{}{}:
			default:
			}
		default:
			r.errors.add(string(refusal.Code), 1)
		}
		<-c.slots
		return
	}
	<-c.slots
	if refusal != nil {
		r.errors.add(string(refusal.Code), 1)
	}
	r.ack.observe(now.Sub(p.at))
	r.pushes.Add(1)
	for _, res := range results {
		r.statuses.add(string(res.Status), 1)
		switch res.Status {
		case syncproto.StatusApplied:
			r.mutations.Add(1)
			r.deliveries.acked(res.Seq, now)
			r.raiseTop(res.Seq)
		case syncproto.StatusRejected:
			r.errors.add(string(res.Code), 1)
		}
	}
}

// push sends one batch of put mutations (a measured push, or preload's
// batch), blocking while the connection has inflight pushes unanswered.
// It returns false when the session or ctx ended.
func (c *benchConn) push(ctx context.Context, muts []syncproto.Mutation, preload *preloadBatch) bool {
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return false
	case <-c.dead:
		return false
	}
	c.mu.Lock()
	c.reqs++
	id := "p" + strconv.Itoa(c.reqs)
	c.pending[id] = sentPush{at: time.Now(), preload: preload, entries: len(muts)}
	c.mu.Unlock()
	// The write gets its own bound, not ctx: the websocket library closes
	// the session when a write's context ends mid-write, and ctx (the run's
	// duration) ends while pushes are being written.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), benchWriteTimeout)
	defer cancel()
	if err := c.write(wctx, &syncproto.Push{ID: id, Mutations: muts}); err != nil {
		return false
	}
	return true
}

// mutations makes n puts on random keys of the run's key space, each value
// about valueSize bytes.
func (c *benchConn) mutations(rng *rand.Rand, n int) []syncproto.Mutation {
	cfg := c.run.cfg
	muts := make([]syncproto.Mutation, n)
	for i := range muts {
		op, err := syncproto.NewOpID()
		if err != nil {
			panic(err) // crypto/rand does not fail
		}
		muts[i] = syncproto.Mutation{
			OpID:  op,
			Model: cfg.models[rng.IntN(len(cfg.models))],
			Key:   "k" + strconv.Itoa(rng.IntN(cfg.keys)),
			Op:    syncproto.OpPut,
			Value: c.run.value,
			HLC:   c.clock.Now(),
		}
	}
	return muts
}

// benchValue is a JSON value of about size bytes.
func benchValue(size int) json.RawMessage {
	const frame = `{"v":""}`
	pad := max(0, size-len(frame))
	b := make([]byte, 0, len(frame)+pad)
	b = append(b, `{"v":"`...)
	for i := range pad {
		b = append(b, 'a'+byte(i%26))
	}
	return append(b, `"}`...)
}
