package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncd-dev/syncd/internal/fairshare"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// Group publish bounds: the publisher puts the batches waiting for a
// publish into one command, within these limits and MaxCommandBytes. Two
// full batches a command, so that a tenant's window (two commands) stays
// pipelined: one is published while the other is applied.
const (
	maxGroupBatches   = 64
	maxGroupMutations = 2 * syncproto.MaxBatch
)

// What one node has in flight: commands published and not yet applied by
// this node (or given up on). One at a time, a node's throughput was one
// publish round trip (a stream quorum's fsync) per command; a few in flight
// overlap them. The bounds are on applies, not acknowledgements, and each
// tenant has its own window of mutations (times its weight), so that what
// a tenant publishes beyond what the materializer applies waits here, in
// its own line, rather than in the stream, where another tenant's batch
// would wait behind every batch the flood got published first; that batch
// finds a command free and at most a window of each other tenant's
// mutations ahead of it in the stream.
const (
	maxInFlight          = 4
	maxInFlightMutations = 2 * maxGroupMutations // a tenant's window, per unit of weight: two commands, one published while the other is applied
)

// Errors of Submit.
var (
	// ErrCommandTooLarge: the batch alone is larger than the stream
	// accepts. Nothing was published; split the push.
	ErrCommandTooLarge = errors.New("batch larger than a command may be")
	// ErrOutcomeUnknown: the command was published (or may have been) but
	// this node did not apply it within CommitTimeout. It may be applied
	// later: resend the same ops, and the ledger answers duplicates.
	ErrOutcomeUnknown = errors.New("command published; outcome not known yet")
	// ErrNotServing: this node must not take writes now (Refuses says
	// why). Nothing was published: resend, to another node or to this
	// one once it serves again; for a device it is server_busy.
	ErrNotServing = errors.New("this node does not serve")
)

// DoneFunc receives a submitted batch's decision once this node has applied
// it, or the error that means it will not say (nothing of the batch is
// known to be applied). It runs on one of the node's goroutines and must
// return quickly.
type DoneFunc func(replication.Effects, error)

type submission struct {
	batch  *replication.Batch
	size   int
	queued time.Time // when Submit queued it
	done   DoneFunc
}

// sender is whose batches must stay in submission order: one client of
// one tenant.
type sender struct{ tenant, client string }

func (s *submission) sender() sender { return sender{s.batch.Tenant, s.batch.ClientID} }

// publisher publishes the node's batches, up to maxInFlight commands this
// node has not applied yet, the batches waiting sharing the next command.
// It takes them from the tenants in a weighted fair order, each tenant
// within its window (publishQueue), so a tenant pushing far more than its
// share through this node waits in its own line while the other tenants'
// batches go on.
type publisher struct {
	c     *Cluster
	queue chan *submission
	slots *fairshare.Slots // admission to a tenant's line

	// mu orders Submit's send against the run loop's exit: once closed
	// is set, no submission enters queue, so the loop's last drain
	// answers every one that did.
	mu     sync.Mutex
	closed bool
}

// maxQueuedPerTenant caps the batches one tenant has waiting on this node
// for a command; its next Submit waits (backpressure on that tenant's
// sessions alone) while other tenants' batches are taken.
const maxQueuedPerTenant = maxGroupBatches

func newPublisher(c *Cluster) *publisher {
	return &publisher{c: c, queue: make(chan *submission, maxGroupBatches), slots: fairshare.NewSlots(maxQueuedPerTenant)}
}

// Submit publishes b (grouped with other batches waiting) and calls done
// once this node applied it. It returns an error only when b was not taken:
// too large, the node does not serve (ErrNotServing, wrapping Refuses'
// reason: its configuration differs from the cluster's, ErrConfigMismatch,
// as a token the others revoked must not write through it; the stream
// drifted or is gone, ErrMisconfigured, ErrStreamDeleted; it diverged), or
// ctx ended or the node closed while waiting for room in b's tenant's line.
func (c *Cluster) Submit(ctx context.Context, b *replication.Batch, done DoneFunc) error {
	if err := c.Refuses(); err != nil {
		return fmt.Errorf("submit: %w: %w", ErrNotServing, err)
	}
	data, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	if len(data)+commandEnvelope > c.opts.MaxCommandBytes {
		return fmt.Errorf("submit: %w: %d bytes, at most %d", ErrCommandTooLarge, len(data), c.opts.MaxCommandBytes-commandEnvelope)
	}
	if err := c.pub.slots.Acquire(ctx, b.Tenant, c.stopped()); err != nil {
		if errors.Is(err, fairshare.ErrStopped) {
			return ErrClosed
		}
		return err
	}
	s := &submission{batch: b, size: len(data), queued: time.Now(), done: done}
	if !c.pub.enqueue(s) {
		c.pub.slots.Release(b.Tenant)
		return ErrClosed
	}
	return nil
}

// enqueue hands s to the run loop; false once the loop is stopping.
func (p *publisher) enqueue(s *submission) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	select {
	case p.queue <- s: // the run loop always takes it: each tenant's slots bound what waits
		return true
	case <-p.c.stopped(): // the loop may have stopped reading
		return false
	}
}

// commandEnvelope is the room a command keeps beside its batches.
const commandEnvelope = 256

func (c *Cluster) stopped() <-chan struct{} { return c.runCtx.Done() }

// run owns the publisher's state: the submissions waiting, the commands in
// flight and the clients they hold. Each command is published by a
// goroutine of its own, which run waits for before it returns.
func (p *publisher) run(ctx context.Context) {
	var (
		waiting  = newPublishQueue(p.c.weights, p.c.opts.MaxCommandBytes)
		inFlight int                                     // commands gathered, not yet applied here (or given up on)
		acked    = make(chan []*submission, maxInFlight) // the command's publish is over: its clients may publish again
		settled  = make(chan []*submission, maxInFlight) // the command's outcome is known here
		wg       sync.WaitGroup
	)
	defer func() {
		wg.Wait()
		for _, s := range waiting.all() {
			p.slots.Release(s.batch.Tenant)
			s.done(replication.Effects{}, ErrClosed)
		}
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.refuseQueued()
	}()
	var share ShareObserver = noShareObserver{}
	if p.c.shareObs != nil {
		share = p.c.shareObs
	}
	for {
		for inFlight < maxInFlight {
			group, ended := waiting.gather()
			if len(group) == 0 {
				break
			}
			now := time.Now()
			for _, s := range group {
				p.slots.Release(s.batch.Tenant)
				share.Taken(s.batch.Tenant, waiting.fair.Cost(s), now.Sub(s.queued))
			}
			share.GroupEnded(ended)
			inFlight++
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.publishGroup(ctx, group, func() { settled <- group })
				acked <- group
			}()
		}
		select {
		case s := <-p.queue:
			for ; s != nil; s = p.take() {
				waiting.add(s)
				share.Queued(s.batch.Tenant, waiting.fair.Cost(s))
			}
		case group := <-acked:
			waiting.acked(group)
		case group := <-settled:
			inFlight--
			waiting.settled(group)
		case <-ctx.Done():
			return
		}
	}
}

// take returns a queued submission, if there is one, or nil.
func (p *publisher) take() *submission {
	select {
	case s := <-p.queue:
		return s
	default:
		return nil
	}
}

// ShareObserver is told of the publisher's fair order, for metrics of each
// tenant's share (syncd's syncd_commit_* metrics); a batch costs its
// mutations. Its methods run on the publisher's goroutine and must return
// quickly.
type ShareObserver interface {
	// Queued: a batch of tenant's, of cost, waits for a command.
	Queued(tenant string, cost int)
	// Taken: a command took it after it waited that long.
	Taken(tenant string, cost int, waited time.Duration)
	// GroupEnded: a command's batches were gathered, for that reason.
	GroupEnded(fairshare.End)
}

// ShareFairly sets the tenants' weights in the fair order this node
// publishes batches in (absent: 1; syncd's --tenant-weight): when batches
// wait for a command, each tenant with batches waiting has mutations
// published in proportion to its weight. It orders only what this node
// publishes, so it need not be the same on every node. o, when not nil, is
// told of that order. Call it before Start.
func (c *Cluster) ShareFairly(weights map[string]int, o ShareObserver) {
	c.weights, c.shareObs = weights, o
}

type noShareObserver struct{}

func (noShareObserver) Queued(string, int)               {}
func (noShareObserver) Taken(string, int, time.Duration) {}
func (noShareObserver) GroupEnded(fairshare.End)         {}

// publishQueue is the publisher's input, owned by its run loop: the
// submissions waiting for a command in one line per tenant, taken in the
// fair order (fairshare.Queue, a batch costing its mutations), and those
// held back: a tenant's whose window is full, a client's whose command is
// unacknowledged.
//
// A tenant's window (maxInFlightMutations times its weight) bounds its
// mutations in commands not yet settled on this node: once they reach it,
// its line waits here, out of the round, until an apply frees room.
//
// A client's batches are applied in the order they were submitted: a batch
// joins a command only while no earlier command holding a batch of its
// client is unacknowledged (that one may be retried, and a retry lands
// after any command published meanwhile), and batches in one command are
// applied in their order in it. So once a command takes a client's batch,
// the client's later ones wait, held, until that command is acknowledged,
// then rejoin their tenant's line in their order.
type publishQueue struct {
	fair      *fairshare.Queue[*submission]
	weights   map[string]int
	unapplied map[string]int           // each tenant's mutations in commands not yet settled
	full      map[string][]*submission // the lines of tenants whose window is full, in order
	busy      map[sender]int           // the unacknowledged commands holding each client's batches
	held      map[sender][]*submission // a busy client's later submissions, in order
	maxBytes  int                      // a command's bound: Options.MaxCommandBytes
}

func newPublishQueue(weights map[string]int, maxBytes int) *publishQueue {
	return &publishQueue{
		fair:      fairshare.New(fairshare.MutationQuantum, weights, func(s *submission) int { return len(s.batch.Writes) }),
		weights:   weights,
		unapplied: map[string]int{},
		full:      map[string][]*submission{},
		busy:      map[sender]int{},
		held:      map[sender][]*submission{},
		maxBytes:  maxBytes,
	}
}

// window is tenant's bound on its mutations in flight.
func (q *publishQueue) window(tenant string) int {
	return maxInFlightMutations * max(1, q.weights[tenant])
}

// add queues s: held behind its client's command in flight, or in its
// tenant's line (line).
func (q *publishQueue) add(s *submission) {
	if who := s.sender(); q.busy[who] > 0 {
		q.held[who] = append(q.held[who], s)
		return
	}
	q.line(s)
}

// line queues s, whose client is not busy, in its tenant's line, or at
// the end of the held line while the tenant's window is full.
func (q *publishQueue) line(s *submission) {
	if hs, full := q.full[s.batch.Tenant]; full {
		q.full[s.batch.Tenant] = append(hs, s)
		return
	}
	q.fair.Push(s.batch.Tenant, s)
}

// gather takes the next command's batches in the fair order, within
// maxGroupBatches, maxGroupMutations and the command's byte bound, and
// none of a tenant's after the batch that reaches its window; and why the
// group ended. The clients it took batches of are busy until acked: their
// batches still queued are held back; so are the lines of the tenants
// whose window it filled, until settled frees room.
func (q *publishQueue) gather() ([]*submission, fairshare.End) {
	size := commandEnvelope
	taken := map[string]int{} // each tenant's mutations in the group
	g := fairshare.NewGroup(maxGroupBatches, maxGroupMutations, func(s *submission) bool {
		t := s.batch.Tenant
		return size+s.size <= q.maxBytes && q.unapplied[t]+taken[t] < q.window(t)
	})
	var group []*submission
	for s, ok := q.fair.Next(g); ok; s, ok = q.fair.Next(g) {
		group = append(group, s)
		size += s.size
		taken[s.batch.Tenant] += q.fair.Cost(s)
	}
	for _, s := range group {
		who := s.sender()
		if q.busy[who]++; q.busy[who] == 1 {
			q.held[who] = q.fair.Remove(who.tenant, func(x *submission) bool { return x.sender() == who })
			if len(q.held[who]) == 0 {
				delete(q.held, who)
			}
		}
	}
	for t, n := range taken {
		if q.unapplied[t] += n; q.unapplied[t] >= q.window(t) {
			q.full[t] = q.fair.Remove(t, func(*submission) bool { return true })
		}
	}
	return group, g.Ended()
}

// acked releases the clients of an acknowledged command's group: a client
// no command holds any more has its held batches rejoin its tenant's line.
func (q *publishQueue) acked(group []*submission) {
	for _, s := range group {
		who := s.sender()
		if q.busy[who]--; q.busy[who] > 0 {
			continue
		}
		delete(q.busy, who)
		for _, h := range q.held[who] {
			q.line(h)
		}
		delete(q.held, who)
	}
}

// settled frees the windows of a settled command's tenants (applied here,
// failed or given up on): a line held while its tenant's window was full
// rejoins the round once there is room.
func (q *publishQueue) settled(group []*submission) {
	for _, s := range group {
		t := s.batch.Tenant
		if q.unapplied[t] -= q.fair.Cost(s); q.unapplied[t] == 0 {
			delete(q.unapplied, t)
		}
	}
	for _, s := range group {
		t := s.batch.Tenant
		hs, full := q.full[t]
		if !full || q.unapplied[t] >= q.window(t) {
			continue
		}
		delete(q.full, t)
		for _, h := range hs {
			q.fair.Push(t, h)
		}
	}
}

// all empties the queue, held batches too, and returns what it held.
func (q *publishQueue) all() []*submission {
	var out []*submission
	for q.fair.Len() > 0 {
		g := fairshare.NewGroup[*submission](math.MaxInt, math.MaxInt, nil)
		for s, ok := q.fair.Next(g); ok; s, ok = q.fair.Next(g) {
			out = append(out, s)
		}
	}
	for who, hs := range q.held {
		out = append(out, hs...)
		delete(q.held, who)
	}
	for t, hs := range q.full {
		out = append(out, hs...)
		delete(q.full, t)
	}
	return out
}

// refuseQueued answers the submissions still queued at Close.
func (p *publisher) refuseQueued() {
	for {
		select {
		case s := <-p.queue:
			p.slots.Release(s.batch.Tenant)
			s.done(replication.Effects{}, ErrClosed)
		default:
			return
		}
	}
}

// publishGroup publishes group as one command and hands its submissions
// to the materializer's answer. A group taken while the node served, which
// it no longer does by the time it is published (its token file just
// missed a revocation), is not published: each is answered ErrNotServing.
// settled is called once the group's outcome is known on this node:
// applied, failed or given up on (CommitTimeout).
func (p *publisher) publishGroup(ctx context.Context, group []*submission, settled func()) {
	c := p.c
	if err := c.Refuses(); err != nil {
		for _, s := range group {
			s.done(replication.Effects{}, fmt.Errorf("publish: %w: %w", ErrNotServing, err))
		}
		settled()
		return
	}
	cmd := Command{ID: uuid.NewString(), Batches: make([]replication.Batch, len(group))}
	for i, s := range group {
		cmd.Batches[i] = *s.batch
	}
	answer := func(a applied, err error) {
		for i, s := range group {
			if err != nil {
				s.done(replication.Effects{}, err)
				continue
			}
			s.done(a.fxs[i], nil)
		}
		settled()
	}
	c.addWaiter(cmd.ID, answer)
	start := time.Now()
	seq, err := c.publish(ctx, cmd)
	if err != nil {
		if w := c.takeWaiter(cmd.ID); w != nil {
			w(applied{}, err)
		}
		return
	}
	c.metrics.publishSeconds.Observe(time.Since(start).Seconds())
	c.metrics.publishedBatches.Add(float64(len(group)))
	c.noteHead(seq)
	select {
	case c.published <- struct{}{}:
	default: // the materializer has a signal it has not taken yet
	}
	time.AfterFunc(c.opts.CommitTimeout, func() {
		if w := c.takeWaiter(cmd.ID); w != nil {
			w(applied{}, fmt.Errorf("%w: stream seq %d not applied by this node within %s", ErrOutcomeUnknown, seq, c.opts.CommitTimeout))
		}
	})
}

// publish appends cmd to the stream and returns its stream seq. A publish
// whose ack is lost is retried with the same message id, which JetStream
// answers with the original seq (within its duplicate window), so a
// command is never appended twice. It gives up after CommitTimeout.
func (c *Cluster) publish(ctx context.Context, cmd Command) (uint64, error) {
	if f := commandFormat(cmd); !c.uses(f) {
		return 0, fmt.Errorf("%w: the command needs format %d, the cluster version is %d", ErrFormatNotInUse, f, c.version.Load())
	}
	data, err := encodeCommand(cmd)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.CommitTimeout)
	defer cancel()
	var ack *jetstream.PubAck
	err = c.retry(ctx, "publish a command", func(ctx context.Context) (err error) {
		msg := &nats.Msg{Subject: Subject, Data: data, Header: nats.Header{}}
		msg.Header.Set(HeaderAuth, Authenticate(c.opts.CommandKey, data))
		ack, err = c.js.PublishMsg(ctx, msg, jetstream.WithMsgID(cmd.ID), jetstream.WithExpectStream(StreamName))
		return err
	})
	if err != nil {
		c.metrics.publishFailures.Inc()
		if !errors.Is(ctx.Err(), context.Canceled) { // not the node closing
			c.log.Warn("command not published", "id", cmd.ID, "err", err)
		}
		return 0, fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
	}
	return ack.Sequence, nil
}

// applied is what this node's materializer did with one command: the
// effects of each batch, or the rows a job removed.
type applied struct {
	fxs     []replication.Effects
	jobRows int64
}

// waiter receives a command's outcome on this node, or the error that
// means it will not say.
type waiter func(applied, error)

func (c *Cluster) addWaiter(id string, w waiter) {
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	c.waiters[id] = w
}

// takeWaiter removes and returns the waiter of command id, or nil: whoever
// takes it answers it, exactly once.
func (c *Cluster) takeWaiter(id string) waiter {
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	w := c.waiters[id]
	delete(c.waiters, id)
	return w
}

func (c *Cluster) failWaiters(err error) {
	c.waitMu.Lock()
	ws := c.waiters
	c.waiters = map[string]waiter{}
	c.waitMu.Unlock()
	for _, w := range ws {
		w(applied{}, err)
	}
}

// noteHead records a stream seq known to exist (a publish ack, a message
// delivered): the head is at least seq until the next read of the stream.
func (c *Cluster) noteHead(seq uint64) {
	for {
		cur := c.streamHead.Load()
		if seq <= cur || c.streamHead.CompareAndSwap(cur, seq) {
			break
		}
	}
	c.metrics.streamHead.Set(float64(c.streamHead.Load()))
}

// setHead records the stream's last seq as the stream itself answered it:
// exactly, so that no estimate outlives the next read.
func (c *Cluster) setHead(last uint64) {
	c.streamHead.Store(last)
	c.metrics.streamHead.Set(float64(last))
}
