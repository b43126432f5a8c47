package reconnect

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSequence drives the decision core with scripts and checks the
// transcript of actions and the outcome. Each script token answers the
// pending action:
//
//	for a step:  ok | fail            the step returned nil / an error
//	             cut-ok | cut-fail    it returned nil / an error, and the context had ended
//	             skip                 the context had ended before the step was called
//	for a wait:  elapsed | cut        the wait elapsed / the context ended during it
func TestSequence(t *testing.T) {
	ms := time.Millisecond
	errStep := errors.New("step failed")
	cause := errors.New("offline")

	tests := []struct {
		name       string
		max        int
		script     string
		transcript string
		want       Outcome // Err checked separately
		wantErr    string  // "" none, "cause", or the failed step's name
	}{
		{
			name:       "all steps in order",
			script:     "ok ok ok ok",
			transcript: "reconnect activate bind replay",
			want:       Outcome{Result: Reconnected, Attempts: 1, Step: StepReplay, ReplayRan: true},
		},
		{
			name:       "reconnect failures back off exponentially",
			script:     "fail elapsed fail elapsed fail elapsed ok ok ok ok",
			transcript: "reconnect wait=100ms reconnect wait=200ms reconnect wait=300ms reconnect activate bind replay",
			want:       Outcome{Result: Reconnected, Attempts: 4, Step: StepReplay, ReplayRan: true},
		},
		{
			name:       "activate failure starts over at reconnect",
			script:     "ok fail elapsed ok ok ok ok",
			transcript: "reconnect activate wait=100ms reconnect activate bind replay",
			want:       Outcome{Result: Reconnected, Attempts: 2, Step: StepReplay, ReplayRan: true},
		},
		{
			name:       "bind failure starts over at reconnect",
			script:     "ok ok fail elapsed ok ok ok ok",
			transcript: "reconnect activate bind wait=100ms reconnect activate bind replay",
			want:       Outcome{Result: Reconnected, Attempts: 2, Step: StepReplay, ReplayRan: true},
		},
		{
			name:       "gives up after max attempts without a last wait",
			max:        3,
			script:     "fail elapsed ok fail elapsed ok ok fail",
			transcript: "reconnect wait=100ms reconnect activate wait=200ms reconnect activate bind",
			want:       Outcome{Result: GaveUp, Attempts: 3, Step: StepBind},
			wantErr:    "bind",
		},
		{
			name:       "cancelled during a backoff wait",
			script:     "fail cut",
			transcript: "reconnect wait=100ms",
			want:       Outcome{Result: Aborted, Attempts: 1, Step: StepReconnect},
			wantErr:    "cause",
		},
		{
			name:       "cancelled before the first step",
			script:     "skip",
			transcript: "reconnect",
			want:       Outcome{Result: Aborted},
			wantErr:    "cause",
		},
		{
			name:       "cancelled between bind and replay: replay never called",
			script:     "ok ok ok skip",
			transcript: "reconnect activate bind replay",
			want:       Outcome{Result: Aborted, Attempts: 1, Step: StepBind},
			wantErr:    "cause",
		},
		{
			name:       "bind succeeded as the context ended: no replay",
			script:     "ok ok cut-ok",
			transcript: "reconnect activate bind",
			want:       Outcome{Result: Aborted, Attempts: 1, Step: StepBind},
			wantErr:    "cause",
		},
		{
			name:       "a step failing because it was cancelled is not retried",
			script:     "cut-fail",
			transcript: "reconnect",
			want:       Outcome{Result: Aborted, Attempts: 1, Step: StepReconnect},
			wantErr:    "cause",
		},
		{
			name:       "replay failure is reported, not retried",
			script:     "ok ok ok fail",
			transcript: "reconnect activate bind replay",
			want:       Outcome{Result: Reconnected, Attempts: 1, Step: StepReplay, ReplayRan: true, ReplayErr: errStep},
		},
		{
			name:       "replay cut short",
			script:     "ok ok ok cut-fail",
			transcript: "reconnect activate bind replay",
			want:       Outcome{Result: Aborted, Attempts: 1, Step: StepReplay, ReplayRan: true, ReplayErr: errStep},
			wantErr:    "cause",
		},
		{
			name:       "replay finished as the context ended",
			script:     "ok ok ok cut-ok",
			transcript: "reconnect activate bind replay",
			want:       Outcome{Result: Reconnected, Attempts: 1, Step: StepReplay, ReplayRan: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := sequence{
				backoff:     Backoff{Base: 100 * ms, Cap: 300 * ms, Rand: func(n int64) int64 { return n - 1 }},
				maxAttempts: tt.max,
			}
			tokens := strings.Fields(tt.script)
			next := func() string {
				require.NotEmpty(t, tokens, "script ran out")
				tok := tokens[0]
				tokens = tokens[1:]
				return tok
			}
			var transcript []string
			act := s.begin()
			for act.kind != doneRun {
				switch act.kind {
				case doStep:
					transcript = append(transcript, act.step.String())
					switch tok := next(); tok {
					case "ok":
						act = s.stepReturned(nil, nil)
					case "fail":
						act = s.stepReturned(errStep, nil)
					case "cut-ok":
						act = s.stepReturned(nil, cause)
					case "cut-fail":
						act = s.stepReturned(errStep, cause)
					case "skip":
						act = s.cancelled(cause)
					default:
						t.Fatalf("token %q answers no step", tok)
					}
				case doWait:
					transcript = append(transcript, "wait="+act.delay.String())
					switch tok := next(); tok {
					case "elapsed":
						act = s.waited()
					case "cut":
						act = s.cancelled(cause)
					default:
						t.Fatalf("token %q answers no wait", tok)
					}
				}
			}
			require.Empty(t, tokens, "script left over")
			require.Equal(t, tt.transcript, strings.Join(transcript, " "))

			got := act.outcome
			switch tt.wantErr {
			case "":
				require.NoError(t, got.Err)
			case "cause":
				require.Equal(t, cause, got.Err)
			default:
				var se *StepError
				require.ErrorAs(t, got.Err, &se)
				require.Equal(t, tt.wantErr, se.Step.String())
				require.Equal(t, got.Attempts, se.Attempt)
				require.ErrorIs(t, got.Err, errStep)
			}
			got.Err = nil
			require.Equal(t, tt.want, got)
			if got.Result == Reconnected {
				require.True(t, got.ReplayRan, "Reconnected without a replay")
			}
		})
	}
}

func TestOutcomeString(t *testing.T) {
	o := Outcome{Result: Aborted, Attempts: 2, Step: StepBind, Err: context.Canceled}
	require.Equal(t, "aborted after 2 attempt(s), last step bind, replay did not run: context canceled", o.String())
	o = Outcome{Result: Reconnected, Attempts: 1, Step: StepReplay, ReplayRan: true}
	require.Equal(t, "reconnected after 1 attempt(s), last step replay, replay completed", o.String())
	require.True(t, o.Synced())
	o.ReplayErr = errors.New("queue closed")
	require.Equal(t, "reconnected after 1 attempt(s), last step replay, replay failed: queue closed", o.String())
	require.False(t, o.Synced())
}

type hinted time.Duration

func (h hinted) Error() string            { return "busy" }
func (h hinted) RetryHint() time.Duration { return time.Duration(h) }

// A failed attempt whose error carries the server's retry hint waits at
// least the hint (capped by MaxRetryHint) and at most twice it, never less
// than half the backoff's ceiling (Backoff.Wait).
func TestRetryHintHoldsTheNextAttempt(t *testing.T) {
	for _, tc := range []struct {
		hint, low, high time.Duration
	}{
		{5 * time.Second, 5 * time.Second, 10 * time.Second},
		{time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond}, // the backoff is longer
		{time.Hour, MaxRetryHint, 2 * MaxRetryHint},
	} {
		for _, r := range []struct {
			pick func(int64) int64
			want time.Duration
		}{{func(int64) int64 { return 0 }, tc.low}, {func(n int64) int64 { return n - 1 }, tc.high}} {
			s := sequence{backoff: Backoff{Base: 100 * time.Millisecond, Cap: 300 * time.Millisecond, Rand: r.pick}}
			s.begin()
			act := s.stepReturned(fmt.Errorf("dial: %w", hinted(tc.hint)), nil)
			require.Equal(t, doWait, act.kind)
			require.Equal(t, r.want, act.delay, "hint %v", tc.hint)
		}
	}
}
