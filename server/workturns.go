package server

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// workGate bounds the sessions' CPU work running at once: a session's
// reader takes a work turn of its tenant before it decodes, meters and
// admits a frame (for a push, up to its hand-over to the committer), and
// its subscription takes one to read a feed page and build its frame;
// each gives it back before anything that waits (the committer's line,
// the outbox, the feed lane, the next commit, the hook). At most max
// turns are held; a reader beyond them is parked on a channel, not
// runnable, in its tenant's line of a roundQueue, and a freed turn goes
// round the tenants with readers waiting by weight (Config.TenantWeights,
// as the committer's and the snapshot gate's). So when the cores are
// saturated, a tenant whose 50 sessions each hold a frame to decode has
// at most max of them running, and another tenant's frame is decoded
// after at most one round of turns, not behind all 50. Nobody holds a
// turn across a wait, so the gate cannot deadlock with the committer or
// a writer. It is safe for concurrent use.
type workGate struct {
	max     int
	metrics *turnMetrics

	mu      sync.Mutex
	running int
	queue   *roundQueue[*workWaiter]
}

// newWorkGate returns a gate of turns turns at once whose turns go round
// the tenants by weights (absent: 1).
func newWorkGate(turns int, weights map[string]int, m *turnMetrics) *workGate {
	return &workGate{max: turns, metrics: m, queue: newRoundQueue[*workWaiter](weights)}
}

// newWorkTurnMetrics registers the work gate's metrics per tenant.
func newWorkTurnMetrics(reg prometheus.Registerer, labels *tenantLabels) *turnMetrics {
	return newTurnMetrics(reg, labels,
		prometheus.GaugeOpts{Name: "syncd_work_turns_waiting", Help: "Sessions waiting for a work turn to decode and admit a frame, by tenant (tenants beyond --max-tenant-labels: ~other)."},
		prometheus.CounterOpts{Name: "syncd_work_turns_total", Help: "Work turns (a frame decoded, metered and admitted, or a feed page read and built) taken, by tenant: the share of the sessions' CPU work each tenant is served."})
}

// workWaiter is one reader parked for a turn.
type workWaiter struct {
	tenant string
	turn   chan struct{} // gets the turn
}

func (w *workWaiter) turnTenant() string { return w.tenant }
func (w *workWaiter) turnScope() string  { return "" }

// take waits for a turn of tenant: nil when it holds one (give it back
// with give), ctx's error when ctx ended first (it holds none).
func (g *workGate) take(ctx context.Context, tenant string) error {
	g.mu.Lock()
	if g.running < g.max && g.queue.len() == 0 {
		g.running++
		g.mu.Unlock()
		g.metrics.took(tenant)
		return nil
	}
	w := &workWaiter{tenant: tenant, turn: make(chan struct{}, 1)}
	g.queue.push(w)
	g.mu.Unlock()
	g.metrics.waiting(tenant, 1)
	select {
	case <-w.turn:
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.queue.remove(w) {
		g.metrics.waiting(tenant, -1)
	} else { // given the turn as ctx ended: hand it on
		g.handOnLocked()
	}
	return ctx.Err()
}

// give returns a turn taken with take: to the next waiter in the round,
// or to the free ones.
func (g *workGate) give() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.handOnLocked()
}

func (g *workGate) handOnLocked() {
	if w := g.queue.next(); w != nil {
		w.turn <- struct{}{}
		g.metrics.waiting(w.tenant, -1)
		g.metrics.took(w.tenant)
		return
	}
	g.running--
}

// workSeat is one session's use of the work gate: whether its reader
// holds a turn. It is owned by the reader goroutine. A nil gate (the cap
// off) gives every turn at once.
type workSeat struct {
	gate   *workGate
	tenant string
	held   bool
}

// take waits for a turn of the session's tenant; false when ctx ended
// first.
func (s *workSeat) take(ctx context.Context) bool {
	if s.gate == nil {
		return ctx.Err() == nil
	}
	if s.gate.take(ctx, s.tenant) != nil {
		return false
	}
	s.held = true
	return true
}

// give gives the turn back if the session holds one; a second call, or a
// call on nil (a caller without a seat: a pull's read), does nothing.
func (s *workSeat) give() {
	if s != nil && s.held {
		s.held = false
		s.gate.give()
	}
}
