package netmonitor_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/netmonitor"
)

const (
	interval = 5 * time.Second
	confirm  = time.Second
	timeout  = 2 * time.Second

	// guard bounds every wait for the loop; reaching it fails the test. It
	// is a hang detector, never a measured duration.
	guard = 10 * time.Second
)

// fakeTimer is one After call made by the monitor; fire makes it elapse.
type fakeTimer struct {
	d time.Duration
	c chan time.Time
}

func (f fakeTimer) fire() { f.c <- time.Time{} }

// harness drives a Monitor in lock step: the test decides what each probe
// does (answer) and when each wait elapses (timer(d).fire()). Nothing
// sleeps; time passes only when the test fires a timer.
type harness struct {
	t      *testing.T
	mon    *netmonitor.Monitor
	timers chan fakeTimer                   // every After call, in call order
	probes chan func(context.Context) error // what the running probe does
	calls  atomic.Int32                     // probes started
}

func newHarness(t *testing.T, mutate func(*netmonitor.Config)) *harness {
	t.Helper()
	h := &harness{
		t:      t,
		timers: make(chan fakeTimer, 64),
		probes: make(chan func(context.Context) error),
	}
	cfg := netmonitor.Config{
		Probe: func(ctx context.Context) error {
			h.calls.Add(1)
			select {
			case f := <-h.probes:
				return f(ctx)
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		Interval:        interval,
		ConfirmInterval: confirm,
		// Offline waits as long as online, at the top of its jitter, so
		// the scripts below name one wait; TestOfflineCadence tests it.
		OfflineInterval: interval,
		Rand:            func(n int64) int64 { return n - 1 },
		Timeout:         timeout,
		After: func(d time.Duration) <-chan time.Time {
			c := make(chan time.Time, 1)
			h.timers <- fakeTimer{d: d, c: c}
			return c
		},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	mon, err := netmonitor.New(cfg)
	require.NoError(t, err)
	h.mon = mon
	t.Cleanup(mon.Close)
	return h
}

func (h *harness) start() {
	h.t.Helper()
	require.NoError(h.t, h.mon.Start(context.Background()))
}

// answer hands f to the probe that is (or is about to be) running.
func (h *harness) answer(f func(context.Context) error) {
	h.t.Helper()
	select {
	case h.probes <- f:
	case <-time.After(guard):
		h.t.Fatal("no probe started")
	}
}

// timer returns the next After call for duration d, skipping the others
// (probe timeouts the test lets lapse unfired).
func (h *harness) timer(d time.Duration) fakeTimer {
	h.t.Helper()
	for {
		select {
		case tm := <-h.timers:
			if tm.d == d {
				return tm
			}
		case <-time.After(guard):
			h.t.Fatalf("the monitor never waited for %s", d)
		}
	}
}

// round answers one probe with f and returns the wait the loop chose
// after it, which proves the loop has finished deciding on f's result.
func (h *harness) round(f func(context.Context) error, wait time.Duration) fakeTimer {
	h.t.Helper()
	h.answer(f)
	return h.timer(wait)
}

func ok(context.Context) error   { return nil }
func fail(context.Context) error { return errors.New("connection refused") }

func hang(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func nextEvent(t *testing.T, ch <-chan netmonitor.Event) netmonitor.Event {
	t.Helper()
	select {
	case ev, open := <-ch:
		require.True(t, open, "subscription closed")
		return ev
	case <-time.After(guard):
		t.Fatal("no event")
		return netmonitor.Event{}
	}
}

func requireNoEvent(t *testing.T, ch <-chan netmonitor.Event) {
	t.Helper()
	select {
	case ev := <-ch:
		t.Fatalf("unexpected event %+v", ev)
	default:
	}
}

func requireClosed(t *testing.T, ch <-chan netmonitor.Event) {
	t.Helper()
	for range 2 {
		select {
		case _, open := <-ch:
			if !open {
				return
			}
		case <-time.After(guard):
			t.Fatal("subscription not closed")
		}
	}
	t.Fatal("subscription still delivering")
}

func TestFirstProbeDecidesAtStart(t *testing.T) {
	for _, tt := range []struct {
		name  string
		probe func(context.Context) error
		want  netmonitor.State
	}{
		{"reachable", ok, netmonitor.Online},
		{"unreachable", fail, netmonitor.Offline},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			events, _ := h.mon.Subscribe()
			require.Equal(t, netmonitor.Unknown, h.mon.Current())

			h.start()
			// The first thing the loop does is probe: no wait comes before it.
			h.answer(tt.probe)
			ev := nextEvent(t, events)
			require.Equal(t, tt.want, ev.State)
			require.Equal(t, uint64(1), ev.Seq)
			require.Equal(t, tt.want == netmonitor.Offline, ev.Err != nil)
			require.Equal(t, tt.want, h.mon.Current())
			h.timer(interval)
		})
	}
}

func TestThresholds(t *testing.T) {
	h := newHarness(t, nil) // thresholds 2 and 2
	events, _ := h.mon.Subscribe()
	h.start()
	tm := h.round(ok, interval)
	require.Equal(t, netmonitor.Online, nextEvent(t, events).State)

	// Failures below the threshold, each followed by a success, emit
	// nothing; the loop probes sooner (confirm) only while counting.
	for range 3 {
		tm.fire()
		tm = h.round(fail, confirm)
		requireNoEvent(t, events)
		tm.fire()
		tm = h.round(ok, interval)
		requireNoEvent(t, events)
	}

	tm.fire()
	tm = h.round(fail, confirm)
	tm.fire()
	tm = h.round(fail, interval)
	ev := nextEvent(t, events)
	require.Equal(t, netmonitor.Offline, ev.State)
	require.Equal(t, uint64(2), ev.Seq)
	require.ErrorContains(t, ev.Err, "connection refused")

	tm.fire()
	tm = h.round(ok, interval) // offline: the harness's offline wait is Interval
	requireNoEvent(t, events)
	tm.fire()
	h.round(ok, interval)
	ev = nextEvent(t, events)
	require.Equal(t, netmonitor.Online, ev.State)
	require.Equal(t, uint64(3), ev.Seq)
	require.NoError(t, ev.Err)
}

func TestPanickingProbeIsAFailure(t *testing.T) {
	h := newHarness(t, nil)
	events, _ := h.mon.Subscribe()
	h.start()
	tm := h.round(ok, interval)
	nextEvent(t, events)

	boom := func(context.Context) error { panic("boom") }
	tm.fire()
	tm = h.round(boom, confirm)
	tm.fire()
	tm = h.round(boom, interval)
	ev := nextEvent(t, events)
	require.Equal(t, netmonitor.Offline, ev.State)
	var pe *netmonitor.PanicError
	require.ErrorAs(t, ev.Err, &pe)
	require.Equal(t, "boom", pe.Value)

	// The loop survived both panics and keeps probing.
	tm.fire()
	h.round(ok, interval) // offline: the harness's offline wait
}

func TestProbeTimeoutIsAFailure(t *testing.T) {
	h := newHarness(t, nil)
	events, _ := h.mon.Subscribe()
	h.start()
	h.answer(hang)
	h.timer(timeout).fire()
	ev := nextEvent(t, events)
	require.Equal(t, netmonitor.Offline, ev.State)
	require.ErrorIs(t, ev.Err, netmonitor.ErrProbeTimeout)
}

// A probe that ignores cancellation is declared failed at its timeout, and
// the rounds while it is still running fail without starting another probe.
func TestStuckProbeDoesNotStallTheLoop(t *testing.T) {
	h := newHarness(t, nil)
	events, _ := h.mon.Subscribe()
	h.start()
	release := make(chan struct{})
	h.answer(func(context.Context) error {
		<-release
		return nil
	})
	h.timer(timeout).fire()
	require.Equal(t, netmonitor.Offline, nextEvent(t, events).State)

	tm := h.timer(interval)
	tm.fire()
	tm = h.timer(interval) // this round failed at once: the stuck probe still runs
	require.Equal(t, int32(1), h.calls.Load())

	close(release)
	// Once the stuck probe has returned, a round starts a fresh probe. When
	// exactly that happens is up to the scheduler, so allow a bounded number
	// of rounds that fail because it has not been noticed yet.
	for rounds := 0; ; rounds++ {
		// Bounded in count; each round yields a millisecond so that the
		// probe goroutine's return is noticed even on a loaded machine.
		require.Less(t, rounds, 5000, "the loop never started a new probe")
		time.Sleep(time.Millisecond)
		tm.fire()
		tm = <-h.timers
		if tm.d == timeout {
			break // a new probe started and its timeout was armed
		}
		require.Equal(t, interval, tm.d)
	}
	h.answer(ok)
	require.Equal(t, int32(2), h.calls.Load())
	h.timer(interval) // offline: the harness's offline wait
}

func TestSlowSubscriberNeverBlocksProbing(t *testing.T) {
	h := newHarness(t, func(c *netmonitor.Config) {
		c.FailureThreshold, c.SuccessThreshold = 1, 1
	})
	slow, _ := h.mon.Subscribe() // never read until the end
	fast, _ := h.mon.Subscribe()
	h.start()
	var seen []netmonitor.State
	for i, probe := range []func(context.Context) error{ok, fail, ok, fail, ok, fail} {
		tm := h.round(probe, interval)
		seen = append(seen, nextEvent(t, fast).State)
		if i < 5 {
			tm.fire()
		}
	}
	require.Equal(t, []netmonitor.State{
		netmonitor.Online, netmonitor.Offline, netmonitor.Online,
		netmonitor.Offline, netmonitor.Online, netmonitor.Offline,
	}, seen)

	// The slow subscriber kept the loop waiting for nothing, and now reads
	// the latest decision; the gap in Seq tells it what it missed.
	ev := nextEvent(t, slow)
	require.Equal(t, netmonitor.Offline, ev.State)
	require.Equal(t, uint64(6), ev.Seq)
	requireNoEvent(t, slow)
}

func TestLateSubscriberStartsWithCurrentState(t *testing.T) {
	h := newHarness(t, nil)
	h.start()
	h.round(ok, interval)
	require.Equal(t, netmonitor.Online, h.mon.Current())

	events, unsubscribe := h.mon.Subscribe()
	ev := nextEvent(t, events)
	require.Equal(t, netmonitor.Online, ev.State)
	require.Equal(t, uint64(1), ev.Seq)

	unsubscribe()
	unsubscribe()
	requireClosed(t, events)
}

func TestWait(t *testing.T) {
	h := newHarness(t, nil)
	h.start()
	waited := make(chan error, 1)
	go func() { waited <- h.mon.Wait(context.Background(), netmonitor.Online) }()
	h.round(ok, interval)
	select {
	case err := <-waited:
		require.NoError(t, err)
	case <-time.After(guard):
		t.Fatal("Wait did not return after the monitor went online")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, h.mon.Wait(ctx, netmonitor.Offline), context.Canceled)
	require.NoError(t, h.mon.Wait(ctx, netmonitor.Online), "already online")

	h.mon.Close()
	require.ErrorIs(t, h.mon.Wait(context.Background(), netmonitor.Offline), netmonitor.ErrClosed)
}

func TestCloseWaitsAndIsIdempotent(t *testing.T) {
	h := newHarness(t, nil)
	events, _ := h.mon.Subscribe()
	h.start()
	var returned atomic.Bool
	h.answer(func(ctx context.Context) error {
		<-ctx.Done()
		returned.Store(true)
		return ctx.Err()
	})

	h.mon.Close()
	require.True(t, returned.Load(), "Close returned before the running probe did")
	requireClosed(t, events)
	h.mon.Close()

	require.ErrorIs(t, h.mon.Start(context.Background()), netmonitor.ErrClosed)
	late, _ := h.mon.Subscribe()
	requireClosed(t, late)
	require.Equal(t, netmonitor.Unknown, h.mon.Current(), "the interrupted probe decided nothing")
}

func TestStartContextStopsTheLoop(t *testing.T) {
	h := newHarness(t, nil)
	events, _ := h.mon.Subscribe()
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, h.mon.Start(ctx))
	require.Error(t, h.mon.Start(ctx), "second Start")
	h.round(ok, interval)
	nextEvent(t, events)

	cancel()
	requireClosed(t, events)
	require.ErrorIs(t, h.mon.Wait(context.Background(), netmonitor.Offline), netmonitor.ErrClosed)
}

func TestCloseBeforeStart(t *testing.T) {
	h := newHarness(t, nil)
	events, _ := h.mon.Subscribe()
	h.mon.Close()
	requireClosed(t, events)
	require.ErrorIs(t, h.mon.Start(context.Background()), netmonitor.ErrClosed)
	require.Zero(t, h.calls.Load())
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, func(c *netmonitor.Config) {
		c.Registerer = reg
		c.FailureThreshold = 1
	})
	h.start()
	h.round(ok, interval).fire()
	h.round(fail, interval)

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP syncd_client_network_online 1 when the network monitor reports online, 0 when offline or not yet decided.
# TYPE syncd_client_network_online gauge
syncd_client_network_online 0
# HELP syncd_client_network_transitions_total State decisions of the network monitor, including the first one, by new state.
# TYPE syncd_client_network_transitions_total counter
syncd_client_network_transitions_total{to="offline"} 1
syncd_client_network_transitions_total{to="online"} 1
# HELP syncd_client_probe_total Reachability probes by result (a timeout or panic is a fail).
# TYPE syncd_client_probe_total counter
syncd_client_probe_total{result="fail"} 1
syncd_client_probe_total{result="ok"} 1
`)))

	// A second monitor on the same registry must be told apart, and
	// Prometheus wants the same label names on both, so each gets a label.
	_, err := netmonitor.New(netmonitor.Config{Probe: ok, Registerer: reg})
	require.Error(t, err)
	shared := prometheus.NewRegistry()
	for _, name := range []string{"a", "b"} {
		_, err = netmonitor.New(netmonitor.Config{
			Probe:      ok,
			Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"client": name}, shared),
		})
		require.NoError(t, err)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  netmonitor.Config
	}{
		{"no probe", netmonitor.Config{}},
		{"negative interval", netmonitor.Config{Probe: ok, Interval: -time.Second}},
		{"negative timeout", netmonitor.Config{Probe: ok, Timeout: -time.Second}},
		{"negative threshold", netmonitor.Config{Probe: ok, FailureThreshold: -1}},
		{"confirm beyond interval", netmonitor.Config{Probe: ok, Interval: time.Second, ConfirmInterval: 2 * time.Second}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := netmonitor.New(tt.cfg)
			require.Error(t, err)
		})
	}
	_, err := netmonitor.New(netmonitor.Config{Probe: ok, Interval: 500 * time.Millisecond})
	require.NoError(t, err, "a short Interval caps the default ConfirmInterval")
}

// While Offline the monitor probes every OfflineInterval, jittered into
// [OfflineInterval/2, OfflineInterval], so a returning server is noticed
// within two offline waits and devices do not probe it in step.
func TestOfflineCadence(t *testing.T) {
	const offline = 400 * time.Millisecond
	var draws []int64
	h := newHarness(t, func(c *netmonitor.Config) {
		c.OfflineInterval = offline
		c.Rand = func(n int64) int64 {
			draws = append(draws, n)
			return []int64{0, n - 1, n / 2}[len(draws)%3]
		}
	})
	events, unsubscribe := h.mon.Subscribe()
	defer unsubscribe()
	h.start()
	// The first probe decides offline at once; every wait from there is an
	// offline one, drawn in [offline/2, offline] (the draws: top, middle,
	// bottom), until the second success decides online.
	h.round(fail, offline).fire()
	require.Equal(t, netmonitor.Offline, nextEvent(t, events).State)
	h.round(fail, offline*3/4).fire()
	h.round(ok, offline/2).fire()
	h.round(ok, interval)
	require.Equal(t, netmonitor.Online, nextEvent(t, events).State)
	for _, n := range draws {
		require.Equal(t, int64(offline/2)+1, n, "the jitter spans half the offline interval")
	}
}
