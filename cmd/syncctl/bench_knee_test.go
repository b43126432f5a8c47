package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
)

// TestKneeSearchBracketsThenHalves drives the search against a knee at a
// known rate: it doubles to bracket it, then bisects to within 10%.
func TestKneeSearchBracketsThenHalves(t *testing.T) {
	const floor = 0.4 // kneeMinPushes in a 10 s run
	for _, knee := range []float64{0.05, 1, 3, 37.5, 900, benchMaxRate} {
		s := kneeSearch{min: floor, max: benchMaxRate}
		rate, runs := 1.0, 0
		for more := true; more; runs++ {
			require.Less(t, runs, 40, "the search ends")
			rate, more = s.next(rate, rate <= knee)
		}
		require.LessOrEqual(t, s.pass, knee)
		if knee < floor {
			require.Zero(t, s.pass, "knee %g: nothing passes", knee)
			require.Equal(t, floor, s.fail, "knee %g: the search stops at its floor", knee)
		} else {
			require.Positive(t, s.pass, "knee %g", knee)
			if s.fail > 0 {
				require.LessOrEqual(t, s.fail-s.pass, kneePrecision*s.pass, "knee %g: the interval is narrow", knee)
			}
		}
		require.LessOrEqual(t, runs, kneeMaxRuns+4, "knee %g: a dozen runs suffice", knee)
	}
}

// TestBenchFindsAKneeAgainstARealServer runs a bounded search against a
// real syncd with targets every run meets: the report lists each run and
// names the highest as the knee.
func TestBenchFindsAKneeAgainstARealServer(t *testing.T) {
	s := syncdtest.Start(t, server.Config{})
	clients := benchClients(t, s, 6)
	c := newCLI(t, map[string]string{"SYNCCTL_SYNC_URL": s.URL})

	var rep kneeReport
	decodeStrict(t, c.ok("bench", "--clients", clients, "--connections", "6", "--push-share", "0.5", "--batch", "2",
		"--find-knee", "--rate", "20", "--knee-ack-p99", "10s", "--knee-delivery-p99", "10s",
		"--duration", "150ms", "--drain", "10s", "--json"), &rep)
	require.NotEmpty(t, rep.Trials)
	require.LessOrEqual(t, len(rep.Trials), kneeMaxRuns)
	require.Equal(t, 20.0, rep.Trials[0].Rate)
	var best *kneeTrial
	for i, tr := range rep.Trials {
		want := tr.MutationsPerSec > 0 && tr.AckP99 < 10_000 && tr.DeliveryP99 < 10_000 && tr.Missing == 0 && tr.Errors == 0
		require.Equal(t, want, tr.Passed, "trial %d judged by the targets: %+v", i, tr)
		if tr.Passed && (best == nil || tr.Rate > best.Rate) {
			best = &rep.Trials[i]
		}
	}
	require.Equal(t, best, rep.Knee, "the knee is the fastest run that met the targets")

	// A target no run can meet: the search goes down and reports no knee.
	rep = kneeReport{}
	decodeStrict(t, c.ok("bench", "--clients", clients, "--connections", "2", "--push-share", "1", "--batch", "1",
		"--find-knee", "--rate", "0.05", "--knee-ack-p99", "1ns", "--duration", "100ms", "--drain", "10s", "--json"), &rep)
	require.Nil(t, rep.Knee)
	require.NotEmpty(t, rep.Trials)
	for _, tr := range rep.Trials {
		require.False(t, tr.Passed)
	}
	out := c.ok("bench", "--clients", clients, "--connections", "2", "--push-share", "1", "--batch", "1",
		"--find-knee", "--rate", "0.05", "--knee-ack-p99", "1ns", "--duration", "100ms", "--drain", "10s")
	require.Contains(t, out, "knee: no rate met the targets")
}
