package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
	driver  *driver                    // runs the sync core; see driver.go
	models  atomic.Pointer[modelRules] // from the last welcome; nil before one
	servers *servers                   // configured and learnt server URLs

	mu        sync.Mutex
	candidate *conn // opened by the Reconnect step, not yet bound
	active    *link // the bound connection
	closed    bool

	kick       chan struct{} // new writes wait for replay
	queued     queueTail     // writes queued and not yet read by the driver
	outcomes   broadcast     // woken whenever an outcome is recorded
	changes    changeHub
	watch      *statusHub                       // WatchStatus channels
	reconcile  atomic.Bool                      // the overlay missed a queued write
	refusal    atomic.Pointer[RefusedError]     // the server's last refusal of the session; nil once bound
	tokens     *tokens                          // the bearer token, from Config.Token or Config.TokenSource
	resyncNext atomic.Bool                      // the server answered cursor_ahead: the next bind resyncs
	limits     atomic.Pointer[syncproto.Limits] // the last welcome's; nil before one
	scopeWake  broadcast                        // woken when the core's status changes, for WaitScope

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
	if err := rep.recordModelVersions(ctx, cfg.ModelVersions); err != nil {
		return fail(fmt.Errorf("model versions: %w", err))
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

	c.servers = newServers(cfg.ServerURLs)
	if err := c.loadServers(ctx); err != nil {
		return fail(err)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	scopes, err := c.scopesAtOpen(ctx)
	if err != nil {
		return fail(err)
	}
	c.driver = newDriver(c, cursor, scopes)
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
	c.monitor, err = netmonitor.New(netmonitor.Config{Probe: c.probe(), Interval: cfg.ProbeInterval, OfflineInterval: cfg.OfflineProbeInterval, Logger: c.log, Registerer: cfg.Registerer})
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
	m.ValueVersion = c.valueVersion(m.Model)
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
	// With the replica in the queue's file, the item is handed to the
	// driver, and the driver woken, once only the item's commit is left
	// (at SyncNormal, which has no sync to wait for, just after it), so
	// its push travels and syncd applies it while the commit syncs. The
	// driver's own later writes to the queue (settling the item) commit
	// after it, and this call returns only once it is durable; should that
	// commit fail, the error says its fate is unknown (ErrPoisoned) and
	// the write may have reached syncd, as after any failed commit.
	it, ok := queuedItem(1, payload, m)
	var handed bool   // set by committing, which happens before enqueue returns
	var misses uint64 // the tail's missed reads when the item was handed over
	committing := func(id offlinequeue.ID) {
		if !ok {
			return
		}
		it.ID, handed = uint64(id), true
		misses = c.queued.add(it)
		c.wake()
	}
	fresh, overlayErr, err := c.replica.enqueue(ctx, payload, m, committing)
	if err != nil {
		return fmt.Errorf("client: queue %s/%s: %w", m.Model, m.Key, err)
	}
	if !handed && fresh != 0 && ok {
		it.ID = uint64(fresh)
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
	// A write handed over before its commit was announced then; it is
	// announced again only if a read of the driver went to the queue since
	// (where the uncommitted write was not to be seen). A second wake-up
	// otherwise costs the driver a read of the queue that finds nothing,
	// beside every awaited write's push.
	if !handed || c.queued.missedSince(misses) {
		c.wake()
	}
	return nil
}

// wake tells the driver a write was queued (Client.kick); it never blocks.
func (c *Client) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
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
// returned). Outcomes are durable: Await works across restarts (an
// applied or superseded outcome may be re-learned from the server's
// ledger after a power cut; see "What durable outcome means" in the
// package documentation). While the
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
	// Paused lists the models whose writes wait for a server that
	// accepts their value version, by model name; nil when none.
	Paused []PausedModel
	// Scopes is the state of each scope value this device requested by
	// name, holds, is backfilling, or lost since the client opened
	// (revoked, not_granted, unsubscribed), sorted by scope and value;
	// nil when none (PROTOCOL.md section 19).
	Scopes []ScopeStatus
	// TokenRefresh is true while the client replaces its connection to
	// present a fresh token from its TokenSource before the old one's exp
	// (TokenRefreshMargin): it is not offline, and no write is lost.
	TokenRefresh bool
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
	connected := c.bound()
	v := c.driver.view.Load()
	out := Status{Online: v.online, Connected: connected,
		Pending: st.Pending, DeadLetters: st.DeadLetters, LastSync: last, Cursor: cursor, DatabaseID: dbID}
	if re := c.refusal.Load(); re != nil {
		out.LastError = re
	}
	if err := c.tokens.err(); err != nil {
		out.LastError = err
	}
	out.TokenRefresh = c.tokens.replacing(nil)
	out.State = v.status.State // the sync core's
	if p := v.status.Paused; p != nil {
		out.Paused = p.Models
	}
	if s := v.status.Scopes; s != nil {
		out.Scopes = s.Values
	}
	if !connected && c.permanentRefusal() != nil {
		// The core hears of a refusal through the driver's events, a
		// moment after Sync and LastError know it: say what they say.
		out.State = StateRefused
	}
	return out, nil
}

// Sync replays the queue now through the bound connection and waits for
// that pass to end. While a connection is being made (just after Open, or
// after the server came back) it waits for it, within ctx. It returns
// ErrOffline when the network monitor says the server is unreachable, and
// the server's refusal of the session (a *RefusedError: errors.Is
// ErrUnauthorized, ErrWrongClientID, ErrServerBusy, ErrIncompatible) when
// there was one and no connection is bound.
func (c *Client) Sync(ctx context.Context) error {
	if c.isClosed() {
		return ErrClosed
	}
	if !c.bound() {
		if re := c.refusal.Load(); re != nil {
			return re
		}
		if err := c.waitBound(ctx, true); err != nil {
			return err
		}
	}
	return c.driver.sync(ctx)
}
