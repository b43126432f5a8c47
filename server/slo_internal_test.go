package server

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/syncproto"
)

// TestSLOAnswersAreClassified: the server's failures (internal) and its
// unavailability (shutting_down, server_busy) are bad availability
// events; refusals of the client's own making are good; only push_result
// answers are latency events, bad beyond the threshold.
func TestSLOAnswersAreClassified(t *testing.T) {
	m, err := newSLOMetrics(prometheus.NewRegistry(), 0, time.Second)
	require.NoError(t, err)
	for _, a := range []struct {
		msg  syncproto.Message
		took time.Duration
	}{
		{syncproto.Errorf(syncproto.CodeInternal, "x"), 0},
		{syncproto.Errorf(syncproto.CodeShuttingDown, "x"), 0},
		{syncproto.Errorf(syncproto.CodeServerBusy, "x"), 0},
		{syncproto.Errorf(syncproto.CodeRateLimited, "x"), 0},
		{syncproto.Errorf(syncproto.CodeBatchTooLarge, "x"), 0},
		{&syncproto.PushResult{ID: "p1"}, time.Second},
		{&syncproto.PushResult{ID: "p2"}, time.Second + time.Millisecond},
	} {
		m.answered(a.msg, a.took)
	}
	require.Equal(t, 7.0, testutil.ToFloat64(m.events.WithLabelValues(sliPushAvailability)))
	require.Equal(t, 1.0, testutil.ToFloat64(m.bad.WithLabelValues(sliPushAvailability, "internal")))
	require.Equal(t, 2.0, testutil.ToFloat64(m.bad.WithLabelValues(sliPushAvailability, "unavailable")))
	require.Equal(t, 2.0, testutil.ToFloat64(m.events.WithLabelValues(sliPushLatency)))
	require.Equal(t, 1.0, testutil.ToFloat64(m.bad.WithLabelValues(sliPushLatency, "slow")))
}
