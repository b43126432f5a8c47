package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// testWait bounds each wait for a parked reader to reach the gate.
const (
	testWait  = 10 * time.Second
	pollEvery = time.Millisecond
)

// newTestWorkGate is a gate of turns turns with its metrics on a registry
// of its own.
func newTestWorkGate(t *testing.T, turns int, weights map[string]int) *workGate {
	t.Helper()
	return newWorkGate(turns, weights, newWorkTurnMetrics(prometheus.NewRegistry(), newTenantLabels(weights, 16)))
}

// parkedWorker is a reader parked in the gate: it reports its name once
// given its turn, then holds it until released.
type parkedWorker struct {
	name    string
	release chan struct{}
}

// park queues one worker of tenant per name, in order, each parked before
// the next starts (the gate's line order is their order), and returns
// them; got receives each one's name when its turn comes.
func park(t *testing.T, g *workGate, got chan<- string, names ...string) []*parkedWorker {
	t.Helper()
	var ws []*parkedWorker
	for _, name := range names {
		w := &parkedWorker{name: name, release: make(chan struct{})}
		ws = append(ws, w)
		before := waitingIn(g)
		tenant := name[:1]
		go func() {
			if g.take(context.Background(), tenant) != nil {
				got <- "ctx ended: " + w.name
				return
			}
			got <- w.name
			<-w.release
			g.give()
		}()
		require.Eventually(t, func() bool { return waitingIn(g) == before+1 }, testWait, pollEvery, "%s parks", name)
	}
	return ws
}

func waitingIn(g *workGate) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.queue.len()
}

func heldIn(g *workGate) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running
}

// A freed work turn goes round the tenants with readers waiting, each
// taking its weight of turns a round: tenant b's reader, parked behind
// three of a's, gets a turn within one round, not behind all of a's.
func TestWorkGateGivesTurnsRoundTheTenants(t *testing.T) {
	for _, tc := range []struct {
		name    string
		weights map[string]int
		want    []string
	}{
		{name: "equal weights", want: []string{"a1", "b1", "a2", "a3"}},
		{name: "a of weight 2", weights: map[string]int{"a": 2}, want: []string{"a1", "a2", "b1", "a3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newTestWorkGate(t, 1, tc.weights)
			require.NoError(t, g.take(context.Background(), "a"), "a free turn is taken at once")
			got := make(chan string, 8)
			ws := park(t, g, got, "a1", "a2", "a3", "b1")
			byName := map[string]*parkedWorker{}
			for _, w := range ws {
				byName[w.name] = w
			}
			require.Equal(t, 4.0, testutil.ToFloat64(g.metrics.waitingVec.WithLabelValues("a"))+testutil.ToFloat64(g.metrics.waitingVec.WithLabelValues("b")))

			g.give() // the test's turn: to the first in the round
			var order []string
			for range ws {
				name := <-got
				order = append(order, name)
				require.Equal(t, 1, heldIn(g), "one turn at a time")
				close(byName[name].release)
			}
			require.Equal(t, tc.want, order)
			require.Eventually(t, func() bool { return heldIn(g) == 0 }, testWait, pollEvery, "every turn given back")
			require.Equal(t, 4.0, testutil.ToFloat64(g.metrics.turns.WithLabelValues("a")), "a's turns: the test's and three")
			require.Equal(t, 1.0, testutil.ToFloat64(g.metrics.turns.WithLabelValues("b")))
			require.Zero(t, testutil.ToFloat64(g.metrics.waitingVec.WithLabelValues("a"))+testutil.ToFloat64(g.metrics.waitingVec.WithLabelValues("b")))
		})
	}
}

// Up to its turns, readers take a turn without waiting; the next waits.
func TestWorkGateRunsItsTurnsAtOnce(t *testing.T) {
	g := newTestWorkGate(t, 3, nil)
	for i := range 3 {
		require.NoError(t, g.take(context.Background(), fmt.Sprint("t", i)))
	}
	require.Equal(t, 3, heldIn(g))
	got := make(chan string, 1)
	ws := park(t, g, got, "x1")
	g.give()
	require.Equal(t, "x1", <-got)
	close(ws[0].release)
	g.give()
	g.give()
	require.Eventually(t, func() bool { return heldIn(g) == 0 }, testWait, pollEvery)
}

// A parked reader whose session's context ends leaves the line without a
// turn, and the turns stay whole: the holder's turn, given back, is free
// again.
func TestWorkGateParkedReaderLeavesOnContextEnd(t *testing.T) {
	g := newTestWorkGate(t, 1, nil)
	require.NoError(t, g.take(context.Background(), "a"))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.take(ctx, "b") }()
	require.Eventually(t, func() bool { return waitingIn(g) == 1 }, testWait, pollEvery)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Zero(t, waitingIn(g))
	require.Zero(t, testutil.ToFloat64(g.metrics.waitingVec.WithLabelValues("b")))

	g.give()
	require.Zero(t, heldIn(g), "the holder's turn is free, not handed to the reader that left")
	require.NoError(t, g.take(context.Background(), "c"), "a free turn is taken at once")
	g.give()

	// A context already ended before the wait: no turn, nothing queued.
	require.NoError(t, g.take(context.Background(), "a"))
	require.ErrorIs(t, g.take(ctx, "b"), context.Canceled)
	require.Zero(t, waitingIn(g))
	g.give()
	require.Zero(t, heldIn(g))
}

// A session without a gate (SessionWorkTurns negative) takes every turn
// at once; give without a turn does nothing.
func TestWorkSeatWithoutGate(t *testing.T) {
	s := workSeat{tenant: "a"}
	require.True(t, s.take(context.Background()))
	s.give()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.False(t, s.take(ctx))

	g := newTestWorkGate(t, 1, nil)
	seat := workSeat{gate: g, tenant: "a"}
	require.True(t, seat.take(context.Background()))
	seat.give()
	seat.give()
	require.Zero(t, heldIn(g), "a second give does nothing")
	var none *workSeat // a pull's read: no seat
	none.give()
}
