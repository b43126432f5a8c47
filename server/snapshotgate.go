package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/internal/fairshare"
)

// snapshotGate admits snapshots within the global, per-tenant and
// per-token limits, queueing those beyond the global one in a line per
// tenant (turnQueue): when a turn frees, it goes to the tenants with
// snapshots waiting in a weighted round robin (Config.TenantWeights, as
// the committer's), so a tenant whose devices storm waits in its own line
// and another tenant's device gets a turn within one round. A waiter is
// given either a turn of its own (a read of the database) or a place in
// the read of another waiter of the same scope whose turn came
// (snapshotshare.go). It is safe for concurrent use.
type snapshotGate struct {
	max, maxQueue int
	maxTenant     int              // per tenant, running or waiting; <= 0: no cap
	waitingGauge  prometheus.Gauge // syncd_snapshots_waiting
	turnMetrics   *snapshotTurnMetrics

	mu       sync.Mutex
	running  int
	queue    *turnQueue
	byToken  map[string]int // snapshots running or waiting, by token
	byTenant map[string]int // snapshots running or waiting, by tenant
	took     time.Duration  // moving average of the served snapshots' durations
}

// newSnapshotGate returns a gate of turns turns at once, maxQueue waiting
// and maxTenant running or waiting per tenant (<= 0: no cap), whose
// turns go round the tenants by weights (absent: 1).
func newSnapshotGate(turns, maxQueue, maxTenant int, weights map[string]int, waiting prometheus.Gauge, tm *snapshotTurnMetrics) *snapshotGate {
	return &snapshotGate{max: turns, maxQueue: maxQueue, maxTenant: maxTenant, waitingGauge: waiting, turnMetrics: tm,
		queue: newTurnQueue(weights), byToken: map[string]int{}, byTenant: map[string]int{}}
}

// snapshotOwner is whose snapshot it is, for the per-token and per-tenant
// limits.
type snapshotOwner struct{ token, tenant string }

// snapshotWaiter is one snapshot waiting in the queue.
type snapshotWaiter struct {
	tenant, scope string
	// turn gets nil for a turn of its own, or a reader of another's read.
	turn chan *shareReader
}

// snapshotRefusal says why a snapshot was not admitted and when to ask
// again.
type snapshotRefusal struct {
	reason     string
	retryAfter time.Duration
}

// enter admits one snapshot of scope for owner, waiting in the queue at
// most wait (or until ctx ends). Admitted with a turn of its own it
// returns nil, nil: read, then call leave. Admitted into another's read it
// returns a reader of it: follow it, then call leaveShared.
func (g *snapshotGate) enter(ctx context.Context, owner snapshotOwner, scope string, wait time.Duration) (*shareReader, *snapshotRefusal) {
	g.mu.Lock()
	if g.byToken[owner.token] >= MaxSnapshotsPerToken {
		defer g.mu.Unlock()
		return nil, g.refuseLocked(fmt.Sprintf("this token already has %d snapshot running or waiting", MaxSnapshotsPerToken))
	}
	if g.maxTenant > 0 && g.byTenant[owner.tenant] >= g.maxTenant {
		defer g.mu.Unlock()
		return nil, g.refuseLocked(fmt.Sprintf("this tenant already has %d snapshots running or waiting, the most one tenant may", g.maxTenant))
	}
	if g.running < g.max && g.queue.len() == 0 {
		g.running++
		g.addLocked(owner)
		g.turnMetrics.took(owner.tenant)
		g.mu.Unlock()
		return nil, nil
	}
	if g.queue.len() >= g.maxQueue {
		defer g.mu.Unlock()
		return nil, g.refuseLocked(fmt.Sprintf("%d snapshots running and %d waiting, the most this server queues", g.running, g.queue.len()))
	}
	w := &snapshotWaiter{tenant: owner.tenant, scope: scope, turn: make(chan *shareReader, 1)}
	g.queue.push(w)
	g.waitingGauge.Inc()
	g.turnMetrics.waiting(owner.tenant, 1)
	g.addLocked(owner)
	g.mu.Unlock()

	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case r := <-w.turn:
		return r, nil
	case <-timer.C:
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.queue.remove(w) { // given a turn as the wait ended: take it
		return <-w.turn, nil
	}
	g.waitingGauge.Dec()
	g.turnMetrics.waiting(owner.tenant, -1)
	g.dropLocked(owner)
	return nil, g.refuseLocked(fmt.Sprintf("no turn within %s", wait))
}

// share hands every waiter of scope a reader of share, the read of a
// snapshot whose turn came. Call it before the read begins: the read then
// holds every write acknowledged before any joiner asked.
func (g *snapshotGate) share(scope string, share *snapshotShare) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, w := range g.queue.removeScope(scope) {
		w.turn <- share.reader()
		g.waitingGauge.Dec()
		g.turnMetrics.waiting(w.tenant, -1)
	}
}

// leaveShared ends a snapshot admitted into another's read.
func (g *snapshotGate) leaveShared(owner snapshotOwner) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dropLocked(owner)
}

// leave ends an admitted snapshot that took d, handing its turn to the
// next waiter in the fair order.
func (g *snapshotGate) leave(owner snapshotOwner, d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dropLocked(owner)
	if g.took == 0 {
		g.took = d
	} else {
		g.took += (d - g.took) / 8
	}
	if w := g.queue.next(); w != nil {
		w.turn <- nil
		g.waitingGauge.Dec()
		g.turnMetrics.waiting(w.tenant, -1)
		g.turnMetrics.took(w.tenant)
		return
	}
	g.running--
}

func (g *snapshotGate) addLocked(o snapshotOwner) {
	g.byToken[o.token]++
	g.byTenant[o.tenant]++
}

func (g *snapshotGate) dropLocked(o snapshotOwner) {
	if g.byToken[o.token]--; g.byToken[o.token] <= 0 {
		delete(g.byToken, o.token)
	}
	if g.byTenant[o.tenant]--; g.byTenant[o.tenant] <= 0 {
		delete(g.byTenant, o.tenant)
	}
}

// refuseLocked is a refusal with the time the queue as it stands needs to
// drain: the running reads and one read per scope waiting (the waiters of
// a scope share one), max at a time, each taking what the recent ones
// took.
func (g *snapshotGate) refuseLocked(reason string) *snapshotRefusal {
	took := g.took
	if took == 0 {
		took = snapshotFirstGuess
	}
	rounds := (g.running + g.queue.scopes() + g.max) / g.max
	return &snapshotRefusal{reason: reason, retryAfter: min(time.Duration(rounds)*took, snapshotMaxRetryAfter)}
}

// turnQueue is the snapshot gate's input: a roundQueue of snapshot
// waiters, whose scope is the read a waiter may join instead of taking a
// turn (removeScope).
type turnQueue = roundQueue[*snapshotWaiter]

// newTurnQueue returns an empty snapshot queue; weights gives a tenant's
// weight (absent: 1).
func newTurnQueue(weights map[string]int) *turnQueue {
	return newRoundQueue[*snapshotWaiter](weights)
}

func (w *snapshotWaiter) turnTenant() string { return w.tenant }
func (w *snapshotWaiter) turnScope() string  { return w.scope }

// turnWaiter is what waits in a roundQueue: its tenant, whose line it
// waits in, and its scope, which waiters that can be served together
// share ("" for none).
type turnWaiter interface {
	comparable
	turnTenant() string
	turnScope() string
}

// roundQueue is a gate's input: one FIFO line of waiters per tenant,
// given turns in weighted round robin (a fairshare.Queue whose items cost
// one turn, with a quantum of one). A tenant of weight w with waiters
// takes up to w turns when its round comes, then goes to the back of the
// round; one whose line empties leaves the round and keeps no credit. So
// a tenant whose waiter starts waiting gets a turn before any other
// tenant takes more than its weight of turns (within one round), however
// many its waiters. Waiters taken out by removeScope take no turn. The
// snapshot gate (snapshot reads) and the work gate (sessions' CPU work,
// workturns.go) use it. roundQueue has no lock and no goroutine: its gate
// guards it.
type roundQueue[W turnWaiter] struct {
	fair *fairshare.Queue[W]
}

// newRoundQueue returns an empty queue; weights gives a tenant's weight
// (absent: 1).
func newRoundQueue[W turnWaiter](weights map[string]int) *roundQueue[W] {
	return &roundQueue[W]{fair: fairshare.New[W](1, weights, nil)}
}

func (q *roundQueue[W]) len() int { return q.fair.Len() }

// push queues w at the end of its tenant's line; a tenant without waiters
// joins the round at its end.
func (q *roundQueue[W]) push(w W) { q.fair.Push(w.turnTenant(), w) }

// next removes and returns the waiter whose turn it is, or W's zero value
// (nil) when none waits.
func (q *roundQueue[W]) next() W {
	w, _ := q.fair.Take()
	return w
}

// remove takes w out of its line; false when it is not queued (it was
// given a turn or a place in a read).
func (q *roundQueue[W]) remove(w W) bool {
	return len(q.fair.Remove(w.turnTenant(), func(x W) bool { return x == w })) > 0
}

// removeScope takes every waiter of scope out of the queue and returns
// them, first first within each tenant.
func (q *roundQueue[W]) removeScope(scope string) []W {
	return q.fair.RemoveAll(func(w W) bool { return w.turnScope() == scope })
}

// scopes is how many distinct scopes wait: the reads the queue needs.
func (q *roundQueue[W]) scopes() int {
	seen := map[string]struct{}{}
	for w := range q.fair.All() {
		seen[w.turnScope()] = struct{}{}
	}
	return len(seen)
}

// snapshotTurnMetrics are the snapshot gate's metrics per tenant:
// snapshots waiting for a turn and turns taken.
type snapshotTurnMetrics = turnMetrics

func newSnapshotTurnMetrics(reg prometheus.Registerer, labels *tenantLabels) *snapshotTurnMetrics {
	return newTurnMetrics(reg, labels,
		prometheus.GaugeOpts{Name: "syncd_snapshot_turns_waiting", Help: "Snapshot requests waiting for a turn, by tenant (tenants beyond --max-tenant-labels: ~other)."},
		prometheus.CounterOpts{Name: "syncd_snapshot_turns_total", Help: "Snapshot turns (database reads of their own) taken, by tenant: the share of the snapshot turns each tenant is served."})
}

// turnMetrics are a turn gate's metrics per tenant: waiters and turns
// taken. The tenant label is bounded (tenantLabels).
type turnMetrics struct {
	waitingVec *prometheus.GaugeVec   // tenant
	turns      *prometheus.CounterVec // tenant
	labels     *tenantLabels
}

// newTurnMetrics registers the gauge of waiters and the counter of turns
// taken, each labelled by tenant.
func newTurnMetrics(reg prometheus.Registerer, labels *tenantLabels, waiting prometheus.GaugeOpts, turns prometheus.CounterOpts) *turnMetrics {
	m := &turnMetrics{
		waitingVec: prometheus.NewGaugeVec(waiting, []string{"tenant"}),
		turns:      prometheus.NewCounterVec(turns, []string{"tenant"}),
		labels:     labels,
	}
	reg.MustRegister(m.waitingVec, m.turns)
	return m
}

// waiting adds delta to tenant's waiters.
func (m *turnMetrics) waiting(tenant string, delta float64) {
	m.waitingVec.WithLabelValues(m.labels.label(tenant)).Add(delta)
}

// took counts a turn of tenant; its waiting series exists from then on.
func (m *turnMetrics) took(tenant string) {
	l := m.labels.label(tenant)
	m.turns.WithLabelValues(l).Inc()
	m.waitingVec.WithLabelValues(l).Add(0)
}
