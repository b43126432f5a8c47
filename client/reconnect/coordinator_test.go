package reconnect_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/reconnect"
)

// stuckUntilReleased is a step that announces it has started, honours
// cancellation, and then still does not return until released: a slow
// teardown. It lets a test prove that OnOffline returns while a step is
// still running.
func stuckUntilReleased(started, release chan struct{}) behaviour {
	return func(ctx context.Context, n int) error {
		if n > 1 {
			return nil
		}
		close(started)
		<-ctx.Done()
		<-release
		return ctx.Err()
	}
}

func TestOnOfflineAbortsALongReconnect(t *testing.T) {
	var tr trace
	started, release := make(chan struct{}), make(chan struct{})
	c, outcomes := newCoordinator(t, recordedSteps(&tr, map[reconnect.Step]behaviour{
		reconnect.StepReconnect: stuckUntilReleased(started, release),
	}), reconnect.Config{})

	require.True(t, c.OnOnline())
	await(t, started, "reconnect to start")
	offlineReturned := make(chan struct{})
	go func() {
		c.OnOffline()
		close(offlineReturned)
	}()
	await(t, offlineReturned, "OnOffline to return while the step still runs")
	tr.add("offline returned")
	close(release)

	out := nextOutcome(t, outcomes)
	require.Equal(t, reconnect.Aborted, out.Result)
	require.ErrorIs(t, out.Err, reconnect.ErrOffline)
	require.Equal(t, reconnect.StepReconnect, out.Step)
	require.False(t, out.ReplayRan)
	require.Equal(t, []string{"reconnect", "offline returned"}, tr.get())
}

func TestOnOnlineCoalescesWhileRunningAndConnected(t *testing.T) {
	var tr trace
	gate := make(chan struct{})
	c, outcomes := newCoordinator(t, recordedSteps(&tr, map[reconnect.Step]behaviour{
		reconnect.StepReconnect: func(ctx context.Context, n int) error {
			if n == 1 {
				<-gate
			}
			return nil
		},
	}), reconnect.Config{})

	require.True(t, c.OnOnline())
	for range 3 {
		require.False(t, c.OnOnline(), "a run is already in progress")
	}
	close(gate)
	require.True(t, nextOutcome(t, outcomes).Synced())
	require.False(t, c.OnOnline(), "already connected: no second run without an offline in between")

	c.OnOffline()
	require.True(t, c.OnOnline())
	require.True(t, nextOutcome(t, outcomes).Synced())
	require.Equal(t, []string{
		"reconnect", "activate", "bind", "replay",
		"reconnect", "activate", "bind", "replay",
	}, tr.get())
}

// A flap (offline, then online again) starts a fresh run, and that run
// calls no step until the cancelled one has returned.
func TestFlapStartsAFreshRunAfterTheOldOneReturns(t *testing.T) {
	var tr trace
	started, release := make(chan struct{}), make(chan struct{})
	c, outcomes := newCoordinator(t, recordedSteps(&tr, map[reconnect.Step]behaviour{
		reconnect.StepReconnect: stuckUntilReleased(started, release),
	}), reconnect.Config{})

	require.True(t, c.OnOnline())
	await(t, started, "first reconnect to start")
	c.OnOffline()
	require.True(t, c.OnOnline(), "a flap starts a fresh run")
	require.False(t, c.OnOnline())
	tr.add("first run released")
	close(release)

	first, second := nextOutcome(t, outcomes), nextOutcome(t, outcomes)
	require.Equal(t, reconnect.Aborted, first.Result)
	require.ErrorIs(t, first.Err, reconnect.ErrOffline)
	require.True(t, second.Synced())
	require.Equal(t, 1, second.Attempts)
	require.Equal(t, []string{
		"reconnect", "first run released",
		"reconnect", "activate", "bind", "replay",
	}, tr.get())
}

func TestGaveUpLetsTheNextOnOnlineRetry(t *testing.T) {
	var tr trace
	var rearmed atomic.Bool
	var c *reconnect.Coordinator
	outcomes := make(chan reconnect.Outcome, 4)
	c, _ = newCoordinator(t, recordedSteps(&tr, map[reconnect.Step]behaviour{
		reconnect.StepReconnect: failFirst(2),
	}), reconnect.Config{
		MaxAttempts: 2,
		OnOutcome: func(o reconnect.Outcome) {
			outcomes <- o
			// Re-arming from the callback must not deadlock.
			if o.Result == reconnect.GaveUp && !rearmed.Swap(true) {
				c.OnOnline()
			}
		},
	})
	require.True(t, c.OnOnline())
	gaveUp := nextOutcome(t, outcomes)
	require.Equal(t, reconnect.GaveUp, gaveUp.Result)
	require.Equal(t, 2, gaveUp.Attempts)
	require.True(t, nextOutcome(t, outcomes).Synced())
}

func TestCloseCancelsAndWaits(t *testing.T) {
	var tr trace
	started := make(chan struct{})
	var returned atomic.Bool
	c, outcomes := newCoordinator(t, recordedSteps(&tr, map[reconnect.Step]behaviour{
		reconnect.StepReconnect: func(ctx context.Context, _ int) error {
			close(started)
			<-ctx.Done()
			returned.Store(true)
			return ctx.Err()
		},
	}), reconnect.Config{})

	require.True(t, c.OnOnline())
	await(t, started, "reconnect to start")
	c.Close()
	require.True(t, returned.Load(), "Close returned before the step did")
	select {
	case out := <-outcomes:
		require.Equal(t, reconnect.Aborted, out.Result)
		require.ErrorIs(t, out.Err, reconnect.ErrClosed)
	default:
		t.Fatal("Close returned before the outcome was reported")
	}
	c.Close()
	require.False(t, c.OnOnline(), "closed")
	c.OnOffline()
}

func TestCoordinatorMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	var tr trace
	c, outcomes := newCoordinator(t, recordedSteps(&tr, map[reconnect.Step]behaviour{
		reconnect.StepReconnect: failFirst(1),
		reconnect.StepBind:      failFirst(1),
	}), reconnect.Config{Registerer: reg})
	require.True(t, c.OnOnline())
	require.True(t, nextOutcome(t, outcomes).Synced())

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP syncd_client_reconnect_attempts_total Reconnect attempts (calls to the reconnect step).
# TYPE syncd_client_reconnect_attempts_total counter
syncd_client_reconnect_attempts_total 3
# HELP syncd_client_reconnect_outcomes_total Reconnect runs by how they ended.
# TYPE syncd_client_reconnect_outcomes_total counter
syncd_client_reconnect_outcomes_total{result="aborted"} 0
syncd_client_reconnect_outcomes_total{result="gave_up"} 0
syncd_client_reconnect_outcomes_total{result="reconnected"} 1
# HELP syncd_client_reconnect_step_failures_total Failed reconnect attempts by the step that failed.
# TYPE syncd_client_reconnect_step_failures_total counter
syncd_client_reconnect_step_failures_total{step="activate"} 0
syncd_client_reconnect_step_failures_total{step="bind"} 1
syncd_client_reconnect_step_failures_total{step="reconnect"} 1
# HELP syncd_client_replay_runs_total Replays started by reconnect runs, by how they ended.
# TYPE syncd_client_replay_runs_total counter
syncd_client_replay_runs_total{result="aborted"} 0
syncd_client_replay_runs_total{result="completed"} 1
syncd_client_replay_runs_total{result="failed"} 0
`)))

	_, err := reconnect.New(recordedSteps(&tr, nil), reconnect.Config{Registerer: reg})
	require.Error(t, err, "a second coordinator on the same registry needs its own label")
}
