package reconnect_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/reconnect"
)

// These tests call Run directly, on the test goroutine: the sequence with
// real step functions and a fake clock, no coordinator goroutine involved.

func newRunner(t *testing.T, steps reconnect.Steps, cfg reconnect.Config) *reconnect.Coordinator {
	t.Helper()
	if cfg.Backoff.Rand == nil {
		cfg.Backoff.Rand = highest
	}
	c, err := reconnect.New(steps, cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func TestRunStrictOrder(t *testing.T) {
	var tr trace
	c := newRunner(t, recordedSteps(&tr, nil), reconnect.Config{})
	out := c.Run(context.Background())
	require.Equal(t, []string{"reconnect", "activate", "bind", "replay"}, tr.get())
	require.Equal(t, reconnect.Outcome{
		Result: reconnect.Reconnected, Attempts: 1, Step: reconnect.StepReplay, ReplayRan: true,
	}, out)
	require.True(t, out.Synced())
}

func TestRunBacksOffExponentiallyWithCap(t *testing.T) {
	ms := time.Millisecond
	var tr trace
	var w waits
	c := newRunner(t, recordedSteps(&tr, map[reconnect.Step]behaviour{
		reconnect.StepReconnect: failFirst(5),
	}), reconnect.Config{
		Backoff: reconnect.Backoff{Base: 100 * ms, Cap: 500 * ms},
		After:   w.after,
	})
	out := c.Run(context.Background())
	require.Equal(t, reconnect.Reconnected, out.Result)
	require.Equal(t, 6, out.Attempts)
	require.Equal(t, []time.Duration{100 * ms, 200 * ms, 400 * ms, 500 * ms, 500 * ms}, w.get())
}

func TestRunActivateOrBindFailureStartsOver(t *testing.T) {
	var tr trace
	var w waits
	c := newRunner(t, recordedSteps(&tr, map[reconnect.Step]behaviour{
		reconnect.StepActivate: failFirst(1),
		reconnect.StepBind:     failFirst(1),
	}), reconnect.Config{After: w.after})
	out := c.Run(context.Background())
	require.Equal(t, []string{
		"reconnect", "activate",
		"reconnect", "activate", "bind",
		"reconnect", "activate", "bind", "replay",
	}, tr.get())
	require.Equal(t, 3, out.Attempts)
	require.Len(t, w.get(), 2)
	require.True(t, out.Synced())
}

func TestRunCancelledDuringBackoff(t *testing.T) {
	var tr trace
	ctx, cancel := context.WithCancelCause(context.Background())
	offline := errors.New("went offline")
	c := newRunner(t, recordedSteps(&tr, map[reconnect.Step]behaviour{
		reconnect.StepReconnect: failFirst(100),
	}), reconnect.Config{
		After: func(time.Duration) <-chan time.Time {
			cancel(offline) // the network drops while the run waits
			return nil      // and the wait itself would never end
		},
	})
	out := c.Run(ctx)
	require.Equal(t, reconnect.Aborted, out.Result)
	require.Equal(t, 1, out.Attempts)
	require.Equal(t, offline, out.Err)
	require.Equal(t, []string{"reconnect"}, tr.get())
}

func TestRunCancelledBetweenBindAndReplay(t *testing.T) {
	var tr trace
	ctx, cancel := context.WithCancelCause(context.Background())
	c := newRunner(t, recordedSteps(&tr, map[reconnect.Step]behaviour{
		reconnect.StepBind: func(context.Context, int) error {
			cancel(reconnect.ErrOffline) // offline arrives while bind finishes
			return nil
		},
	}), reconnect.Config{})
	out := c.Run(ctx)
	require.Equal(t, []string{"reconnect", "activate", "bind"}, tr.get(), "replay must not run")
	require.Equal(t, reconnect.Aborted, out.Result)
	require.Equal(t, reconnect.StepBind, out.Step)
	require.False(t, out.ReplayRan)
	require.ErrorIs(t, out.Err, reconnect.ErrOffline)
	require.False(t, out.Synced())
}

func TestRunCancelledBeforeStart(t *testing.T) {
	var tr trace
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := newRunner(t, recordedSteps(&tr, nil), reconnect.Config{}).Run(ctx)
	require.Equal(t, reconnect.Outcome{Result: reconnect.Aborted, Err: context.Canceled}, out)
	require.Empty(t, tr.get())
}

func TestRunGivesUpAfterMaxAttempts(t *testing.T) {
	var tr trace
	var w waits
	c := newRunner(t, recordedSteps(&tr, map[reconnect.Step]behaviour{
		reconnect.StepReconnect: failFirst(100),
	}), reconnect.Config{MaxAttempts: 3, After: w.after})
	out := c.Run(context.Background())
	require.Equal(t, reconnect.GaveUp, out.Result)
	require.Equal(t, 3, out.Attempts)
	require.Len(t, w.get(), 2, "no wait after the last attempt")
	require.False(t, out.ReplayRan)
	require.ErrorIs(t, out.Err, errRefused)
	var se *reconnect.StepError
	require.ErrorAs(t, out.Err, &se)
	require.Equal(t, reconnect.StepReconnect, se.Step)
	require.Equal(t, 3, se.Attempt)
}

func TestRunReplayFailureIsReportedAsSuch(t *testing.T) {
	var tr trace
	errQueue := errors.New("queue unreadable")
	c := newRunner(t, recordedSteps(&tr, map[reconnect.Step]behaviour{
		reconnect.StepReplay: func(context.Context, int) error { return errQueue },
	}), reconnect.Config{})
	out := c.Run(context.Background())
	require.Equal(t, reconnect.Reconnected, out.Result)
	require.True(t, out.ReplayRan)
	require.Equal(t, errQueue, out.ReplayErr)
	require.False(t, out.Synced())
	require.Equal(t, []string{"reconnect", "activate", "bind", "replay"}, tr.get(), "replay is not retried")
}

func TestRunAbortedDuringReplay(t *testing.T) {
	var tr trace
	ctx, cancel := context.WithCancelCause(context.Background())
	c := newRunner(t, recordedSteps(&tr, map[reconnect.Step]behaviour{
		reconnect.StepReplay: func(ctx context.Context, _ int) error {
			cancel(reconnect.ErrOffline)
			<-ctx.Done()
			return ctx.Err()
		},
	}), reconnect.Config{})
	out := c.Run(ctx)
	require.Equal(t, reconnect.Aborted, out.Result)
	require.True(t, out.ReplayRan)
	require.ErrorIs(t, out.ReplayErr, context.Canceled)
	require.ErrorIs(t, out.Err, reconnect.ErrOffline)
}

func TestNewValidates(t *testing.T) {
	var tr trace
	full := recordedSteps(&tr, nil)

	_, err := reconnect.New(reconnect.Steps{Reconnect: full.Reconnect, Bind: full.Bind}, reconnect.Config{})
	require.ErrorContains(t, err, "Activate, Replay required")

	_, err = reconnect.New(full, reconnect.Config{MaxAttempts: -1})
	require.Error(t, err)
	_, err = reconnect.New(full, reconnect.Config{Backoff: reconnect.Backoff{Base: -time.Second}})
	require.Error(t, err)
}
