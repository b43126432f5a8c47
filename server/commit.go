package server

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/internal/fairshare"
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
// writer, applies the pushes it takes in one transaction and commits once.
// Pushes wait in one line per tenant (internal/fairshare) and are taken in a
// weighted fair order, so a tenant pushing far more than its share waits
// in its own line while the other tenants' pushes go on.
type groupCommitter struct {
	store   *replication.Store
	tail    *feedTail // given each commit's entries, so the feed need not read them
	writer  *sql.Conn // the committer's own connection: readers never starve it
	now     func() time.Time
	metrics *metrics
	logger  *slog.Logger
	share   *commitShareMetrics

	slots *fairshare.Slots // admission to a tenant's line

	mu     sync.Mutex
	queue  *fairshare.Queue[*pushRequest]
	closed bool // set by the loop once stop closed: no push is queued after it

	wake chan struct{} // one token: a push was queued
	stop chan struct{} // closed by close: no more pushes are taken
	done chan struct{} // closed when the committer has exited
}

func newGroupCommitter(ctx context.Context, store *replication.Store, tail *feedTail, now func() time.Time, m *metrics, share *commitShareMetrics, weights map[string]int, logger *slog.Logger) (*groupCommitter, error) {
	writer, err := store.DB.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("open the committer's connection: %w", err)
	}
	c := &groupCommitter{
		store: store, tail: tail, writer: writer, now: now, metrics: m, logger: logger, share: share,
		queue: newFairQueue(weights),
		slots: fairshare.NewSlots(maxQueuedPerTenant),
		wake:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go c.loop()
	return c, nil
}

func (c *groupCommitter) submit(ctx context.Context, b *replication.Batch) (*pushRequest, error) {
	r := newPushRequest(b, c.now())
	if err := c.slots.Acquire(ctx, b.Tenant, c.stop); err != nil {
		if errors.Is(err, fairshare.ErrStopped) {
			return nil, errStoreClosed
		}
		return nil, err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.slots.Release(b.Tenant)
		return nil, errStoreClosed
	}
	c.queue.Push(b.Tenant, r)
	c.share.Queued(b.Tenant, c.queue.Cost(r))
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return r, nil
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

// loop is the only writer. It takes a group of the pushes waiting, in the
// fair order, applies it in one transaction and commits once (the group
// commit that keeps synchronous=FULL fast), until no push waits. Once stop
// closes it refuses new pushes, commits the ones queued, and exits.
func (c *groupCommitter) loop() {
	defer close(c.done)
	for {
		select {
		case <-c.wake:
		case <-c.stop:
			c.mu.Lock()
			c.closed = true
			c.mu.Unlock()
			c.commitQueued()
			return
		}
		c.commitQueued()
	}
}

// commitQueued commits groups until no push waits.
func (c *groupCommitter) commitQueued() {
	for c.commitGroup() {
	}
}

// next takes the next push of the group being applied from the fair
// queue, within the group's bounds, and frees the slot it held; nil ends
// the group. The committer calls it between pushes while the group's
// transaction is open, so a push queued by another tenant while a long
// group is applied joins that group in its turn and is answered by its
// commit, rather than waiting for the whole group and then its own.
func (c *groupCommitter) next(g *fairshare.Group[*pushRequest]) *pushRequest {
	c.mu.Lock()
	r, ok := c.queue.Next(g)
	if ok {
		c.share.Taken(r.batch.Tenant, c.queue.Cost(r), c.now().Sub(r.arrived))
	}
	c.mu.Unlock()
	if !ok {
		return nil
	}
	c.slots.Release(r.batch.Tenant)
	return r
}

// commitGroup applies and commits the next group; false when no push
// waited.
func (c *groupCommitter) commitGroup() bool {
	// The transaction is not tied to any session's context: once a push is
	// taken, it commits or fails as a whole, never "perhaps".
	group, head, err := c.applyGroup(context.Background())
	if len(group) == 0 {
		return false
	}
	committed := c.now()
	for _, r := range group {
		if err != nil {
			r.fx, r.err = replication.Effects{}, err
		}
		c.metrics.applySeconds.Observe(committed.Sub(r.arrived).Seconds())
	}
	wake := func() {}
	if err != nil {
		c.logger.Error("commit failed; pushes answered as not processed", "pushes", len(group), "err", err)
	} else {
		if head > 0 {
			wake = c.tail.committed(appended(group))
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
	// The answers first, then the feed: the pushes' sessions are
	// scheduled before the subscriptions the entries wake.
	wake()
	// The committer is the single node's one writer: with automatic
	// checkpoints off, its checkpointer keeps the log bounded.
	batches := make([]*replication.Batch, len(group))
	for i, r := range group {
		batches[i] = r.batch
	}
	c.store.Wrote(replication.CheckpointWeight(batches))
	return true
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

// applyGroup takes pushes from the fair queue (next) and decides each in
// one transaction, committed once the group ends; it returns the pushes
// taken (none: nothing waited, no transaction) and the newest oplog seq
// appended (0 if none). On an error every push taken fails with it.
func (c *groupCommitter) applyGroup(ctx context.Context) (group []*pushRequest, head uint64, err error) {
	g := fairshare.NewGroup[*pushRequest](maxGroupPushes, maxGroupMutations, nil)
	r := c.next(g)
	if r == nil {
		return nil, 0, nil
	}
	tx, err := c.writer.BeginTx(ctx, nil)
	if err != nil {
		return []*pushRequest{r}, 0, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	st := c.store.In(tx)
	for ; r != nil; r = c.next(g) {
		group = append(group, r)
		if r.fx, err = replication.Apply(ctx, st, r.batch); err != nil {
			// The rest of the group's turns stay queued for the next one.
			return group, 0, err
		}
		if n := len(r.fx.Entries); n > 0 {
			head = r.fx.Entries[n-1].Seq
		}
	}
	c.share.GroupEnded(g.Ended())
	if err := tx.Commit(); err != nil {
		return group, 0, fmt.Errorf("commit: %w", err)
	}
	return group, head, nil
}

// Fair sharing of the commit path.
const (
	// maxQueuedPerTenant caps the pushes one tenant has waiting for the
	// committer; its next push waits in its session, unread frames behind
	// it (TCP backpressure), while other tenants' pushes are queued.
	maxQueuedPerTenant = maxGroupPushes
	// MaxTenantWeight caps Config.TenantWeights' values.
	MaxTenantWeight = 1000
)

// newFairQueue returns the committer's input: one line per tenant, taken
// in the fair order (fairshare.Queue), a push costing its mutations.
func newFairQueue(weights map[string]int) *fairshare.Queue[*pushRequest] {
	return fairshare.New(fairshare.MutationQuantum, weights, func(r *pushRequest) int { return len(r.batch.Writes) })
}

// commitShareMetrics are the fair order's metrics per tenant: work queued,
// mutations served and time waited, on one node of the group committer's
// input, in a cluster of the node's command publisher
// (cluster.ShareObserver). The tenant label is bounded (tenantLabels).
type commitShareMetrics struct {
	queuedMutations *prometheus.GaugeVec     // tenant
	served          *prometheus.CounterVec   // tenant
	wait            *prometheus.HistogramVec // tenant
	groupEnds       *prometheus.CounterVec   // ended
	labels          *tenantLabels
}

func newCommitShareMetrics(reg prometheus.Registerer, labels *tenantLabels) *commitShareMetrics {
	m := &commitShareMetrics{
		queuedMutations: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_commit_queued_mutations", Help: "Mutations of pushes waiting for the committer, by tenant (tenants beyond --max-tenant-labels: ~other).",
		}, []string{"tenant"}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_commit_served_mutations_total", Help: "Mutations the committer took from each tenant's line, by tenant: the share each tenant is served.",
		}, []string{"tenant"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "syncd_commit_wait_seconds", Help: "Time a push waited in its tenant's line before the committer took it, by tenant.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"tenant"}),
		groupEnds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_commit_groups_total", Help: "Commit groups (on one node a transaction and its fsync; on a cluster node a command published to the stream) by why the fair order ended them: empty (no push waited), bounds (pushes, mutations or a command's bytes), late (a tenant that queued during the group had its turn), drained (a tenant it served had nothing more queued).",
		}, []string{"ended"}),
		labels: labels,
	}
	for _, e := range fairshare.Ends {
		m.groupEnds.WithLabelValues(string(e))
	}
	reg.MustRegister(m.queuedMutations, m.served, m.wait, m.groupEnds)
	return m
}

func (m *commitShareMetrics) Queued(tenant string, cost int) {
	m.queuedMutations.WithLabelValues(m.labels.label(tenant)).Add(float64(cost))
}

func (m *commitShareMetrics) Taken(tenant string, cost int, waited time.Duration) {
	l := m.labels.label(tenant)
	m.queuedMutations.WithLabelValues(l).Sub(float64(cost))
	m.served.WithLabelValues(l).Add(float64(cost))
	m.wait.WithLabelValues(l).Observe(waited.Seconds())
}

func (m *commitShareMetrics) GroupEnded(e fairshare.End) {
	m.groupEnds.WithLabelValues(string(e)).Inc()
}
