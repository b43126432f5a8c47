package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"github.com/syncd-dev/syncd/internal/buildinfo"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// outboxSize bounds the answers a session has queued for its writer (its
// answer lane): answers, pending pushes, errors, pongs. A full outbox blocks
// the reader (backpressure: a client that does not read its answers stops
// being read). Each answer is at most the announced max_frame_bytes, so the
// lane holds at most outboxSize of them; the feed lane (feedbox) holds at
// most feedPagesInFlight pages of at most feedPageBytes of values.
const outboxSize = 64

// session is one websocket connection. Its state is owned by the reader
// goroutine (run); the writer goroutine owns the socket's write side; a
// subscription goroutine feeds changes into the feed lane (feedbox), which
// the writer serves only when the answer lane (outbox) is empty. Shared
// fields are the atomics read by the admin API.
type session struct {
	srv      *Server
	conn     *websocket.Conn
	p        auth.Principal // written by the reader (hello's client id) under pMu
	pMu      sync.Mutex
	remote   string
	since    time.Time
	log      *slog.Logger
	limiter  *rate.Limiter
	frames   frameShare      // the frame budgets its frames draw on
	paused   map[string]bool // models paused by a value-version refusal; owned by the read loop
	outbox   chan outbound   // the answer lane, written first
	feedbox  chan outbound   // the feed lane: changes pages of the subscription
	draining chan struct{}   // closed by drain: finish queued work, then close 1001
	drainOne sync.Once

	// reader-owned
	helloDone bool
	frameHeld int64 // frame budget held by the frame being handled
	sub       context.CancelFunc
	subDone   chan struct{}

	idleMu   sync.Mutex
	idle     *time.Timer // closes the session with 4000 when nothing was heard for IdleTimeout
	idleOver bool        // reading ended: nothing restarts idle any more

	// writer-owned
	write    writeDeadline // bounds each write by WriteTimeout
	feedHeld *outbound     // the feed lane's head, taken out by mergeFeed and not merged: served next

	helloSeen atomic.Bool  // hello was answered; the hello deadline is off
	cursor    feedPosition // the newest seq delivered on the live feed, or routed past it
	feeding   atomic.Bool  // a live feed (subscribe) runs: only then does cursor say how far behind the device is
	pending   atomic.Int64 // pushes submitted and not yet answered
}

// lag is how many entries the session's live feed has not delivered yet
// of a log whose head is head; ok is false when the session has no live
// feed (it never subscribed, unsubscribed, or its feed ended), so nothing
// is being delivered to it and it is behind nothing.
func (ss *session) lag(head uint64) (lag uint64, ok bool) {
	if !ss.feeding.Load() {
		return 0, false
	}
	if c := ss.cursor.Load(); head > c {
		return head - c, true
	}
	return 0, true
}

// outbound is one entry of a lane: a message ready to send, a push whose
// answer is pending its commit, or an order to close the connection.
type outbound struct {
	msg    syncproto.Message
	push   *pushRequest
	pushID string
	close  *closeOrder
	onSent func() // runs after msg was written (sync lag accounting)
	frame  []byte // msg already encoded (a feed page built from the feed tail), or nil
	held   int64  // frame budget the push holds until its commit ends
	feed   *feedPage
}

// feedPage is the page a feed frame (outbound.frame) was built from: the
// writer merges consecutive pages of one subscription queued behind each
// other into one frame (mergeFeed).
type feedPage struct {
	id    string // the subscription's request id
	after uint64 // the cursor the page was read after
	page  replication.Page
}

type closeOrder struct {
	code   websocket.StatusCode
	reason string
}

func newSession(srv *Server, conn *websocket.Conn, p auth.Principal, remote string) *session {
	return &session{
		srv: srv, conn: conn, p: p, remote: remote, since: srv.now(),
		log:      srv.log.With("client_id", p.ClientID, "tenant", p.Tenant, "remote", remote),
		limiter:  rate.NewLimiter(rate.Limit(srv.cfg.RequestsPerSecond), srv.cfg.RequestBurst),
		frames:   srv.quotas.frameShare(p, srv.frames),
		outbox:   make(chan outbound, outboxSize),
		feedbox:  make(chan outbound, feedPagesInFlight),
		draining: make(chan struct{}),
	}
}

// drain asks the session to stop: it refuses new requests with
// shutting_down, answers the pushes already submitted, then closes with
// 1001 (going away).
func (ss *session) drain() { ss.drainOne.Do(func() { close(ss.draining) }) }

// run serves the session until the client leaves, a protocol error ends it,
// or the server drains it. ctx is the server's hard-stop context.
func (ss *session) run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ss.log.Info("client connected")

	// Anything heard from the client keeps the session: a frame, or the
	// pong answering a keepalive ping (PROTOCOL.md, keepalive).
	ss.idle = time.AfterFunc(ss.srv.cfg.IdleTimeout, func() {
		ss.log.Info("closing idle session")
		ss.closeWith(ctx, syncproto.Errorf(syncproto.CodeIdleTimeout, "nothing arrived for %s", ss.srv.cfg.IdleTimeout))
	})
	// A session must say hello within HelloTimeout, whatever else it sends
	// (pongs keep the idle timer, not this one).
	helloDeadline := time.AfterFunc(ss.srv.cfg.HelloTimeout, func() {
		if !ss.helloSeen.Load() {
			ss.log.Info("no hello in time; closing")
			ss.closeWith(ctx, syncproto.Errorf(syncproto.CodeHelloRequired, "no hello within %s", ss.srv.cfg.HelloTimeout))
		}
	})
	defer helloDeadline.Stop()
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		ss.writeLoop(ctx, cancel)
	}()
	pingDone := make(chan struct{})
	go func() {
		defer close(pingDone)
		ss.keepalive(ctx)
	}()

	closing := ss.readLoop(ctx)
	ss.idleMu.Lock()
	ss.idle.Stop()
	ss.idleOver = true
	ss.idleMu.Unlock()

	ss.stopSubscription()
	if closing != nil {
		ss.outbox <- outbound{close: closing}
	}
	close(ss.outbox)
	<-writerDone
	cancel()
	<-pingDone
	ss.conn.CloseNow()
	ss.log.Info("client disconnected")
}

// readLoop reads and dispatches requests. It returns the close the writer
// must perform after flushing, or nil when the connection is already gone.
func (ss *session) readLoop(ctx context.Context) *closeOrder {
	for {
		typ, frame, err := ss.readFrame(ctx)
		closing, stop := ss.handleFrame(ctx, typ, frame, err)
		ss.frames.release(ss.frameHeld)
		ss.frameHeld = 0
		if stop {
			return closing
		}
	}
}

// handleFrame handles what readFrame returned; stop ends the read loop,
// with the close to perform (nil: the connection is gone). A push takes
// the frame's budget with it (ss.frameHeld) until its commit ends.
func (ss *session) handleFrame(ctx context.Context, typ websocket.MessageType, frame []byte, err error) (closing *closeOrder, stop bool) {
	if errors.Is(err, errFrameTooLarge) {
		ss.heard()
		return ss.refuseAndClose("", syncproto.Errorf(syncproto.CodeFrameTooLarge, "a frame over %d bytes", syncproto.MaxFrameBytes)), true
	}
	if err != nil {
		ss.logReadEnd(err)
		return nil, true
	}
	ss.heard()
	ss.srv.metrics.bytesReceived.Add(float64(len(frame)))
	if typ != websocket.MessageText {
		return ss.refuseAndClose("", syncproto.Errorf(syncproto.CodeMalformed, "binary frames are not part of syncproto.v1")), true
	}
	msg, err := syncproto.DecodeRequest(frame)
	// Every frame is metered, decodable or not.
	limited := ss.overLimit(msg)
	if err != nil {
		perr := syncproto.AsError(err)
		if perr.Code == syncproto.CodeMalformed || perr.Code == syncproto.CodeFrameTooLarge || !ss.helloDone {
			return ss.refuseAndClose(perr.ID, perr), true
		}
		if limited != nil {
			limited.ID = perr.ID
			perr = limited
		}
		ss.refuse(perr.ID, perr)
		return nil, false
	}
	if limited != nil {
		ss.refuse(msg.RequestID(), limited)
		return nil, false
	}
	closing = ss.dispatch(ctx, msg)
	return closing, closing != nil
}

// overLimit meters one frame (msg is nil when it did not decode) against
// the session's request rate and its token's and tenant's mutation quotas
// (a push costs its mutations, anything else one). It returns the
// rate_limited error to answer, or nil to process the frame.
func (ss *session) overLimit(msg syncproto.Message) *syncproto.Error {
	if !ss.limiter.Allow() {
		ss.srv.metrics.rateLimited.Inc()
		e := syncproto.Errorf(syncproto.CodeRateLimited, "more than %.0f requests a second", ss.srv.cfg.RequestsPerSecond)
		e.RetryAfterMS = max(1, time.Duration(float64(time.Second)/ss.srv.cfg.RequestsPerSecond).Milliseconds())
		return e
	}
	n := 1
	if p, ok := msg.(*syncproto.Push); ok {
		n = max(1, len(p.Mutations))
	}
	return ss.srv.quotas.charge(ss.p, n)
}

// errFrameTooLarge: a frame exceeded syncproto.MaxFrameBytes.
var errFrameTooLarge = errors.New("frame over the size limit")

// readFrame reads one message, whole frame or reassembled fragments,
// holding at most MaxFrameBytes+1 of it: a larger one is errFrameTooLarge
// (the rest is left unread; the connection is closing). It reads the
// message's head, then waits for the session's frame budgets (frameShare)
// to grant what the message needs, its size if it ended within the head,
// else frameReservation, and leaves that held in ss.frameHeld. The message
// must arrive within FrameReadTimeout, not counting the wait for the
// budgets; past it the connection is cut.
func (ss *session) readFrame(ctx context.Context) (websocket.MessageType, []byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	typ, r, err := ss.conn.Reader(ctx)
	if err != nil {
		return 0, nil, err
	}
	// A peer that starts a frame and stalls loses its connection, and
	// what the frame held.
	cut := time.AfterFunc(ss.srv.cfg.FrameReadTimeout, cancel)
	defer cut.Stop()
	head, err := readAtMost(r, nil, frameHead)
	if err != nil {
		return 0, nil, err
	}
	need, whole := int64(len(head)), len(head) < frameHead
	if !whole {
		need = frameReservation
	}
	cut.Stop()
	if err := ss.frames.acquire(ctx, need); err != nil {
		return 0, nil, err
	}
	ss.frameHeld = need
	if whole {
		return typ, head, nil
	}
	cut.Reset(ss.srv.cfg.FrameReadTimeout)
	frame, err := readAtMost(r, head, syncproto.MaxFrameBytes+1)
	if err != nil {
		return 0, nil, err
	}
	if len(frame) > syncproto.MaxFrameBytes {
		return typ, nil, errFrameTooLarge
	}
	ss.frames.release(frameReservation - int64(len(frame)))
	ss.frameHeld = int64(len(frame))
	return typ, frame, nil
}

// readAtMost reads r to its end or until it holds limit bytes with head
// (what was read of r before), whichever comes first, in chunks that
// double from 4 KiB to 1 MiB, joined once at the end: a frame costs about
// twice its size at the peak, not the four times a doubling buffer costs.
func readAtMost(r io.Reader, head []byte, limit int64) ([]byte, error) {
	var chunks [][]byte
	if len(head) > 0 {
		chunks = append(chunks, head)
	}
	n := int64(len(head))
	size := int64(4 << 10)
	for n < limit {
		c := make([]byte, min(size, limit-n))
		k, err := io.ReadFull(r, c)
		if k > 0 {
			chunks = append(chunks, c[:k])
		}
		n += int64(k)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		size = min(2*size, 1<<20)
	}
	switch len(chunks) {
	case 0:
		return []byte{}, nil
	case 1:
		return chunks[0], nil
	}
	return bytes.Join(chunks, nil), nil
}

// closeWith sends e, then closes the connection with e's close code and
// the code as the reason (PROTOCOL.md section 13). It may run beside the
// writer: the websocket serializes writes.
func (ss *session) closeWith(ctx context.Context, e *syncproto.Error) {
	ss.srv.metrics.protocolErrors.WithLabelValues(string(e.Code)).Inc()
	if frame, err := syncproto.Encode(e); err == nil {
		wctx, cancel := context.WithTimeout(ctx, ss.srv.cfg.WriteTimeout)
		ss.conn.Write(wctx, websocket.MessageText, frame)
		cancel()
	}
	ss.conn.Close(websocket.StatusCode(syncproto.CloseFor(e.Code)), string(e.Code))
}

func (ss *session) logReadEnd(err error) {
	switch status := websocket.CloseStatus(err); {
	case status == websocket.StatusNormalClosure || status == websocket.StatusGoingAway:
	case status == websocket.StatusMessageTooBig:
		ss.srv.metrics.protocolErrors.WithLabelValues(string(syncproto.CodeFrameTooLarge)).Inc()
		ss.log.Warn("frame over the read limit; connection closed", "limit", syncproto.MaxFrameBytes)
	case status != -1:
		ss.log.Info("connection closed", "status", status.String())
	case errors.Is(err, context.Canceled):
	default:
		ss.log.Info("connection lost", "err", err)
	}
}

// dispatch handles one decoded request.
func (ss *session) dispatch(ctx context.Context, msg syncproto.Message) *closeOrder {
	if hello, ok := msg.(*syncproto.Hello); ok {
		return ss.hello(ctx, hello)
	}
	if !ss.helloDone {
		return ss.refuseAndClose(msg.RequestID(), syncproto.Errorf(syncproto.CodeHelloRequired, "the first request must be hello"))
	}
	select {
	case <-ss.draining:
		ss.refuse(msg.RequestID(), syncproto.Errorf(syncproto.CodeShuttingDown, "server shutting down; reconnect and resend"))
		return nil
	default:
	}
	switch m := msg.(type) {
	case *syncproto.Push:
		ss.push(ctx, m)
	case *syncproto.Pull:
		ss.pull(ctx, m)
	case *syncproto.Subscribe:
		ss.subscribe(ctx, m)
	case *syncproto.Unsubscribe:
		ss.stopSubscription()
		ss.send(&syncproto.Pong{ID: m.ID})
	case *syncproto.Ping:
		ss.send(&syncproto.Pong{ID: m.ID})
	default:
		ss.refuse(msg.RequestID(), syncproto.Errorf(syncproto.CodeUnknownType, "%s is not a request", msg.Type()))
	}
	return nil
}

func (ss *session) hello(ctx context.Context, m *syncproto.Hello) *closeOrder {
	if ss.helloDone {
		return ss.refuseAndClose(m.ID, syncproto.Errorf(syncproto.CodeHelloRequired, "hello was already sent on this connection"))
	}
	if e := ss.bindClientID(m.ClientID); e != nil {
		ss.log.Warn("hello names another client id", "hello_client_id", m.ClientID)
		return ss.refuseAndClose(m.ID, e)
	}
	ss.srv.catchUp(ctx, m.Cursor)
	bounds, err := ss.srv.store.Log.Bounds(ctx, scopeOf(ss.p))
	if err != nil {
		return ss.refuseAndClose(m.ID, internalError(err))
	}
	cursor := m.Cursor
	if m.DatabaseID != "" && m.DatabaseID != ss.srv.databaseID {
		// The client's state is from another database (a restore gave
		// this one a new id): its cursor means nothing here. Welcome it;
		// it resyncs from a snapshot on seeing database_id. A resync, not a
		// protocol error.
		ss.log.Info("hello from a replica of another database; the client resyncs", "hello_database_id", m.DatabaseID)
		ss.srv.metrics.resyncs.Inc()
		cursor = 0
	}
	if cursor > bounds.Head {
		return ss.refuseAndClose(m.ID, syncproto.Errorf(syncproto.CodeCursorAhead, "cursor %d is past the head %d: the client's state is not from this server", m.Cursor, bounds.Head))
	}
	// A hello timestamp too far ahead is not observed, so a broken device
	// clock cannot drag the server's clock forward; the client corrects
	// itself from server_hlc.
	if replication.CheckSkew(m.HLC, ss.srv.now(), ss.srv.cfg.MaxClockSkew) == nil {
		ss.srv.clock.Observe(m.HLC)
	}
	floor, err := ss.srv.store.Ledger.Floor(ctx, ss.p.Tenant)
	if err != nil {
		return ss.refuseAndClose(m.ID, internalError(err))
	}
	grants, err := ss.srv.grantsOf(ctx, ss.p)
	if err != nil {
		ss.log.Error("read scope grants", "err", err)
		return ss.refuseAndClose(m.ID, internalError(err))
	}
	limits, scopes := ss.srv.limits(), map[string]syncproto.ScopeInfo(nil)
	if !ss.srv.declared().Empty() {
		limits.MaxScopeValues = ss.srv.maxScopeValues()
		scopes = ss.srv.declared().Info(func(model string) bool { return ss.p.CanRead(model) || ss.p.CanWrite(model) })
		grants = capGrants(grants, limits.MaxScopeValues)
	}
	ss.helloDone = true
	ss.helloSeen.Store(true)
	ss.cursor.Store(cursor)
	ss.send(&syncproto.Welcome{
		ID: m.ID, NodeID: ss.srv.cfg.NodeID, ServerHLC: ss.srv.clock.Now(), ServerTime: ss.srv.now().UnixMilli(),
		DatabaseID: ss.srv.databaseID, Head: bounds.Head,
		Limits: limits, Models: ss.srv.modelAccess(ss.p),
		DefaultPolicy: ss.srv.cfg.Policies.Default(),
		LedgerFloorMS: floorMS(floor),
		User:          ss.p.User,
		Tenant:        ss.p.Tenant,
		ServerBuild:   buildinfo.Read().String(),
		Servers:       ss.srv.cfg.PeerURLs,
		ValueVersions: ss.srv.versions.announced(),
		Scopes:        scopes,
		Grants:        grants,
	})
	return nil
}

// floorMS is a ledger floor as welcome carries it: 0 for none.
func floorMS(floor time.Time) int64 {
	if floor.IsZero() {
		return 0
	}
	return floor.UnixMilli()
}

func (ss *session) push(ctx context.Context, m *syncproto.Push) {
	ss.srv.metrics.pushes.Inc()
	ss.srv.metrics.batchSize.Observe(float64(len(m.Mutations)))
	// Pending from before the submit: a draining writer must not close the
	// connection between the commit taking this push and its entry
	// reaching the outbox.
	ss.pending.Add(1)
	if ss.paused == nil {
		ss.paused = map[string]bool{}
	}
	req, err := ss.srv.push(ctx, ss.p, m.Mutations, ss.paused)
	if err != nil {
		ss.pending.Add(-1)
		if ctx.Err() != nil {
			return // the session is being cut: nothing more is sent on it
		}
		code := pushRefusalCode(err)
		if code != syncproto.CodeShuttingDown {
			ss.log.Error("push not decided", "err", err)
		}
		refusal := syncproto.Errorf(code, "push not applied (%s); resend it", code)
		ss.srv.slo.answered(refusal, 0)
		ss.refuse(m.ID, refusal)
		return
	}
	// The frame's budget stays held until the commit ends (handle).
	ss.enqueue(outbound{push: req, pushID: m.ID, held: ss.frameHeld})
	ss.frameHeld = 0
}

func (ss *session) pull(ctx context.Context, m *syncproto.Pull) {
	sc, refusal := ss.planScopes(ctx, m.Cursor, m.Scopes, nil, nil)
	if refusal != nil {
		ss.refuse(m.ID, refusal)
		return
	}
	page, resync := ss.read(ctx, m.ID, m.Cursor, m.Limit, sc)
	if resync != nil {
		ss.send(resync)
		return
	}
	if page == nil {
		return
	}
	evictions, resync, refusal := ss.scopeTurn(m.ID, *page, sc, false)
	switch {
	case resync != nil:
		ss.send(resync)
	case refusal != nil:
		ss.refuse(m.ID, refusal)
	default:
		c := changesOf(m.ID, *page)
		c.Evictions = evictions
		ss.send(c)
	}
}

// read serves one page after cursor in the principal's scope, narrowed to
// what sc follows (nil: no scope declared). It answers the refusal itself
// and returns nil, nil when the cursor is ahead or the read failed; it
// returns a resync when the cursor is older than the log.
func (ss *session) read(ctx context.Context, id string, cursor uint64, limit int, sc *subscriptionScopes) (*replication.Page, *syncproto.Resync) {
	ss.srv.catchUp(ctx, cursor)
	if limit == 0 {
		limit = syncproto.DefaultPullLimit
	}
	req := replication.ReadRequest{After: cursor, Scope: sc.readScope(scopeOf(ss.p), ss.p.User), Limit: limit, MaxBytes: feedPageBytes}
	if page, ok := ss.srv.tail.read(ctx, req); ok {
		return &page, nil
	}
	page, err := ss.srv.store.Log.Read(ctx, req)
	var ce *replication.CursorError
	switch {
	case err == nil:
		return &page, nil
	case errors.As(err, &ce) && errors.Is(err, replication.ErrCursorExpired):
		ss.srv.metrics.resyncs.Inc()
		return nil, &syncproto.Resync{ID: id, Reason: syncproto.ResyncCursorExpired, SnapshotURL: sc.snapshotURL(), Head: ce.Bounds.Head}
	case errors.As(err, &ce):
		ss.refuse(id, syncproto.Errorf(syncproto.CodeCursorAhead, "cursor %d is past the head %d", cursor, ce.Bounds.Head))
	case ctx.Err() == nil:
		ss.refuse(id, internalError(err))
	}
	return nil, nil
}

func changesOf(id string, page replication.Page) *syncproto.Changes {
	c := &syncproto.Changes{ID: id, Entries: make([]syncproto.Change, len(page.Entries)), Cursor: page.Next, Head: page.Head, More: !page.CaughtUp()}
	for i, e := range page.Entries {
		c.Entries[i] = e.Change
	}
	return c
}

// subscribe starts the connection's live feed from cursor, replacing any
// previous subscription. The feed sends every page until caught up, then
// one page per commit that touches the scope, until unsubscribe, a resync,
// or the end of the session.
func (ss *session) subscribe(ctx context.Context, m *syncproto.Subscribe) {
	ss.stopSubscription()
	sc, refusal := ss.planScopes(ctx, m.Cursor, m.Scopes, m.Have, m.Resume)
	if refusal != nil {
		ss.refuse(m.ID, refusal)
		return
	}
	subCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	ss.sub, ss.subDone = cancel, done
	ss.srv.metrics.subscribers.Inc()
	ss.feeding.Store(true)
	go func() {
		defer close(done)
		defer ss.srv.metrics.subscribers.Dec()
		defer ss.feeding.Store(false)
		ss.feed(subCtx, m.ID, m.Cursor, sc)
	}()
	ss.recordRequested(ctx, m.Scopes)
}

func (ss *session) stopSubscription() {
	if ss.sub == nil {
		return
	}
	ss.sub()
	<-ss.subDone
	ss.sub, ss.subDone = nil, nil
}

// feed serves a subscription: its catch-up pages from cursor, then a page
// per commit in its scope; for a subscription with scopes (sc), the first
// page carries sc's evictions, and the values sc backfills are sent page
// by page before the next changes page (each backfill page read at a seq
// at or beyond every entry sent before it).
func (ss *session) feed(ctx context.Context, id string, cursor uint64, sc *subscriptionScopes) {
	first := true
	inFlight := make(chan struct{}, feedPagesInFlight)
	defer ss.abortBackfills(sc)
	// Registered before the first read: every entry for it after that
	// read wakes it (route.go).
	route := ss.srv.tail.router.subscribe(sc.readScope(scopeOf(ss.p), ss.p.User))
	ss.cursor.follow(route)
	defer func() {
		ss.cursor.follow(nil)
		route.close()
	}()
	for ctx.Err() == nil {
		if !first && sc != nil && len(sc.backfills) > 0 {
			if !ss.backfill(ctx, id, sc, inFlight) {
				return
			}
			continue
		}
		page, resync := ss.read(ctx, id, cursor, 0, sc)
		if resync != nil {
			ss.sendFeed(ctx, outbound{msg: resync})
			return
		}
		if page == nil {
			return
		}
		evictions, resync, refusal := ss.scopeTurn(id, *page, sc, first)
		switch {
		case resync != nil:
			ss.sendFeed(ctx, outbound{msg: resync})
			return
		case refusal != nil:
			ss.srv.metrics.protocolErrors.WithLabelValues(string(refusal.Code)).Inc()
			ss.sendFeed(ctx, outbound{msg: refusal.WithID(id)})
			return
		case len(page.Grants) > 0:
			// What it follows may have changed: routed by the new set
			// before the next read.
			route.update(sc.readScope(scopeOf(ss.p), ss.p.User))
		}
		if len(page.Entries) > 0 || first || len(evictions) > 0 {
			var out outbound
			if len(evictions) == 0 {
				out.frame = ss.srv.tail.frame(id, *page)
				out.feed = &feedPage{id: id, after: cursor, page: *page}
			}
			if out.frame == nil {
				c := changesOf(id, *page)
				c.Evictions = evictions
				out.msg = c
			}
			entries, seq := page.Entries, page.Next
			// The client's position (admin: cursor, lag) is where the
			// last page it was sent ends, the first (perhaps empty) one
			// included: a client subscribing at the head is not behind.
			// At most feedPagesInFlight pages queued or being written:
			// a session holds at most that many pages of the feed
			// (feedPageBytes of values each), and a subscriber that
			// fell behind gets what is new in full pages rather than
			// one page per commit. A subscriber that stops reading is
			// cut by the write timeout and resumes from its cursor.
			select {
			case inFlight <- struct{}{}:
			case <-ctx.Done():
				return
			}
			out.onSent = func() {
				now := ss.srv.now()
				for _, e := range entries {
					ss.srv.metrics.syncLag.Observe(now.Sub(e.AppliedAt).Seconds())
					if e.Op == syncproto.OpEvict {
						ss.srv.metrics.scopeEvictions.WithLabelValues(syncproto.EvictMoved).Inc()
					}
				}
				ss.srv.metrics.feedDelivered.Add(float64(len(entries)))
				for _, ev := range evictions {
					ss.srv.metrics.scopeEvictions.WithLabelValues(ev.Reason).Inc()
				}
				ss.cursor.Store(seq)
				<-inFlight
			}
			if !ss.sendFeed(ctx, out) {
				return
			}
			first = false
		}
		cursor = page.Next
		if len(page.Entries) == 0 {
			// Nothing readable up to page.Next: the client is there too.
			ss.cursor.Store(cursor)
		}
		if page.CaughtUp() && (sc == nil || len(sc.backfills) == 0) {
			var ok bool
			if cursor, ok = route.wait(ctx, cursor); !ok {
				return
			}
		}
	}
}

// send queues a message from the reader goroutine.
func (ss *session) send(msg syncproto.Message) { ss.enqueue(outbound{msg: msg}) }

func (ss *session) enqueue(o outbound) { ss.outbox <- o }

// sendFeed queues on the feed lane from the subscription goroutine; false
// when ctx ended first.
func (ss *session) sendFeed(ctx context.Context, o outbound) bool {
	select {
	case ss.feedbox <- o:
		return true
	case <-ctx.Done():
		return false
	}
}

// refuse answers a request with an error and keeps the connection.
func (ss *session) refuse(id string, e *syncproto.Error) {
	ss.srv.metrics.protocolErrors.WithLabelValues(string(e.Code)).Inc()
	ss.srv.events.add("request refused", string(e.Code), ss.remote)
	ss.send(e.WithID(id))
}

// refuseAndClose answers with an error, then the connection closes with the
// code PROTOCOL.md assigns to it.
func (ss *session) refuseAndClose(id string, e *syncproto.Error) *closeOrder {
	ss.refuse(id, e)
	return &closeOrder{code: websocket.StatusCode(syncproto.CloseFor(e.Code)), reason: string(e.Code)}
}

func internalError(err error) *syncproto.Error {
	return syncproto.Errorf(syncproto.CodeInternal, "internal error; retry later")
}

// writeLoop writes the session's two lanes, answers first: a frame from
// the outbox (answers, errors, pongs, push results) is always written before
// any feed page still queued, so a subscriber far behind on its feed still
// gets its answers after at most the one feed page being written. Each lane
// keeps its own order, and a pending push is answered when its commit ends,
// so results keep request order; feed pages are written while the writer
// waits for that commit, consecutive ones merged (mergeFeed). After a write
// failure it keeps draining (answers are lost with the connection; the
// client resends and the ledger answers duplicates) so no producer blocks.
func (ss *session) writeLoop(ctx context.Context, fail context.CancelFunc) {
	ss.write = newWriteDeadline(ctx, ss.conn, ss.srv.cfg.WriteTimeout)
	defer ss.write.stop()
	broken := false
	for {
		var o outbound
		var ok bool
		select {
		case o, ok = <-ss.outbox:
		default:
			if h := ss.feedHeld; h != nil {
				o, ok, ss.feedHeld = *h, true, nil
				o = ss.mergeFeed(o)
				break
			}
			select {
			case o, ok = <-ss.outbox:
			case o = <-ss.feedbox:
				o, ok = ss.mergeFeed(o), true
			case <-ss.draining:
				// Finish what is queued, then close going-away. The reader
				// stops when the close handshake completes.
				ss.flushThenClose(ctx, &broken)
				ss.drainOutbox(ctx, &broken)
				return
			}
		}
		if !ok {
			return
		}
		if o.push != nil {
			ss.awaitCommit(ctx, o.push, &broken, fail)
		}
		ss.handle(ctx, o, &broken, fail)
	}
}

// awaitCommit writes feed pages while the push r waits for its commit, so
// the feed does not stall behind a push; it returns when the commit ended or
// ctx did (handle then settles the push).
func (ss *session) awaitCommit(ctx context.Context, r *pushRequest, broken *bool, fail context.CancelFunc) {
	for {
		select {
		case <-r.done:
			return
		default:
		}
		if h := ss.feedHeld; h != nil {
			ss.feedHeld = nil
			ss.handle(ctx, ss.mergeFeed(*h), broken, fail)
			continue
		}
		select {
		case <-r.done:
			return
		case <-ctx.Done():
			return
		case o := <-ss.feedbox:
			ss.handle(ctx, ss.mergeFeed(o), broken, fail)
		}
	}
}

// Bounds of a frame merged from queued feed pages (mergeFeed): what one
// page of the feed holds when read at once.
const (
	mergedPageEntries = syncproto.DefaultPullLimit
	mergedPageBytes   = feedPageBytes
)

// mergeFeed takes the feed pages queued behind o, while they continue o's
// page (the same subscription, each read after the previous one's cursor,
// no membership grants in between), and returns one frame holding them all,
// within mergedPageEntries and mergedPageBytes of values: a subscriber whose
// writer fell behind (the machine is busy writing everyone's pages) gets
// the commits of that time in one frame, one write, instead of one each. A
// page it took and could not merge waits in ss.feedHeld, the feed lane's
// head. Nothing waits for pages to come: a writer that keeps up writes a
// page per commit as before. The merged frame is what the subscription
// would have read at once, so order, cursors and lag accounting (each
// page's onSent, in order) stay as they were.
func (ss *session) mergeFeed(o outbound) outbound {
	if o.feed == nil || o.frame == nil {
		return o
	}
	for {
		var next outbound
		select {
		case next = <-ss.feedbox:
		default:
			return o
		}
		merged, ok := ss.mergePages(o, next)
		if !ok {
			ss.feedHeld = &next
			return o
		}
		o = merged
	}
}

// mergePages returns a followed by b as one feed frame, or false when b
// does not continue a or the result would exceed a page's bounds.
func (ss *session) mergePages(a, b outbound) (outbound, bool) {
	pa, pb := a.feed, b.feed
	if pb == nil || b.frame == nil || pb.id != pa.id || pb.after != pa.page.Next || len(pa.page.Grants) > 0 || len(pb.page.Entries) == 0 {
		return a, false
	}
	n := len(pa.page.Entries) + len(pb.page.Entries)
	if n > mergedPageEntries || valueBytes(pa.page.Entries)+valueBytes(pb.page.Entries) > mergedPageBytes {
		return a, false
	}
	page := pb.page
	page.Entries = append(append(make([]replication.Entry, 0, n), pa.page.Entries...), pb.page.Entries...)
	frame := ss.srv.tail.frame(pa.id, page)
	if frame == nil {
		return a, false // an entry left the tail meanwhile: write them as they are
	}
	ss.srv.metrics.feedPagesMerged.Inc()
	sentA, sentB := a.onSent, b.onSent
	return outbound{frame: frame, feed: &feedPage{id: pa.id, after: pa.after, page: page}, onSent: func() {
		sentA()
		sentB()
	}}, true
}

func valueBytes(entries []replication.Entry) int {
	n := 0
	for _, e := range entries {
		n += len(e.Value)
	}
	return n
}

// writeDeadline bounds each of the writer's writes by WriteTimeout with
// one timer for the session's life: a write that outlasts the timeout
// closes the connection, which fails that write and every later one, as a
// context with a timeout per write did. That context cost a timer, a
// cancellation registration in the session's context and one in the
// websocket library per frame (about 10% of syncd's CPU delivering a busy
// feed); the writes now carry a context that never ends, and the session's
// context, once, closes the connection when it ends. A timer that fires
// just as a write returns cuts the session the same way.
type writeDeadline struct {
	conn      *websocket.Conn
	timer     *time.Timer
	timeout   time.Duration
	unwatched func() bool // stops watching the session's context
}

func newWriteDeadline(ctx context.Context, conn *websocket.Conn, timeout time.Duration) writeDeadline {
	cut := func() { conn.CloseNow() }
	t := time.AfterFunc(timeout, cut)
	t.Stop()
	return writeDeadline{conn: conn, timer: t, timeout: timeout, unwatched: context.AfterFunc(ctx, cut)}
}

// writeFrame writes one text message within the timeout.
func (w writeDeadline) writeFrame(frame []byte) error {
	w.timer.Reset(w.timeout)
	err := w.conn.Write(context.Background(), websocket.MessageText, frame)
	w.timer.Stop()
	return err
}

func (w writeDeadline) stop() {
	w.timer.Stop()
	w.unwatched()
}

func (ss *session) flushThenClose(ctx context.Context, broken *bool) {
	for {
		var o outbound
		var ok bool
		if ss.pending.Load() > 0 {
			// A submitted push is in the outbox or on its way there:
			// wait for it, so its answer goes out before the close.
			select {
			case o, ok = <-ss.outbox:
			case <-ctx.Done():
				return
			}
		} else {
			select {
			case o, ok = <-ss.outbox:
			default:
				ok = false
			}
		}
		if !ok {
			if !*broken {
				ss.closeWith(ctx, syncproto.Errorf(syncproto.CodeShuttingDown, "server shutting down; reconnect and resend unanswered pushes"))
			}
			return
		}
		ss.handle(ctx, o, broken, func() {})
	}
}

// drainOutbox consumes the outbox until the reader closes it, answering
// nothing (the connection is closed) but releasing pending pushes.
func (ss *session) drainOutbox(ctx context.Context, broken *bool) {
	*broken = true
	for o := range ss.outbox {
		ss.handle(ctx, o, broken, func() {})
	}
}

func (ss *session) handle(ctx context.Context, o outbound, broken *bool, fail context.CancelFunc) {
	switch {
	case o.close != nil:
		if !*broken {
			ss.conn.Close(o.close.code, o.close.reason)
		}
		return
	case o.push != nil:
		select {
		case <-o.push.done:
			ss.frames.release(o.held)
		case <-ctx.Done():
			ss.frames.release(o.held)
			// The session is being cut (shutdown deadline, dead
			// connection): the answer cannot be delivered, so do not
			// hold the session for the commit. The client resends and
			// the ledger answers.
			ss.pending.Add(-1)
			*broken = true
			return
		}
		ss.pending.Add(-1)
		o.msg = pushAnswer(o.pushID, o.push)
		ss.srv.slo.answered(o.msg, ss.srv.now().Sub(o.push.arrived))
	}
	if *broken {
		return
	}
	frame, err := o.frame, error(nil) // a feed page arrives encoded
	if frame == nil {
		frame, err = ss.encode(o.msg)
	}
	if err != nil {
		ss.log.Error("encode answer", "type", o.msg.Type(), "err", err)
		frame, _ = syncproto.Encode(internalError(err).WithID(o.msg.RequestID()))
	}
	err = ss.write.writeFrame(frame)
	if err != nil {
		*broken = true
		fail()
		return
	}
	ss.srv.metrics.bytesSent.Add(float64(len(frame)))
	if o.push != nil {
		ss.srv.metrics.pushAnswerSeconds.Observe(ss.srv.now().Sub(o.push.arrived).Seconds())
	}
	if o.onSent != nil {
		o.onSent()
	}
}

// encode returns msg's frame. A push_result whose winners' values would
// make it larger than the announced max_frame_bytes leaves the largest out
// (PROTOCOL.md 5.4), so that no write is stuck by another's size.
func (ss *session) encode(msg syncproto.Message) ([]byte, error) {
	pr, ok := msg.(*syncproto.PushResult)
	if !ok {
		return syncproto.Encode(msg)
	}
	frame, omitted, err := syncproto.EncodePushResult(pr, ss.srv.limits().MaxFrameBytes)
	if omitted > 0 {
		ss.srv.metrics.valuesOmitted.Add(float64(omitted))
	}
	return frame, err
}

// pushAnswer is the answer to a push once its commit ended: the results, or
// a retryable error saying nothing of it was applied.
func pushAnswer(id string, r *pushRequest) syncproto.Message {
	if r.err != nil {
		code := pushRefusalCode(r.err)
		return syncproto.Errorf(code, "push not applied (%s); resend it", code).WithID(id)
	}
	return &syncproto.PushResult{ID: id, Results: r.fx.Results}
}

// heard restarts the idle timer, unless the session's reading ended (a
// websocket ping can still arrive during the close handshake).
func (ss *session) heard() {
	ss.idleMu.Lock()
	defer ss.idleMu.Unlock()
	if !ss.idleOver {
		ss.idle.Reset(ss.srv.cfg.IdleTimeout)
	}
}

// keepalive pings the client; a pong counts as hearing from it. A ping
// without a pong ends nothing by itself: a client whose stack does not
// answer pings keeps its session with ping messages, and a silent one is
// closed by the idle timer (4000), as PROTOCOL.md section 14 says. It also
// rechecks the session's token: once revoked, the session gets
// unauthorized and closes 1008.
func (ss *session) keepalive(ctx context.Context) {
	ping := time.NewTicker(ss.srv.cfg.PingInterval)
	defer ping.Stop()
	recheck := time.NewTicker(ss.srv.cfg.TokenRecheck)
	defer recheck.Stop()
	p := ss.principal()
	for {
		select {
		case <-ctx.Done():
			return
		case <-recheck.C:
			if err := ss.srv.cfg.Authenticator.Check(p); err != nil {
				ss.log.Info("token no longer valid; closing its session", "token_id", p.TokenID, "err", err)
				ss.closeWith(ctx, authError(err))
				return
			}
			// A cluster node that must not serve (its token file misses a
			// revocation the others have, it diverged...) ends its
			// sessions: the devices reconnect to another node.
			if c := ss.srv.cfg.Cluster; c != nil {
				if err := c.Refuses(); err != nil {
					ss.log.Warn("this node does not serve; closing the session", "err", err)
					ss.closeWith(ctx, syncproto.Errorf(syncproto.CodeServerBusy, "this node does not serve: %v; another node does", err))
					return
				}
			}
		case <-ping.C:
			pctx, cancel := context.WithTimeout(ctx, ss.srv.cfg.WriteTimeout)
			err := ss.conn.Ping(pctx)
			cancel()
			if err == nil {
				ss.heard()
			}
		}
	}
}

// String names the session in logs.
func (ss *session) String() string { return fmt.Sprintf("%s@%s", ss.principal().ClientID, ss.remote) }
