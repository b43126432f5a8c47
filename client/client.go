package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd-dev/syncd/client/netmonitor"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/client/reconnect"
	"github.com/syncd-dev/syncd/client/synccore"
	"github.com/syncd-dev/syncd/syncproto"
)

var (
	// ErrClosed is returned by every method of a closed Client.
	ErrClosed = errors.New("client: closed")
	// ErrOffline says Sync found no bound connection: the writes stay
	// queued and replay when the server is reachable.
	ErrOffline = errors.New("client: offline")
	// ErrUnknownOp says Await was given an op id this device never wrote
	// (or whose outcome is older than OutcomeRetention).
	ErrUnknownOp = errors.New("client: unknown op id")
	// ErrUnauthorized says the server refused the token.
	ErrUnauthorized = errors.New("client: unauthorized")
)

// Client is the facade apps use: writes go to the durable queue and the
// local replica's pending overlay, with no network on the path; reads come
// from the replica (read-your-writes, online or not); a background link
// replays the queue and follows the change feed whenever a server is
// reachable. All methods are safe for concurrent use.
type Client struct {
	cfg     Config
	queue   offlinequeue.Queue
	replica *replica
	log     *slog.Logger
	now     func() time.Time
	metrics *metrics

	quickLosses int // consecutive links lost soon after they were made; under mu
	clockMu     sync.Mutex
	clock       *syncproto.Clock
	// serverOffset is the server's wall clock minus this device's, in ms,
	// as the last welcome measured it (welcome.server_time_ms).
	serverOffset int64

	monitor *netmonitor.Monitor
	coord   *reconnect.Coordinator
	driver  *driver                    // runs the sync core; see worker.go
	models  atomic.Pointer[modelRules] // from the last welcome; nil before one

	mu        sync.Mutex
	candidate *conn // opened by the Reconnect step, not yet bound
	active    *link // the bound connection
	closed    bool

	kick       chan struct{} // new writes wait for replay
	queued     queueTail     // writes queued and not yet read by the driver
	outcomes   broadcast     // woken whenever an outcome is recorded
	changes    changeHub
	watch      *statusHub                   // WatchStatus channels
	reconcile  atomic.Bool                  // the overlay missed a queued write
	refusal    atomic.Pointer[RefusedError] // the server's last refusal of the session; nil once bound
	tokens     *tokens                      // the bearer token, from Config.Token or Config.TokenSource
	resyncNext atomic.Bool                  // the server answered cursor_ahead: the next bind resyncs

	ctx    context.Context // the client's lifetime
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Open opens the local replica, repairs its pending overlay from the queue
// and starts the background link (network monitor, reconnect, replay,
// change feed). It returns without waiting for the network.
//
// Open owns cfg.Queue from the call on: when it fails, it has closed it.
func Open(ctx context.Context, cfg Config) (*Client, error) {
	closeQueue := func() {
		if cfg.Queue != nil {
			cfg.Queue.Close()
		}
	}
	if err := cfg.setDefaults(); err != nil {
		closeQueue()
		return nil, fmt.Errorf("client: config: %w", err)
	}
	rep, err := openReplica(ctx, cfg.Queue, cfg.ReplicaPath, cfg.ReplicaSynchronous, cfg.Now)
	if err != nil {
		closeQueue()
		return nil, fmt.Errorf("client: open replica: %w", err)
	}
	c := &Client{cfg: cfg, queue: cfg.Queue, replica: rep, log: cfg.Logger, now: cfg.Now, kick: make(chan struct{}, 1), watch: newStatusHub(), tokens: newTokens(cfg)}
	fail := func(err error) (*Client, error) {
		rep.close()
		closeQueue()
		return nil, fmt.Errorf("client: %w", err)
	}
	if c.metrics, err = newMetrics(cfg.Registerer); err != nil {
		return fail(err)
	}
	if err := rep.reconcile(ctx, c.queue); err != nil {
		return fail(fmt.Errorf("reconcile overlay with the queue: %w", err))
	}
	if err := c.pruneOutcomes(ctx); err != nil {
		return fail(err)
	}
	// A restarted clock never issues a timestamp older than one this
	// replica holds.
	wall, err := rep.newestWall(ctx)
	if err != nil {
		return fail(err)
	}
	c.clock = syncproto.NewClock(cfg.ClientID, cfg.Now)
	if wall > 0 {
		c.clock.Observe(syncproto.Timestamp{Wall: wall, Origin: cfg.ClientID})
	}

	cursor, err := rep.cursor(ctx)
	if err != nil {
		return fail(err)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.driver = newDriver(c, cursor)
	c.wg.Go(c.driver.run)
	c.coord, err = reconnect.New(reconnect.Steps{
		Reconnect: c.stepReconnect,
		Activate:  c.stepActivate,
		Bind:      c.stepBind,
		Replay:    c.stepReplay,
	}, reconnect.Config{Backoff: cfg.Backoff, Logger: c.log, Registerer: cfg.Registerer, OnOutcome: c.onOutcome})
	if err != nil {
		c.cancel()
		c.wg.Wait()
		return fail(err)
	}
	probe, err := c.probe()
	if err != nil {
		c.coord.Close()
		c.cancel()
		c.wg.Wait()
		return fail(err)
	}
	c.monitor, err = netmonitor.New(netmonitor.Config{Probe: probe, Interval: cfg.ProbeInterval, Logger: c.log, Registerer: cfg.Registerer})
	if err != nil {
		c.coord.Close()
		c.cancel()
		c.wg.Wait()
		return fail(err)
	}
	c.wg.Go(c.runOutcomePruning)
	events, unsubscribe := c.monitor.Subscribe()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer unsubscribe()
		c.followNetwork(events)
	}()
	if err := c.monitor.Start(c.ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("client: %w", err)
	}
	return c, nil
}

// probe checks that any of the servers answers /healthz.
func (c *Client) probe() (netmonitor.Probe, error) {
	probes := make([]netmonitor.Probe, len(c.cfg.ServerURLs))
	for i, u := range c.cfg.ServerURLs {
		p, err := netmonitor.HTTPProbe(c.cfg.HTTPClient, httpURL(u, "/healthz"))
		if err != nil {
			return nil, err
		}
		probes[i] = p
	}
	return func(ctx context.Context) error {
		var errs []error
		for _, p := range probes {
			err := p(ctx)
			if err == nil {
				return nil
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}, nil
}

// followNetwork turns monitor events into coordinator signals.
func (c *Client) followNetwork(events <-chan netmonitor.Event) {
	for ev := range events {
		c.driver.post(event{in: synccore.Network{Online: ev.State == netmonitor.Online}})
		switch ev.State {
		case netmonitor.Online:
			c.coord.OnOnline()
		case netmonitor.Offline:
			c.coord.OnOffline()
			c.dropLink(nil)
		}
		c.statusChanged()
	}
}

func (c *Client) onOutcome(o reconnect.Outcome) {
	c.log.Debug("reconnect run ended", "outcome", o.String())
}

// Close stops the background link (a replay in progress is cancelled; its
// unanswered writes stay queued), then closes the replica and the queue.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.monitor.Close()
	c.coord.Close()
	c.dropLink(nil)
	c.mu.Lock()
	if c.candidate != nil {
		c.candidate.close()
		c.candidate = nil
	}
	c.mu.Unlock()
	c.wg.Wait()
	c.outcomes.wake()
	c.changes.close()
	return errors.Join(c.replica.close(), c.queue.Close())
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// stamp issues the next timestamp of this device's clock.
func (c *Client) stamp() syncproto.Timestamp {
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	return c.clock.Now()
}

// ErrSnapshotTooLarge: a snapshot exceeded Config.MaxSnapshotBytes. The
// replica was left as it was.
var ErrSnapshotTooLarge = errors.New("client: snapshot larger than MaxSnapshotBytes")

// boundedReader reads at most left bytes of r, then fails with
// ErrSnapshotTooLarge and remembers it (exceeded): a line reader above it
// may report the cut as a malformed last line instead.
type boundedReader struct {
	r        io.Reader
	left     int64
	exceeded bool
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		b.exceeded = true
		return 0, ErrSnapshotTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// MaxObservedClockAhead bounds how far ahead of the server's wall clock (as
// the last welcome measured it) a timestamp the client observes may be: the
// server accepts writes up to its skew bound ahead, so a legitimate one is
// within twice the default bound. One further ahead (a broken or hostile
// peer's, say year 9999) is not adopted, so it cannot drag every later
// write of the device to the end of time; it is logged and counted.
const MaxObservedClockAhead = 2 * syncproto.DefaultMaxClockSkew

// observe advances the device clock past a server timestamp, unless the
// timestamp is more than MaxObservedClockAhead ahead of the server's clock.
func (c *Client) observe(ts syncproto.Timestamp) {
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	serverNow := c.now().UnixMilli() + c.serverOffset
	if ts.Wall > serverNow+MaxObservedClockAhead.Milliseconds() {
		c.metrics.clockRefused.Inc()
		c.log.Warn("not adopting a timestamp far ahead of the server's clock", "hlc", ts.String(), "ahead_ms", ts.Wall-serverNow)
		return
	}
	c.clock.Observe(ts)
}

// measureOffset records the server's clock offset from a welcome.
func (c *Client) measureOffset(w *syncproto.Welcome) {
	if w.ServerTime == 0 {
		return // an older server: assume the clocks agree
	}
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	c.serverOffset = w.ServerTime - c.now().UnixMilli()
}

// correctClock runs after the server refused writes for clock skew: this
// device's clock is ahead of the server's by more than the bound. The clock
// is replaced by one that reads the device's time shifted by the offset
// measured at welcome, so re-stamped writes fall within the bound. This is
// the one place a device clock may step back; writes already applied with
// the fast clock's stamps may win over later ones for up to the bound.
func (c *Client) correctClock(w *syncproto.Welcome) {
	offset := time.Duration(w.ServerTime-c.now().UnixMilli()) * time.Millisecond
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	now := c.now
	c.clock = syncproto.NewClock(c.cfg.ClientID, func() time.Time { return now().Add(offset) })
	c.clock.Observe(w.ServerHLC)
	c.log.Warn("device clock ahead of the server; re-stamping refused writes", "offset", offset)
}

// --- writes -----------------------------------------------------------

// Put writes value (a JSON document) under model/key, last-writer-wins or
// as the model's policy says. It returns the write's op id once the write
// is durable in the queue; no network is on the path.
func (c *Client) Put(ctx context.Context, model, key string, value json.RawMessage) (string, error) {
	return c.write(ctx, syncproto.Mutation{Model: model, Key: key, Op: syncproto.OpPut, Value: value})
}

// Delete deletes model/key. It returns the write's op id once durable.
func (c *Client) Delete(ctx context.Context, model, key string) (string, error) {
	return c.write(ctx, syncproto.Mutation{Model: model, Key: key, Op: syncproto.OpDelete})
}

// PutIfVersion writes value only if the server's record is still at
// version (0: the key must not exist). Models with the optimistic policy
// require it. A stale version ends as a conflict handed to the
// ConflictHandler.
func (c *Client) PutIfVersion(ctx context.Context, model, key string, value json.RawMessage, version uint64) (string, error) {
	return c.write(ctx, syncproto.Mutation{Model: model, Key: key, Op: syncproto.OpPut, Value: value, BaseVersion: &version})
}

// DeleteIfVersion deletes model/key only if the server's record is still at
// version. Models with the optimistic policy require it for deletes; a
// stale version ends as a conflict handed to the ConflictHandler.
func (c *Client) DeleteIfVersion(ctx context.Context, model, key string, version uint64) (string, error) {
	return c.write(ctx, syncproto.Mutation{Model: model, Key: key, Op: syncproto.OpDelete, BaseVersion: &version})
}

func (c *Client) write(ctx context.Context, m syncproto.Mutation) (string, error) {
	if c.isClosed() {
		return "", ErrClosed
	}
	if err := c.models.Load().check(&m); err != nil {
		return "", err
	}
	opID, err := syncproto.NewOpID()
	if err != nil {
		return "", err
	}
	if m.BaseVersion == nil {
		// An unconditional write says which version it was made over, so a
		// last-writer-wins race it is part of reaches the conflict log
		// whichever write arrives first.
		seen, err := c.replica.serverVersion(ctx, m.Model, m.Key)
		if err != nil {
			return "", err
		}
		m.SeenVersion = &seen
	}
	m.OpID = opID
	m.HLC = c.stamp()
	if err := c.enqueue(ctx, &m); err != nil {
		return "", err
	}
	return opID, nil
}

// enqueue validates a mutation, makes it durable in the queue, adds it to
// the pending overlay and wakes the replay. The op id is the queue's
// idempotency key, so enqueueing the same op twice queues it once.
func (c *Client) enqueue(ctx context.Context, m *syncproto.Mutation) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("client: %s %s/%s: %w", m.Op, m.Model, m.Key, err)
	}
	payload, err := json.Marshal(m)
	if err != nil {
		return err
	}
	fresh, overlayErr, err := c.replica.enqueue(ctx, payload, m)
	if err != nil {
		return fmt.Errorf("client: queue %s/%s: %w", m.Model, m.Key, err)
	}
	if it, ok := queuedItem(fresh, payload, m); ok {
		c.queued.add(it) // before the kick: the driver reads it from memory
	}
	// The write is durable from here on. Should the overlay update have
	// failed, the write still replays, and the overlay is repaired from
	// the queue.
	if overlayErr != nil {
		c.log.Error("pending overlay not updated; it will be repaired from the queue", "op_id", m.OpID, "err", overlayErr)
		c.reconcile.Store(true)
	}
	c.changes.publish(ChangeEvent{Model: m.Model, Key: m.Key, Value: m.Value, Deleted: m.Op == syncproto.OpDelete, Local: true})
	c.statusChanged()
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return nil
}

// queuedItem is the queue item a write inserted (fresh, its id; 0 for
// none) as the driver would read it back from payload: its value in
// encoding/json's form (compact, HTML escaped) and a copy, as the app may
// reuse its buffer once Put returns.
func queuedItem(fresh offlinequeue.ID, payload []byte, m *syncproto.Mutation) (synccore.Item, bool) {
	if fresh == 0 {
		return synccore.Item{}, false
	}
	it := synccore.Item{ID: uint64(fresh), Size: len(payload), Mutation: *m}
	if len(m.Value) > 0 {
		v, err := json.Marshal(m.Value)
		if err != nil {
			return synccore.Item{}, false
		}
		it.Mutation.Value = v
	}
	return it, true
}

// --- reads ------------------------------------------------------------

// Get reads model/key from the local replica: this device's newest pending
// write if there is one, else the server's record as last synced. found
// is false for an absent or deleted key.
func (c *Client) Get(ctx context.Context, model, key string) (rec Record, found bool, err error) {
	if c.isClosed() {
		return Record{}, false, ErrClosed
	}
	return c.replica.get(ctx, model, key)
}

// List reads a key range of model from the local replica, pending writes
// over the server's records, in key order.
func (c *Client) List(ctx context.Context, model string, o ListOptions) ([]Record, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	return c.replica.list(ctx, model, o)
}

// Await waits for the final outcome of a write (by the op id Put
// returned). Outcomes are durable: Await works across restarts. While the
// server refuses the session for a reason only the app can fix (a bad or
// revoked token, a wrong client id), Await returns that *RefusedError
// instead of waiting for an outcome that cannot come.
func (c *Client) Await(ctx context.Context, opID string) (Outcome, error) {
	for {
		if c.isClosed() {
			return Outcome{}, ErrClosed
		}
		// Registered before the read: an outcome committed after it is
		// handed over (replica.handoffs) or wakes this call.
		wake := c.outcomes.waiter()
		h := c.replica.handoffs.wait(opID)
		o, again, err := c.awaitOnce(ctx, opID, h, wake)
		c.replica.handoffs.leave(opID, h)
		if !again {
			return o, err
		}
	}
}

// awaitOnce reads opID's outcome; while the write is pending it waits for
// the outcome's handoff h (and returns it) or a wake (again: read again).
func (c *Client) awaitOnce(ctx context.Context, opID string, h *handoff, wake <-chan struct{}) (o Outcome, again bool, err error) {
	o, found, pending, err := c.replica.outcomeOrPending(ctx, opID)
	switch {
	case err != nil || found:
		return o, false, err
	case !pending:
		return Outcome{}, false, fmt.Errorf("await %s: %w", opID, ErrUnknownOp)
	}
	if err := c.permanentRefusal(); err != nil {
		return Outcome{}, false, fmt.Errorf("await %s: %w", opID, err)
	}
	select {
	case <-h.ch:
	case <-wake:
	case <-ctx.Done():
		return Outcome{}, false, ctx.Err()
	}
	// A decision hands its outcome over before it wakes every Await.
	if o, ok := h.handed(); ok {
		return o, false, nil
	}
	if c.isClosed() {
		return Outcome{}, false, ErrClosed
	}
	return Outcome{}, true, nil
}

// Lookup returns a write's outcome if it has one.
func (c *Client) Lookup(ctx context.Context, opID string) (Outcome, bool, error) {
	if c.isClosed() {
		return Outcome{}, false, ErrClosed
	}
	return c.replica.outcome(ctx, opID)
}

// published wakes Await callers after an outcome was recorded.
func (c *Client) published() {
	c.outcomes.wake()
	c.statusChanged()
}

// Status is a snapshot of the client's state.
type Status struct {
	Online      bool      // the network monitor reaches a server
	Connected   bool      // a connection is bound (hello answered)
	Pending     int       // writes waiting in the queue
	DeadLetters int       // writes in the dead-letter store
	LastSync    time.Time // end of the last replay that left nothing behind
	Cursor      uint64    // oplog seq the local replica reflects
	// DatabaseID is the server database (welcome.database_id) the replica
	// was last synced from; "" before the first sync. When a server
	// answers with another one (replaced, restored into a new database,
	// another cluster), the client resyncs from a snapshot and this
	// changes.
	DatabaseID string
	// State sums the above up: offline (the probe found no server),
	// connecting (online, or not yet probed, and not yet welcomed),
	// syncing, idle, or refused (LastError says why).
	State State
	// LastError is the server's last refusal of the session, nil once a
	// connection is bound.
	LastError error
}

// State is what the client is doing; see Status.
type State = synccore.State

// States (Status.State).
const (
	StateOffline    = synccore.StateOffline
	StateConnecting = synccore.StateConnecting
	StateSyncing    = synccore.StateSyncing
	StateIdle       = synccore.StateIdle
	StateRefused    = synccore.StateRefused
)

// Status reports the client's state.
func (c *Client) Status(ctx context.Context) (Status, error) {
	if c.isClosed() {
		return Status{}, ErrClosed
	}
	st, err := c.queue.Stats(ctx)
	if err != nil {
		return Status{}, err
	}
	cursor, err := c.replica.cursor(ctx)
	if err != nil {
		return Status{}, err
	}
	last, err := c.replica.lastSync(ctx)
	if err != nil {
		return Status{}, err
	}
	dbID, err := c.replica.databaseID(ctx)
	if err != nil {
		return Status{}, err
	}
	c.mu.Lock()
	connected := c.active != nil && c.active.bound.Load()
	c.mu.Unlock()
	v := c.driver.view.Load()
	out := Status{Online: v.online, Connected: connected,
		Pending: st.Pending, DeadLetters: st.DeadLetters, LastSync: last, Cursor: cursor, DatabaseID: dbID}
	if re := c.refusal.Load(); re != nil {
		out.LastError = re
	}
	if err := c.tokens.err(); err != nil {
		out.LastError = err
	}
	out.State = v.status.State // the sync core's
	if !connected && c.permanentRefusal() != nil {
		// The core hears of a refusal through the driver's events, a
		// moment after Sync and LastError know it: say what they say.
		out.State = StateRefused
	}
	return out, nil
}

// Sync replays the queue now through the bound connection and waits for
// that pass to end. When no connection is bound it returns the server's
// refusal of the session (a *RefusedError: errors.Is ErrUnauthorized,
// ErrWrongClientID, ErrServerBusy, ErrIncompatible) if there was one, else
// ErrOffline.
func (c *Client) Sync(ctx context.Context) error {
	c.mu.Lock()
	l, closed := c.active, c.closed
	c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if l == nil {
		if re := c.refusal.Load(); re != nil {
			return re
		}
		return ErrOffline
	}
	return c.driver.sync(ctx)
}

// --- the reconnect steps ------------------------------------------------

// stepReconnect dials the servers in turn, starting after the last one tried.
func (c *Client) stepReconnect(ctx context.Context) error {
	c.mu.Lock()
	if c.candidate != nil {
		c.candidate.close()
		c.candidate = nil
	}
	c.mu.Unlock()
	var errs []error
	for _, u := range c.cfg.ServerURLs {
		token, err := c.tokens.get(ctx)
		if err != nil {
			c.statusChanged()
			return err
		}
		cn, err := dial(ctx, u, token, c.cfg.HTTPClient)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.mu.Lock()
		c.candidate = cn
		c.mu.Unlock()
		return nil
	}
	err := errors.Join(errs...)
	c.refused(err)
	return err
}

// stepActivate makes the dialled connection the active one, replacing any
// previous link.
func (c *Client) stepActivate(ctx context.Context) error {
	c.dropLink(nil)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.candidate == nil {
		return errors.New("activate: no connection")
	}
	if c.closed {
		return ErrClosed
	}
	c.active = newLink(c, c.candidate)
	c.candidate = nil
	return nil
}

// stepBind sends hello, bootstraps a fresh replica from a snapshot,
// subscribes to the change feed and starts the link's goroutines.
func (c *Client) stepBind(ctx context.Context) error {
	c.mu.Lock()
	l := c.active
	c.mu.Unlock()
	if l == nil {
		return errors.New("bind: no active connection")
	}
	if err := l.bind(ctx); err != nil {
		c.refused(err)
		c.dropLink(l)
		if re := sessionRefusal(err); re != nil && re != err {
			err = fmt.Errorf("%w: %w", err, re) // its retry hint reaches the coordinator
		}
		return err
	}
	c.refusal.Store(nil)
	c.statusChanged()
	return nil
}

// stepReplay waits for the first pass over the queue on the bound link.
func (c *Client) stepReplay(ctx context.Context) error {
	return c.driver.sync(ctx)
}

// dropLink tears down the active link (only if it is l, when l is given).
func (c *Client) dropLink(l *link) {
	c.mu.Lock()
	cur := c.active
	if cur == nil || (l != nil && cur != l) {
		c.mu.Unlock()
		return
	}
	c.active = nil
	c.mu.Unlock()
	cur.stop()
	c.statusChanged()
}

// linkLost runs when a bound connection ends on its own: reconnect if the
// network is still up.
func (c *Client) linkLost(l *link, err error) {
	c.log.Info("connection lost", "server", l.conn.url, "err", err)
	c.refused(err)
	c.dropLink(l)
	if c.isClosed() {
		return
	}
	c.coord.OnOffline()
	lived := c.now().Sub(l.since)
	delay := c.relinkDelay(lived)
	if delay == 0 {
		if c.monitor.Current() == netmonitor.Online {
			c.coord.OnOnline()
		}
		return
	}
	// A link lost soon after it was made (a server that accepts and then
	// drops, or refuses after the bind) is retried after a jittered,
	// growing wait, never in a tight loop; any other after a jittered
	// wait, so devices that lost one server together do not return in step.
	c.log.Info("waiting before reconnecting", "wait", delay, "link_lived", lived)
	c.wg.Go(func() {
		select {
		case <-c.ctx.Done():
		case <-time.After(delay):
			if !c.isClosed() && c.monitor.Current() == netmonitor.Online {
				c.coord.OnOnline()
			}
		}
	})
}

// healthyLinkLife is how long a link must last for its loss to count as
// an ordinary disconnection, reconnected within RetryInterval, rather
// than a quick loss.
const healthyLinkLife = 30 * time.Second

// relinkDelay returns how long to wait before reconnecting after a link
// that lived for lived was lost: after a healthy link (which also resets
// the count), a random wait below RetryInterval, which spreads the
// reconnects of every device a server restart dropped at once; else
// RetryInterval doubled per consecutive quick loss, capped at
// MaxRetryInterval, with jitter in [1/2, 1).
func (c *Client) relinkDelay(lived time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if lived >= healthyLinkLife {
		c.quickLosses = 0
		return time.Duration(rand.Int64N(int64(c.cfg.RetryInterval)))
	}
	c.quickLosses++
	d := c.cfg.RetryInterval << min(c.quickLosses-1, 16)
	d = min(d, c.cfg.MaxRetryInterval)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// refused records the refusal err carries, if any, and wakes Await so it
// can report it.
func (c *Client) refused(err error) {
	re := sessionRefusal(err)
	if re == nil {
		return
	}
	c.log.Warn("the server refused the session", "code", re.Code, "message", re.Message, "retry_after", re.RetryAfter)
	c.refusal.Store(re)
	if c.refreshable(re) {
		c.tokens.invalidate()
	}
	if !re.Transient() && !c.refreshable(re) {
		c.driver.post(event{in: synccore.Refused{Err: &syncproto.Error{Code: re.Code, Message: re.Message}}})
	}
	c.outcomes.wake()
	c.statusChanged()
}

// permanentRefusal returns the server's refusal of the session when only
// the app can end it (a bad or revoked token, a wrong client id), else nil.
func (c *Client) permanentRefusal() error {
	if re := c.refusal.Load(); re != nil && !re.Transient() && !c.refreshable(re) {
		return re
	}
	return nil
}

// refreshable reports whether a refusal is the token's and a TokenSource
// may end it with a fresh token.
func (c *Client) refreshable(re *RefusedError) bool {
	return c.cfg.TokenSource != nil && (errors.Is(re, ErrTokenExpired) || errors.Is(re, ErrUnauthorized))
}

// loadSnapshot replaces the replica's records with the server's snapshot.
func (c *Client) loadSnapshot(ctx context.Context, baseURL string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.SnapshotTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, httpURL(baseURL, syncproto.SnapshotPath), nil)
	if err != nil {
		return 0, err
	}
	token, err := c.tokens.get(ctx)
	if err != nil {
		return 0, fmt.Errorf("snapshot: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("snapshot: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return 0, fmt.Errorf("snapshot: %s", resp.Status)
	}
	body := &boundedReader{r: resp.Body, left: c.cfg.MaxSnapshotBytes}
	sr, err := syncproto.NewSnapshotReader(body)
	if err == nil {
		var head uint64
		head, err = c.replica.resetFromSnapshot(ctx, sr)
		if err == nil {
			c.metrics.resyncs.Inc()
			c.changes.publish(ChangeEvent{Resync: true})
			return head, nil
		}
	}
	if body.exceeded {
		return 0, fmt.Errorf("snapshot: %w (%d bytes)", ErrSnapshotTooLarge, c.cfg.MaxSnapshotBytes)
	}
	return 0, fmt.Errorf("snapshot: %w", err)
}
