package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncproto"
)

// TestSLOCountsGoodAndSlowPushes: every push answered is a push
// availability event; every push_result a push latency event, bad when
// the push took longer than the threshold (here, a hook that takes four
// times the threshold; the fast pushes are not asserted fast, as no test
// asserts on wall-clock time); the objective and threshold are exported for the rules.
func TestSLOCountsGoodAndSlowPushes(t *testing.T) {
	slowHook := func(ctx context.Context, _ replication.Record, _ bool, _ replication.Proposal) (replication.HookResult, error) {
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
		return replication.Accept(), nil
	}
	ts := startServer(t, server.Config{
		Policies:       replication.Config{"slow": syncproto.PolicyHook},
		Hook:           slowHook,
		HookTimeout:    time.Minute,
		SLOObjective:   0.995,
		SLOPushLatency: 50 * time.Millisecond,
	})
	c, clock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	metric := func(series string) float64 { return ts.MetricValue(t, series) }

	require.Equal(t, 0.995, metric(`syncd_slo_objective_ratio{sli="push_availability"}`))
	require.Equal(t, 0.995, metric(`syncd_slo_objective_ratio{sli="push_latency"}`))
	require.Equal(t, 0.05, metric(`syncd_slo_push_latency_threshold_seconds`))

	for range 3 {
		requireApplied(t, c.push(newOpID(t), put(t, clock, "fast", "k", `1`)))
	}
	require.Equal(t, 3.0, metric(`syncd_slo_events_total{sli="push_availability"}`))
	require.Equal(t, 3.0, metric(`syncd_slo_events_total{sli="push_latency"}`))
	slowBefore := metric(`syncd_slo_bad_events_total{reason="slow",sli="push_latency"}`)

	for range 2 {
		requireApplied(t, c.push(newOpID(t), put(t, clock, "slow", "k", `1`)))
	}
	require.Equal(t, 5.0, metric(`syncd_slo_events_total{sli="push_latency"}`))
	require.Equal(t, slowBefore+2, metric(`syncd_slo_bad_events_total{reason="slow",sli="push_latency"}`),
		"a push held 200 ms by its hook is slower than the 50 ms threshold")
	require.Zero(t, metric(`syncd_slo_bad_events_total{reason="internal",sli="push_availability"}`))
	require.Zero(t, metric(`syncd_slo_bad_events_total{reason="unavailable",sli="push_availability"}`))
}

// TestSLOObjectiveIsValidated: an objective outside (0, 1) or a negative
// threshold is a configuration error at New.
func TestSLOObjectiveIsValidated(t *testing.T) {
	for _, cfg := range []server.Config{{SLOObjective: 1}, {SLOObjective: 99.9}, {SLOObjective: -0.5}, {SLOPushLatency: -time.Second}} {
		_, err := newUnserved(t, cfg)
		require.ErrorContains(t, err, "SLO", "%+v", cfg)
	}
}
