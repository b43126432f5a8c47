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
// Pushes wait in one line per tenant (fairQueue) and are taken in a
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

	mu     sync.Mutex
	queue  *fairQueue
	slots  map[string]*tenantSlots // admission to a tenant's line
	closed bool                    // set by the loop once stop closed: no push is queued after it

	wake chan struct{} // one token: a push was queued
	stop chan struct{} // closed by close: no more pushes are taken
	done chan struct{} // closed when the committer has exited
}

// tenantSlots admits a tenant's pushes to its line: at most
// maxQueuedPerTenant wait there, the next submit waits for one to be taken
// (backpressure on that tenant's sessions alone). refs counts the submits
// holding or waiting for a slot; the entry goes when it falls to zero, so
// the map holds only tenants with pushes in flight.
type tenantSlots struct {
	ch   chan struct{}
	refs int
}

func newGroupCommitter(ctx context.Context, store *replication.Store, tail *feedTail, now func() time.Time, m *metrics, share *commitShareMetrics, weights map[string]int, logger *slog.Logger) (*groupCommitter, error) {
	writer, err := store.DB.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("open the committer's connection: %w", err)
	}
	c := &groupCommitter{
		store: store, tail: tail, writer: writer, now: now, metrics: m, logger: logger, share: share,
		queue: newFairQueue(weights),
		slots: map[string]*tenantSlots{},
		wake:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go c.loop()
	return c, nil
}

func (c *groupCommitter) submit(ctx context.Context, b *replication.Batch) (*pushRequest, error) {
	r := newPushRequest(b, c.now())
	c.mu.Lock()
	sl := c.slots[b.Tenant]
	if sl == nil {
		sl = &tenantSlots{ch: make(chan struct{}, maxQueuedPerTenant)}
		c.slots[b.Tenant] = sl
	}
	sl.refs++
	c.mu.Unlock()
	select {
	case sl.ch <- struct{}{}:
	case <-c.stop:
		c.release(b.Tenant, sl, false)
		return nil, errStoreClosed
	case <-ctx.Done():
		c.release(b.Tenant, sl, false)
		return nil, ctx.Err()
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.release(b.Tenant, sl, true)
		return nil, errStoreClosed
	}
	c.queue.push(r)
	c.share.queued(b.Tenant, r)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return r, nil
}

// release gives up a submit's claim on its tenant's slots, and the slot
// itself when held.
func (c *groupCommitter) release(tenant string, sl *tenantSlots, held bool) {
	if held {
		<-sl.ch
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if sl.refs--; sl.refs == 0 {
		delete(c.slots, tenant)
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
func (c *groupCommitter) next(g *groupTurns) *pushRequest {
	c.mu.Lock()
	r := c.queue.next(g)
	var sl *tenantSlots
	if r != nil {
		sl = c.slots[r.batch.Tenant]
		c.share.taken(r.batch.Tenant, r, c.now())
	}
	c.mu.Unlock()
	if r != nil {
		c.release(r.batch.Tenant, sl, true)
	}
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
	g := newGroupTurns(maxGroupPushes, maxGroupMutations)
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
	c.share.groupEnded(g.ended)
	if err := tx.Commit(); err != nil {
		return group, 0, fmt.Errorf("commit: %w", err)
	}
	return group, head, nil
}

// Fair sharing of the commit path.
const (
	// commitQuantum is the mutations a tenant of weight 1 gains in credit
	// per turn of the fair queue. It is one push of a typical size, not a
	// full batch: a tenant that queues a push waits for at most one such
	// turn of each other tenant with queued work, and a larger push is
	// taken once its tenant has saved enough credit over its turns.
	commitQuantum = 100
	// maxQueuedPerTenant caps the pushes one tenant has waiting for the
	// committer; its next push waits in its session, unread frames behind
	// it (TCP backpressure), while other tenants' pushes are queued.
	maxQueuedPerTenant = maxGroupPushes
	// MaxTenantWeight caps Config.TenantWeights' values.
	MaxTenantWeight = 1000
)

// fairQueue is the committer's input: one FIFO line per tenant, taken in
// deficit round robin order. Each turn, a tenant gains commitQuantum times
// its weight in credit and has pushes taken from the head of its line
// while their cost (mutations) fits its credit; an idle tenant keeps no
// credit. So when the committer is saturated each tenant with queued work
// gets mutations in proportion to its weight, one that pushes more than
// its share waits in its own line, and a tenant that queues a push is
// served before any other tenant gets a second turn.
// One session's pushes are one tenant's, taken in the order queued.
// fairQueue has no lock and no goroutine: the committer guards it.
type fairQueue struct {
	weights map[string]int
	lines   map[string]*tenantLine
	// active holds the tenants with queued work in round order; active[0]
	// has the turn.
	active []*tenantLine
}

type tenantLine struct {
	tenant  string
	weight  int
	pushes  []*pushRequest
	cost    int // the pushes' cost, summed
	deficit int
	inTurn  bool // its turn's credit was added
}

// drainsInTurn reports whether the turn l is about to begin takes all its
// line: its queued cost fits its credit plus the turn's quantum.
func (l *tenantLine) drainsInTurn() bool {
	return l.cost <= l.deficit+commitQuantum*l.weight
}

// newFairQueue returns an empty queue; weights gives a tenant's weight
// (absent: 1).
func newFairQueue(weights map[string]int) *fairQueue {
	return &fairQueue{weights: weights, lines: map[string]*tenantLine{}}
}

// pushCost is what a push costs in the fair order: its mutations, at
// least one.
func pushCost(r *pushRequest) int { return max(1, len(r.batch.Writes)) }

// push queues r at the end of its tenant's line.
func (q *fairQueue) push(r *pushRequest) {
	l := q.lines[r.batch.Tenant]
	if l == nil {
		l = &tenantLine{tenant: r.batch.Tenant, weight: max(1, q.weights[r.batch.Tenant])}
		q.lines[l.tenant] = l
		q.active = append(q.active, l)
	}
	l.pushes = append(l.pushes, r)
	l.cost += pushCost(r)
}

// groupTurns is what one commit group took from the fair queue so far: its
// bounds, its pushes and mutations, and the turns begun in it.
type groupTurns struct {
	maxPushes, maxMutations int
	pushes, mutations       int
	turns                   map[*tenantLine]bool // tenants that began a turn in the group
	repeated                bool                 // a tenant began a second turn in the group
	joined                  bool                 // a tenant began its first turn after one repeated
	drained                 bool                 // a tenant's line emptied in the group: no second turns
	ended                   groupEnd             // why next last returned nil
}

// groupEnd is why a commit group ended: the value of
// syncd_commit_groups_total's label "ended".
type groupEnd string

const (
	groupEndedEmpty   groupEnd = "empty"   // no push waited
	groupEndedBounds  groupEnd = "bounds"  // maxGroupPushes or maxGroupMutations
	groupEndedLate    groupEnd = "late"    // a tenant that queued during the group had its turn
	groupEndedDrained groupEnd = "drained" // a tenant it served had nothing more queued, and the next turn would leave work queued
)

// newGroupTurns starts a group of at most maxPushes pushes and no more than
// maxMutations mutations unless its first push alone holds more.
func newGroupTurns(maxPushes, maxMutations int) *groupTurns {
	return &groupTurns{maxPushes: maxPushes, maxMutations: maxMutations, turns: map[*tenantLine]bool{}}
}

// next removes and returns the group's next push in the fair order, or nil
// when the group ends: its bounds are reached, no push waits, a tenant
// joined it late, or a tenant it served has nothing more queued. The group
// goes on through as many rounds as its bounds allow while the same
// tenants take turns with work left (one tenant alone fills it), so commits
// stay large under steady load. Two rules keep a light tenant's push from
// waiting for rounds of the others after it was taken:
//   - late: a tenant whose first turn in the group comes after another
//     tenant's second (it queued while the group was being applied) takes
//     that turn, and the group ends at the next turn;
//   - drained: once a tenant's line empties in the group (its last queued
//     push was taken: its device waits for this commit), the group takes
//     only turns that empty their tenant's line too (no second turn, no
//     turn of a tenant with more queued than the turn's credit) and ends
//     at the first other: many tenants with one push each still share one
//     commit, and a light push taken before a heavy tenant's turn does not
//     wait for that turn to be applied.
//
// Either way the light tenant's push is answered by the commit of the group
// that took it, after at most one turn of each other tenant in that group,
// and none of a tenant that keeps work queued once it was taken. Where a
// group ends never changes the fair order itself, only which commit
// answers a push.
// A tenant whose turn the bounds cut keeps it for the next group.
func (q *fairQueue) next(g *groupTurns) *pushRequest {
	for g.pushes < g.maxPushes && len(q.active) > 0 {
		l := q.active[0]
		if !l.inTurn {
			if g.joined {
				g.ended = groupEndedLate // the late tenant had its turn
				return nil
			}
			if g.drained && (g.turns[l] || !l.drainsInTurn()) {
				// A served tenant waits for this commit: the group takes
				// no second turn, and no turn that leaves work queued.
				g.ended = groupEndedDrained
				return nil
			}
			switch {
			case !g.turns[l] && g.repeated:
				g.joined = true
			case g.turns[l]:
				g.repeated = true
			}
			g.turns[l] = true
			l.deficit += commitQuantum * l.weight
			l.inTurn = true
		}
		head := l.pushes[0]
		cost := pushCost(head)
		if cost > l.deficit {
			// Its turn is over: to the back of the round, its credit kept.
			l.inTurn = false
			q.active = append(q.active[1:], l)
			continue
		}
		if g.pushes > 0 && g.mutations+cost > g.maxMutations {
			g.ended = groupEndedBounds
			return nil
		}
		l.pushes[0] = nil
		l.pushes = l.pushes[1:]
		l.deficit -= cost
		l.cost -= cost
		g.pushes++
		g.mutations += cost
		if len(l.pushes) == 0 {
			// Idle: it leaves the round and keeps no credit.
			q.active = q.active[1:]
			delete(q.lines, l.tenant)
			g.drained = true
		}
		return head
	}
	g.ended = groupEndedEmpty
	if g.pushes >= g.maxPushes {
		g.ended = groupEndedBounds
	}
	return nil
}

// commitShareMetrics are the fair queue's metrics per tenant: work queued,
// mutations served and time waited. The tenant label is bounded
// (tenantLabels).
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
			Name: "syncd_commit_groups_total", Help: "Commit groups (one transaction, one fsync each) by why the committer ended them: empty (no push waited), bounds (pushes or mutations), late (a tenant that queued during the group had its turn), drained (a tenant it served had nothing more queued).",
		}, []string{"ended"}),
		labels: labels,
	}
	for _, e := range []groupEnd{groupEndedEmpty, groupEndedBounds, groupEndedLate, groupEndedDrained} {
		m.groupEnds.WithLabelValues(string(e))
	}
	reg.MustRegister(m.queuedMutations, m.served, m.wait, m.groupEnds)
	return m
}

func (m *commitShareMetrics) queued(tenant string, r *pushRequest) {
	m.queuedMutations.WithLabelValues(m.labels.label(tenant)).Add(float64(pushCost(r)))
}

func (m *commitShareMetrics) taken(tenant string, r *pushRequest, at time.Time) {
	l := m.labels.label(tenant)
	m.queuedMutations.WithLabelValues(l).Sub(float64(pushCost(r)))
	m.served.WithLabelValues(l).Add(float64(pushCost(r)))
	m.wait.WithLabelValues(l).Observe(at.Sub(r.arrived).Seconds())
}

func (m *commitShareMetrics) groupEnded(e groupEnd) {
	m.groupEnds.WithLabelValues(string(e)).Inc()
}
