package server

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// snapshotGate admits snapshots within the global, per-tenant and
// per-token limits, queueing those beyond the global one. A waiter is given either a turn of
// its own (a read of the database) or a place in the read of another
// waiter of the same scope whose turn came (snapshotshare.go). It is safe
// for concurrent use.
type snapshotGate struct {
	max, maxQueue int
	maxTenant     int              // per tenant, running or waiting; <= 0: no cap
	waitingGauge  prometheus.Gauge // syncd_snapshots_waiting

	mu       sync.Mutex
	running  int
	queue    []*snapshotWaiter // first first
	byToken  map[string]int    // snapshots running or waiting, by token
	byTenant map[string]int    // snapshots running or waiting, by tenant
	took     time.Duration     // moving average of the served snapshots' durations
}

// snapshotOwner is whose snapshot it is, for the per-token and per-tenant
// limits.
type snapshotOwner struct{ token, tenant string }

// snapshotWaiter is one snapshot waiting in the queue.
type snapshotWaiter struct {
	scope string
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
	if g.running < g.max && len(g.queue) == 0 {
		g.running++
		g.addLocked(owner)
		g.mu.Unlock()
		return nil, nil
	}
	if len(g.queue) >= g.maxQueue {
		defer g.mu.Unlock()
		return nil, g.refuseLocked(fmt.Sprintf("%d snapshots running and %d waiting, the most this server queues", g.running, len(g.queue)))
	}
	w := &snapshotWaiter{scope: scope, turn: make(chan *shareReader, 1)}
	g.queue = append(g.queue, w)
	g.waitingGauge.Inc()
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
	i := slices.Index(g.queue, w)
	if i < 0 { // given a turn as the wait ended: take it
		return <-w.turn, nil
	}
	g.queue = slices.Delete(g.queue, i, i+1)
	g.waitingGauge.Dec()
	g.dropLocked(owner)
	return nil, g.refuseLocked(fmt.Sprintf("no turn within %s", wait))
}

// share hands every waiter of scope a reader of share, the read of a
// snapshot whose turn came. Call it before the read begins: the read then
// holds every write acknowledged before any joiner asked.
func (g *snapshotGate) share(scope string, share *snapshotShare) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.queue = slices.DeleteFunc(g.queue, func(w *snapshotWaiter) bool {
		if w.scope != scope {
			return false
		}
		w.turn <- share.reader()
		g.waitingGauge.Dec()
		return true
	})
}

// leaveShared ends a snapshot admitted into another's read.
func (g *snapshotGate) leaveShared(owner snapshotOwner) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dropLocked(owner)
}

// leave ends an admitted snapshot that took d, handing its turn to the
// first waiter.
func (g *snapshotGate) leave(owner snapshotOwner, d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dropLocked(owner)
	if g.took == 0 {
		g.took = d
	} else {
		g.took += (d - g.took) / 8
	}
	if len(g.queue) > 0 {
		g.queue[0].turn <- nil
		g.queue = slices.Delete(g.queue, 0, 1)
		g.waitingGauge.Dec()
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
	scopes := map[string]struct{}{}
	for _, w := range g.queue {
		scopes[w.scope] = struct{}{}
	}
	rounds := (g.running + len(scopes) + g.max) / g.max
	return &snapshotRefusal{reason: reason, retryAfter: min(time.Duration(rounds)*took, snapshotMaxRetryAfter)}
}
