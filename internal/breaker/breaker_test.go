package breaker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/breaker"
)

// step is one input to a breaker and what it must answer.
type step struct {
	at      time.Duration // since the start of the test
	call    bool          // Allow, then (when admitted and not hold) Record ok
	ok      bool
	n       int  // repeat the call n times (0 means once)
	hold    bool // Allow only: keep the ticket in held
	finish  int  // Record the held ticket number finish-1 with ok (0: none)
	release int  // Release the held ticket number release-1 (0: none)

	wantAllowed bool
	wantState   breaker.State
	wantMove    *breaker.Transition
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestTransitions(t *testing.T) {
	cases := []struct {
		name  string
		cfg   breaker.Config
		steps []step
	}{
		{
			name: "closed stays closed below both thresholds",
			steps: []step{
				{call: true, ok: true, n: 10, wantAllowed: true, wantState: breaker.Closed},
				{call: true, ok: false, n: 9, wantAllowed: true, wantState: breaker.Closed},
			},
		},
		{
			name: "closed opens at 50% of at least 10 calls",
			steps: []step{
				{call: true, ok: true, n: 5, wantAllowed: true, wantState: breaker.Closed},
				{call: true, ok: false, n: 4, wantAllowed: true, wantState: breaker.Closed},
				{call: true, ok: false, wantAllowed: true, wantState: breaker.Open,
					wantMove: &breaker.Transition{From: breaker.Closed, To: breaker.Open, Calls: 10, Failures: 5}},
			},
		},
		{
			name: "fewer than min calls never open on the ratio",
			steps: []step{
				{call: true, ok: false, n: 9, wantAllowed: true, wantState: breaker.Closed},
			},
		},
		{
			name: "20 failures open whatever the ratio",
			cfg:  breaker.Config{FailureRatio: 1},
			steps: []step{
				{call: true, ok: true, n: 100, wantAllowed: true, wantState: breaker.Closed},
				{call: true, ok: false, n: 19, wantAllowed: true, wantState: breaker.Closed},
				{call: true, ok: false, wantAllowed: true, wantState: breaker.Open,
					wantMove: &breaker.Transition{From: breaker.Closed, To: breaker.Open, Calls: 120, Failures: 20}},
			},
		},
		{
			name: "failures older than the window are forgotten",
			steps: []step{
				{call: true, ok: false, n: 9, wantAllowed: true, wantState: breaker.Closed},
				{at: 11 * time.Second, call: true, ok: false, wantAllowed: true, wantState: breaker.Closed},
				{at: 11 * time.Second, call: true, ok: true, n: 8, wantAllowed: true, wantState: breaker.Closed},
			},
		},
		{
			name: "open refuses until open-for has passed, then half-opens",
			steps: []step{
				{call: true, ok: false, n: 10, wantAllowed: true, wantState: breaker.Open},
				{at: 29 * time.Second, call: true, wantAllowed: false, wantState: breaker.Open},
				{at: 30 * time.Second, call: true, hold: true, wantAllowed: true, wantState: breaker.HalfOpen,
					wantMove: &breaker.Transition{From: breaker.Open, To: breaker.HalfOpen}},
			},
		},
		{
			name: "half-open lets 3 probes through and closes on 3 successes",
			steps: []step{
				{call: true, ok: false, n: 10, wantAllowed: true, wantState: breaker.Open},
				{at: 30 * time.Second, call: true, hold: true, n: 3, wantAllowed: true, wantState: breaker.HalfOpen},
				{at: 30 * time.Second, call: true, wantAllowed: false, wantState: breaker.HalfOpen},
				{at: 31 * time.Second, finish: 1, ok: true, wantState: breaker.HalfOpen},
				{at: 31 * time.Second, call: true, wantAllowed: false, wantState: breaker.HalfOpen},
				{at: 31 * time.Second, finish: 2, ok: true, wantState: breaker.HalfOpen},
				{at: 31 * time.Second, finish: 3, ok: true, wantState: breaker.Closed,
					wantMove: &breaker.Transition{From: breaker.HalfOpen, To: breaker.Closed}},
				{at: 31 * time.Second, call: true, ok: false, n: 9, wantAllowed: true, wantState: breaker.Closed},
			},
		},
		{
			name: "one failed probe reopens for another open-for",
			steps: []step{
				{call: true, ok: false, n: 10, wantAllowed: true, wantState: breaker.Open},
				{at: 30 * time.Second, call: true, hold: true, n: 2, wantAllowed: true, wantState: breaker.HalfOpen},
				{at: 30 * time.Second, finish: 1, ok: true, wantState: breaker.HalfOpen},
				{at: 31 * time.Second, finish: 2, ok: false, wantState: breaker.Open,
					wantMove: &breaker.Transition{From: breaker.HalfOpen, To: breaker.Open}},
				{at: 60 * time.Second, call: true, wantAllowed: false, wantState: breaker.Open},
				{at: 61 * time.Second, call: true, ok: true, wantAllowed: true, wantState: breaker.HalfOpen},
			},
		},
		{
			name: "a released probe frees its slot and counts nothing",
			steps: []step{
				{call: true, ok: false, n: 10, wantAllowed: true, wantState: breaker.Open},
				{at: 30 * time.Second, call: true, hold: true, n: 3, wantAllowed: true, wantState: breaker.HalfOpen},
				{at: 30 * time.Second, release: 1, wantState: breaker.HalfOpen},
				{at: 30 * time.Second, call: true, ok: true, wantAllowed: true, wantState: breaker.HalfOpen},
			},
		},
		{
			name: "a late outcome from before the last transition is ignored",
			steps: []step{
				{call: true, hold: true, wantAllowed: true, wantState: breaker.Closed},
				{call: true, ok: false, n: 10, wantAllowed: true, wantState: breaker.Open},
				{at: 30 * time.Second, call: true, ok: true, n: 2, wantAllowed: true, wantState: breaker.HalfOpen},
				{at: 30 * time.Second, finish: 1, ok: false, wantState: breaker.HalfOpen},
				{at: 30 * time.Second, call: true, ok: true, wantAllowed: true, wantState: breaker.Closed},
			},
		},
		{
			name: "configured numbers replace the defaults",
			cfg:  breaker.Config{MaxFailures: 2, MinCalls: 100, OpenFor: time.Second, Probes: 1},
			steps: []step{
				{call: true, ok: false, n: 2, wantAllowed: true, wantState: breaker.Open},
				{at: time.Second, call: true, ok: true, wantAllowed: true, wantState: breaker.Closed},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := breaker.New(tc.cfg)
			require.NoError(t, err)
			var held []breaker.Ticket
			var moves []breaker.Transition
			note := func(tr breaker.Transition) {
				if tr.Changed() {
					moves = append(moves, tr)
				}
			}
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				before := len(moves)
				for range max(s.n, 1) {
					switch {
					case s.call:
						tk, allowed, tr := b.Allow(now)
						note(tr)
						require.Equal(t, s.wantAllowed, allowed, "step %d: allowed", i)
						if !allowed {
							continue
						}
						if s.hold {
							held = append(held, tk)
							continue
						}
						note(b.Record(now, tk, s.ok))
					case s.finish > 0:
						note(b.Record(now, held[s.finish-1], s.ok))
					case s.release > 0:
						b.Release(held[s.release-1])
					}
				}
				require.Equal(t, s.wantState, b.State(now), "step %d: state", i)
				if s.wantMove != nil {
					require.Contains(t, moves[before:], *s.wantMove, "step %d: transition", i)
				}
			}
		})
	}
}

func TestStateReportsHalfOpenOnceOpenForHasPassed(t *testing.T) {
	b, err := breaker.New(breaker.Config{MaxFailures: 1})
	require.NoError(t, err)
	tk, ok, _ := b.Allow(t0)
	require.True(t, ok)
	b.Record(t0, tk, false)
	require.Equal(t, breaker.Open, b.State(t0.Add(29*time.Second)))
	require.Equal(t, breaker.HalfOpen, b.State(t0.Add(30*time.Second)))
	calls, failures := b.Counts(t0)
	require.Zero(t, calls+failures, "an open breaker counts nothing")
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []breaker.Config{
		{FailureRatio: 1.5},
		{FailureRatio: -0.1},
		{MaxFailures: -1},
		{MinCalls: -1},
		{Probes: -1},
		{OpenFor: -time.Second},
		{Window: time.Millisecond},
	} {
		_, err := breaker.New(cfg)
		require.True(t, errors.Is(err, breaker.ErrConfig), "%+v: %v", cfg, err)
	}
	b, err := breaker.New(breaker.Config{})
	require.NoError(t, err)
	require.Equal(t, breaker.Config{Window: 10 * time.Second, MaxFailures: 20, MinCalls: 10, FailureRatio: 0.5,
		OpenFor: 30 * time.Second, Probes: 3}, b.Config())
}

func TestStateNames(t *testing.T) {
	for s, want := range map[breaker.State]string{breaker.Closed: "closed", breaker.Open: "open", breaker.HalfOpen: "half_open", 7: "state(7)"} {
		got, _ := s.MarshalText()
		require.Equal(t, want, string(got))
		if s <= breaker.HalfOpen {
			var back breaker.State
			require.NoError(t, back.UnmarshalText(got))
			require.Equal(t, s, back)
		}
	}
	var s breaker.State
	require.Error(t, s.UnmarshalText([]byte("ajar")))
}
