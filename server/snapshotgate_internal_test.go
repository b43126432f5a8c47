package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// waiter is one snapshot waiter for the turn queue's tests, of a scope of
// its own (tenant/i) unless scope is given.
func waiter(tenant string, i int, scope ...string) *snapshotWaiter {
	sc := fmt.Sprintf("%s/%d", tenant, i)
	if len(scope) > 0 {
		sc = scope[0]
	}
	return &snapshotWaiter{tenant: tenant, scope: sc, turn: make(chan *shareReader, 1)}
}

// turns takes every turn of q and returns whose each was, as scope names.
func turns(q *turnQueue) []string {
	var got []string
	for w := q.next(); w != nil; w = q.next() {
		got = append(got, w.scope)
	}
	return got
}

// The turn queue gives turns round the tenants with snapshots waiting,
// each taking its weight of turns a round: a tenant whose snapshot starts
// waiting behind a storm gets a turn before any other tenant takes more
// than its weight, first come first served within a tenant.
func TestTurnQueueGoesRoundTheTenants(t *testing.T) {
	for _, tc := range []struct {
		name    string
		weights map[string]int
		queue   []string // tenant:i in arrival order
		want    []string
	}{
		{
			name:  "one tenant alone is first come first served",
			queue: []string{"a/0", "a/1", "a/2"},
			want:  []string{"a/0", "a/1", "a/2"},
		},
		{
			name:  "a device behind a storm takes the second turn",
			queue: []string{"a/0", "a/1", "a/2", "a/3", "b/0"},
			want:  []string{"a/0", "b/0", "a/1", "a/2", "a/3"},
		},
		{
			name:  "equal weights alternate",
			queue: []string{"a/0", "a/1", "a/2", "b/0", "b/1", "c/0"},
			want:  []string{"a/0", "b/0", "c/0", "a/1", "b/1", "a/2"},
		},
		{
			name:    "weights are turns a round",
			weights: map[string]int{"a": 3},
			queue:   []string{"a/0", "a/1", "a/2", "a/3", "a/4", "b/0", "b/1", "b/2"},
			want:    []string{"a/0", "a/1", "a/2", "b/0", "a/3", "a/4", "b/1", "b/2"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newTurnQueue(tc.weights)
			for _, w := range tc.queue {
				tenant, _, _ := strings.Cut(w, "/")
				q.push(waiter(tenant, 0, w))
			}
			require.Equal(t, len(tc.queue), q.len())
			require.Equal(t, tc.want, turns(q))
			require.Zero(t, q.len())
			require.Zero(t, q.fair.Tenants(), "an idle tenant keeps no line")
		})
	}
}

// Whatever the storm's size and the other tenants' weights, a tenant that
// queues a snapshot is given a turn within one round: before the tenants
// ahead of it took more than their weights of turns.
func TestTurnQueueServesAWaitingTenantWithinOneRound(t *testing.T) {
	weights := map[string]int{"storm": 5, "heavy": 2}
	q := newTurnQueue(weights)
	for i := range 500 {
		q.push(waiter("storm", i))
		q.push(waiter("heavy", i))
	}
	// The round is under way: some turns were taken before b arrives.
	for range 3 {
		require.NotNil(t, q.next())
	}
	q.push(waiter("b", 0))
	round := weights["storm"] + weights["heavy"]
	for i := 0; ; i++ {
		require.LessOrEqual(t, i, round, "b waited more than one round")
		if w := q.next(); w.tenant == "b" {
			break
		}
	}
}

// A waiter that leaves (its wait ended) or joins a read of its scope
// leaves its place, keeps the others' order, and takes no turn; a tenant
// whose waiters all left leaves the round.
func TestTurnQueueRemovals(t *testing.T) {
	q := newTurnQueue(nil)
	a0, a1, a2 := waiter("a", 0), waiter("a", 1, "shared"), waiter("a", 2)
	b0, b1 := waiter("b", 0), waiter("b", 1, "shared")
	c0 := waiter("c", 0)
	for _, w := range []*snapshotWaiter{a0, a1, a2, b0, b1, c0} {
		q.push(w)
	}
	require.True(t, q.remove(c0))
	require.False(t, q.remove(c0), "removed twice")
	require.Equal(t, 2, q.fair.Tenants(), "c's line left with its one waiter")
	require.Equal(t, 4, q.scopes(), "a/0, shared, a/2, b/0")

	joined := q.removeScope("shared")
	require.ElementsMatch(t, []*snapshotWaiter{a1, b1}, joined)
	require.Equal(t, 3, q.len())
	require.Equal(t, []string{"a/0", "b/0", "a/2"}, turns(q))
	require.False(t, q.remove(a0), "given a turn")
}

// The gate hands a freed turn to the next tenant in the round, not to the
// next arrival: with tenant A's storm waiting for the one turn, B's
// device, arriving last, is given the second turn freed; each tenant's
// waiting snapshots and turns are counted.
func TestSnapshotGateGivesTurnsRoundTheTenants(t *testing.T) {
	reg := prometheus.NewRegistry()
	tm := newSnapshotTurnMetrics(reg, newTenantLabels(nil, 10))
	waiting := prometheus.NewGauge(prometheus.GaugeOpts{Name: "waiting"})
	g := newSnapshotGate(1, 100, 0, nil, waiting, tm)
	ctx := context.Background()
	owner := func(tenant string, i int) snapshotOwner {
		return snapshotOwner{token: fmt.Sprintf("%s-%d", tenant, i), tenant: tenant}
	}

	// A's first device takes the one turn at once.
	joined, refused := g.enter(ctx, owner("a", 0), "a/0", time.Minute)
	require.Nil(t, refused)
	require.Nil(t, joined)

	// Four more of A's wait, then B's one.
	admitted := make(chan string, 5)
	queue := func(tenant string, i int) {
		go func() {
			r, refused := g.enter(ctx, owner(tenant, i), fmt.Sprintf("%s/%d", tenant, i), time.Minute)
			if refused != nil || r != nil {
				admitted <- fmt.Sprintf("%s/%d refused %v joined %v", tenant, i, refused, r != nil)
				return
			}
			admitted <- fmt.Sprintf("%s/%d", tenant, i)
		}()
	}
	for i := 1; i <= 4; i++ {
		queue("a", i)
		require.Eventually(t, func() bool { return testutil.ToFloat64(waiting) == float64(i) }, 10*time.Second, time.Millisecond)
	}
	queue("b", 0)
	// The gate moves its gauge, then the tenant's, under its lock, while
	// this goroutine reads them without it: wait for all three.
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(waiting) == 5 && testutil.ToFloat64(tm.waitingVec.WithLabelValues("a")) == 4 &&
			testutil.ToFloat64(tm.waitingVec.WithLabelValues("b")) == 1
	}, 10*time.Second, time.Millisecond)

	// Each turn freed goes to the next in the round: A's first waiter
	// (A's round began first), then B, then the rest of A's.
	var order []string
	holder := owner("a", 0)
	for range 5 {
		g.leave(holder, time.Millisecond)
		select {
		case who := <-admitted:
			order = append(order, who)
			tenant, i, _ := strings.Cut(who, "/")
			holder = snapshotOwner{token: tenant + "-" + i, tenant: tenant}
		case <-time.After(10 * time.Second):
			t.Fatal("a freed turn was given to no one")
		}
	}
	require.Equal(t, []string{"a/1", "b/0", "a/2", "a/3", "a/4"}, order)
	require.Zero(t, testutil.ToFloat64(waiting))
	require.Zero(t, testutil.ToFloat64(tm.waitingVec.WithLabelValues("a")))
	require.Zero(t, testutil.ToFloat64(tm.waitingVec.WithLabelValues("b")))
	require.Equal(t, 5.0, testutil.ToFloat64(tm.turns.WithLabelValues("a")))
	require.Equal(t, 1.0, testutil.ToFloat64(tm.turns.WithLabelValues("b")))
	g.leave(holder, time.Millisecond)
	require.Zero(t, g.running)
	require.Empty(t, g.byToken)
	require.Empty(t, g.byTenant)
}

// The tenant label of the turn metrics is bounded as the committer's:
// weighted tenants, then the first MaxTenantLabels others, then ~other.
func TestSnapshotTurnMetricsBoundTheTenantLabel(t *testing.T) {
	reg := prometheus.NewRegistry()
	tm := newSnapshotTurnMetrics(reg, newTenantLabels(map[string]int{"paying": 3}, 1))
	for _, tenant := range []string{"first", "second", "third", "paying"} {
		tm.took(tenant)
	}
	require.Equal(t, 3, testutil.CollectAndCount(tm.turns), "paying, first, ~other")
	require.Equal(t, 2.0, testutil.ToFloat64(tm.turns.WithLabelValues(otherTenants)))
	require.Equal(t, 1.0, testutil.ToFloat64(tm.turns.WithLabelValues("paying")))
}
