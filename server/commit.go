package server

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// Group commit bounds: the committer takes every push waiting when it
// starts a transaction, up to these limits, so one commit (one fsync) covers
// many pushes without letting one transaction grow without bound.
const (
	maxGroupPushes    = 64
	maxGroupMutations = 4 * syncproto.MaxBatch
)

// errStoreClosed answers pushes submitted after the committer began closing.
var errStoreClosed = errors.New("store closed")

// committer decides admitted batches and makes them durable: on one node,
// the group committer; in a cluster, the command stream and the node's
// materializer. Either way a batch is decided by replication.Apply and its
// request's done closes only once the decision is durable.
type committer interface {
	// submit hands b over. The request's done channel closes once b was
	// decided and durable (fx set) or failed (err set: nothing of b was
	// applied). Batches submitted in order by one session are decided in
	// that order.
	submit(ctx context.Context, b *replication.Batch) (*pushRequest, error)
	// close stops taking batches, finishes the ones already taken and
	// releases what the committer holds.
	close()
}

// pushRequest is one batch waiting for its decision. fx and err are
// written before done is closed.
type pushRequest struct {
	batch   *replication.Batch
	arrived time.Time

	fx   replication.Effects
	err  error
	done chan struct{}
}

func newPushRequest(b *replication.Batch, arrived time.Time) *pushRequest {
	return &pushRequest{batch: b, arrived: arrived, done: make(chan struct{})}
}

// groupCommitter is the single node's committer: one goroutine, the only
// writer, applies every batch waiting in one transaction and commits once.
type groupCommitter struct {
	store   *replication.Store
	tail    *feedTail // given each commit's entries, so the feed need not read them
	writer  *sql.Conn // the committer's own connection: readers never starve it
	now     func() time.Time
	metrics *metrics
	logger  *slog.Logger

	pushes chan *pushRequest
	stop   chan struct{} // closed by close: no more pushes are taken
	done   chan struct{} // closed when the committer has exited
}

func newGroupCommitter(ctx context.Context, store *replication.Store, tail *feedTail, now func() time.Time, m *metrics, logger *slog.Logger) (*groupCommitter, error) {
	writer, err := store.DB.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("open the committer's connection: %w", err)
	}
	c := &groupCommitter{
		store: store, tail: tail, writer: writer, now: now, metrics: m, logger: logger,
		pushes: make(chan *pushRequest, maxGroupPushes),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go c.loop()
	return c, nil
}

func (c *groupCommitter) submit(ctx context.Context, b *replication.Batch) (*pushRequest, error) {
	r := newPushRequest(b, c.now())
	select {
	case c.pushes <- r:
		return r, nil
	case <-c.stop:
		return nil, errStoreClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *groupCommitter) close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
	c.writer.Close()
}

// loop is the only writer. It takes the pushes waiting, applies them in one
// transaction and commits once: the group commit that keeps
// synchronous=FULL fast. It exits after draining the queue once stop closes.
func (c *groupCommitter) loop() {
	defer close(c.done)
	for {
		var first *pushRequest
		select {
		case first = <-c.pushes:
		case <-c.stop:
			c.drainQueued()
			return
		}
		c.commitGroup(c.gather(first))
	}
}

// gather collects the pushes already waiting behind first, within the group bounds.
func (c *groupCommitter) gather(first *pushRequest) []*pushRequest {
	group := []*pushRequest{first}
	n := len(first.batch.Writes)
	for len(group) < maxGroupPushes && n < maxGroupMutations {
		select {
		case r := <-c.pushes:
			group = append(group, r)
			n += len(r.batch.Writes)
		default:
			return group
		}
	}
	return group
}

// drainQueued commits pushes that were queued before stop closed, so an
// accepted push is answered rather than dropped.
func (c *groupCommitter) drainQueued() {
	for {
		select {
		case r := <-c.pushes:
			c.commitGroup(c.gather(r))
		default:
			return
		}
	}
}

func (c *groupCommitter) commitGroup(group []*pushRequest) {
	// The transaction is not tied to any session's context: once a push is
	// taken, it commits or fails as a whole, never "perhaps".
	head, err := c.applyGroup(context.Background(), group)
	committed := c.now()
	for _, r := range group {
		if err != nil {
			r.fx, r.err = replication.Effects{}, err
		}
		c.metrics.applySeconds.Observe(committed.Sub(r.arrived).Seconds())
	}
	if err != nil {
		c.logger.Error("commit failed; pushes answered as not processed", "pushes", len(group), "err", err)
	} else {
		if head > 0 {
			c.tail.committed(appended(group))
			c.store.Committed(head)
			c.metrics.oplogHead.Set(float64(head))
		}
		c.metrics.commitGroupBatches.Observe(float64(len(group)))
		for _, r := range group {
			c.metrics.countDecided(&r.fx)
		}
	}
	for _, r := range group {
		close(r.done)
	}
	// The committer is the single node's one writer: with automatic
	// checkpoints off, its checkpointer keeps the log bounded.
	batches := make([]*replication.Batch, len(group))
	for i, r := range group {
		batches[i] = r.batch
	}
	c.store.Wrote(replication.CheckpointWeight(batches))
}

// appended returns the oplog entries a committed group appended, in seq
// order, as the log reads them back (AppliedAt to the millisecond, UTC).
func appended(group []*pushRequest) []replication.Entry {
	var es []replication.Entry
	for _, r := range group {
		for _, e := range r.fx.Entries {
			if e.AppliedAt.IsZero() {
				return nil // stamped by the log: a refill reads it
			}
			e.AppliedAt = time.UnixMilli(e.AppliedAt.UnixMilli()).UTC()
			es = append(es, e)
		}
	}
	return es
}

// applyGroup decides every batch of the group in one transaction and
// returns the newest oplog seq it appended (0 if none).
func (c *groupCommitter) applyGroup(ctx context.Context, group []*pushRequest) (head uint64, err error) {
	tx, err := c.writer.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	st := c.store.In(tx)
	for _, r := range group {
		if r.fx, err = replication.Apply(ctx, st, r.batch); err != nil {
			return 0, err
		}
		if n := len(r.fx.Entries); n > 0 {
			head = r.fx.Entries[n-1].Seq
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return head, nil
}
