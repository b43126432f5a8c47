package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncd-dev/syncd/replication"
)

// Group publish bounds, as the single node's group commit bounds: the
// publisher puts the batches waiting for a publish into one command,
// within these limits and MaxCommandBytes.
const maxGroupBatches = 64

// maxInFlight bounds the commands one edge has published and not yet seen
// acknowledged. One at a time, an edge's throughput was one publish round
// trip (a stream quorum's fsync) per command; a few in flight overlap them.
const maxInFlight = 4

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
	batch *replication.Batch
	size  int
	done  DoneFunc
}

// sender is whose batches must stay in submission order: one client of
// one tenant.
type sender struct{ tenant, client string }

func (s *submission) sender() sender { return sender{s.batch.Tenant, s.batch.ClientID} }

// publisher publishes the node's batches, up to maxInFlight commands at a
// time, the batches waiting for a publish sharing the next command. A
// client's batches are applied in the order they were submitted: a batch
// joins a command only while no earlier command holding a batch of its
// client is unacknowledged (that one may be retried, and a retry lands
// after any command published meanwhile), and batches in one command are
// applied in their order in it.
type publisher struct {
	c     *Cluster
	queue chan *submission
}

func newPublisher(c *Cluster) *publisher {
	return &publisher{c: c, queue: make(chan *submission, maxGroupBatches)}
}

// Submit publishes b (grouped with other batches waiting) and calls done
// once this node applied it. It returns an error only when b was not taken:
// too large, the node does not serve (ErrNotServing, wrapping Refuses'
// reason: its configuration differs from the cluster's, ErrConfigMismatch,
// as a token the others revoked must not write through it; the stream
// drifted or is gone, ErrMisconfigured, ErrStreamDeleted; it diverged), or
// ctx ended or the node closed while waiting for room.
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
	s := &submission{batch: b, size: len(data), done: done}
	select {
	case c.pub.queue <- s:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.stopped():
		return ErrClosed
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
		waiting  []*submission      // in submission order
		inFlight int                // commands published, not yet acknowledged
		busy     = map[sender]int{} // the unacknowledged commands holding each client's batches
		acked    = make(chan []*submission, maxInFlight)
		wg       sync.WaitGroup
	)
	defer func() {
		wg.Wait()
		for _, s := range waiting {
			s.done(replication.Effects{}, ErrClosed)
		}
		p.refuseQueued()
	}()
	for {
		for inFlight < maxInFlight {
			var group []*submission
			if group, waiting = p.gather(waiting, busy); len(group) == 0 {
				break
			}
			for _, s := range group {
				busy[s.sender()]++
			}
			inFlight++
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.publishGroup(ctx, group)
				acked <- group
			}()
		}
		queue := p.queue
		if len(waiting) >= maxWaiting {
			queue = nil // back-pressure: Submit waits for room in the queue
		}
		select {
		case s := <-queue:
			waiting = append(waiting, s)
			for len(waiting) < maxWaiting && p.take(&waiting) {
			}
		case group := <-acked:
			inFlight--
			for _, s := range group {
				if busy[s.sender()]--; busy[s.sender()] == 0 {
					delete(busy, s.sender())
				}
			}
		case <-ctx.Done():
			return
		}
	}
}

// maxWaiting bounds the submissions the publisher takes off its queue
// before they can be published.
const maxWaiting = 4 * maxGroupBatches

// take moves one queued submission, if there is one, to the end of
// waiting and reports whether it did.
func (p *publisher) take(waiting *[]*submission) bool {
	select {
	case s := <-p.queue:
		*waiting = append(*waiting, s)
		return true
	default:
		return false
	}
}

// gather takes from waiting, in order, the submissions that fit one
// command and whose client holds no unacknowledged command; a client with
// a submission left behind has its later ones left behind too. It returns
// the command's group and what is left waiting.
func (p *publisher) gather(waiting []*submission, busy map[sender]int) (group, rest []*submission) {
	size := commandEnvelope
	var behind map[sender]bool // clients with a submission left behind
	for i, s := range waiting {
		who := s.sender()
		if len(group) == maxGroupBatches {
			return group, append(rest, waiting[i:]...)
		}
		if busy[who] > 0 || behind[who] || size+s.size > p.c.opts.MaxCommandBytes {
			if behind == nil {
				behind = map[sender]bool{}
			}
			behind[who] = true
			rest = append(rest, s)
			continue
		}
		group = append(group, s)
		size += s.size
	}
	return group, rest
}

// refuseQueued answers the submissions still queued at Close.
func (p *publisher) refuseQueued() {
	for {
		select {
		case s := <-p.queue:
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
func (p *publisher) publishGroup(ctx context.Context, group []*submission) {
	c := p.c
	if err := c.Refuses(); err != nil {
		for _, s := range group {
			s.done(replication.Effects{}, fmt.Errorf("publish: %w: %w", ErrNotServing, err))
		}
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
