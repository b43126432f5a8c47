package server

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/syncproto"
)

// The service level objectives' defaults (Config.SLOObjective,
// Config.SLOPushLatency).
const (
	// DefaultSLOObjective is the share of good events each SLI aims for:
	// 99.9%, an error budget of 0.1%.
	DefaultSLOObjective = 0.999
	// DefaultSLOPushLatency is the push ack latency SLI's threshold: a
	// push answered later than this is a bad event.
	DefaultSLOPushLatency = 500 * time.Millisecond
)

// The SLIs, as the sli label of the syncd_slo_* metrics.
const (
	// sliPushAvailability: every push answered; bad when the answer is
	// internal (the server failed) or unavailability (shutting_down,
	// server_busy). A refusal of the client's own making (a bad
	// mutation, rate_limited) is a good answer.
	sliPushAvailability = "push_availability"
	// sliPushLatency: every push answered with push_result; bad when it
	// took longer than the threshold from its arrival to its answer.
	sliPushLatency = "push_latency"
)

// sloMetrics counts the SLIs' events. Prometheus rules turn them into
// error ratios, burn rates per window and the budget remaining
// (docs/alerts/syncd.rules.yml); the objective is exported so the rules
// read it rather than repeat it.
type sloMetrics struct {
	threshold time.Duration
	events    *prometheus.CounterVec // sli
	bad       *prometheus.CounterVec // sli, reason
}

// newSLOMetrics registers the SLO metrics for objective (0: the default;
// else in (0, 1)) and the push latency threshold (0: the default; else
// positive).
func newSLOMetrics(reg prometheus.Registerer, objective float64, threshold time.Duration) (*sloMetrics, error) {
	if objective == 0 {
		objective = DefaultSLOObjective
	}
	if threshold == 0 {
		threshold = DefaultSLOPushLatency
	}
	if !(objective > 0 && objective < 1) {
		return nil, fmt.Errorf("SLO objective %g: want a ratio strictly between 0 and 1 (0.999 is 99.9%%)", objective)
	}
	if threshold < 0 {
		return nil, fmt.Errorf("SLO push latency threshold %s: want a positive duration", threshold)
	}
	m := &sloMetrics{
		threshold: threshold,
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_slo_events_total",
			Help: "Events of each service level indicator (push_availability: pushes answered; push_latency: pushes answered with push_result).",
		}, []string{"sli"}),
		bad: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_slo_bad_events_total",
			Help: "Bad events of each SLI, by reason (push_availability: internal, unavailable; push_latency: slow).",
		}, []string{"sli", "reason"}),
	}
	obj := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "syncd_slo_objective_ratio",
		Help: "The objective of each SLI: the share of its events that should be good (--slo-objective).",
	}, []string{"sli"})
	thr := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "syncd_slo_push_latency_threshold_seconds",
		Help: "A push answered later than this after its arrival is a bad event of the push_latency SLI (--slo-push-latency).",
	})
	thr.Set(threshold.Seconds())
	for _, sli := range []string{sliPushAvailability, sliPushLatency} {
		obj.WithLabelValues(sli).Set(objective)
		m.events.WithLabelValues(sli)
	}
	m.bad.WithLabelValues(sliPushAvailability, "internal")
	m.bad.WithLabelValues(sliPushAvailability, "unavailable")
	m.bad.WithLabelValues(sliPushLatency, "slow")
	for _, c := range []prometheus.Collector{m.events, m.bad, obj, thr} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// answered counts one push answered with msg, took after its arrival.
func (m *sloMetrics) answered(msg syncproto.Message, took time.Duration) {
	m.events.WithLabelValues(sliPushAvailability).Inc()
	if e, ok := msg.(*syncproto.Error); ok {
		switch e.Code {
		case syncproto.CodeInternal:
			m.bad.WithLabelValues(sliPushAvailability, "internal").Inc()
		case syncproto.CodeShuttingDown, syncproto.CodeServerBusy:
			m.bad.WithLabelValues(sliPushAvailability, "unavailable").Inc()
		}
		return
	}
	m.events.WithLabelValues(sliPushLatency).Inc()
	if took > m.threshold {
		m.bad.WithLabelValues(sliPushLatency, "slow").Inc()
	}
}
