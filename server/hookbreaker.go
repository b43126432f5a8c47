package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// breakerMetrics exports the conflict hooks' circuit breakers. Its model
// label is bounded by the configuration: it takes only the names of models
// declared with the hook policy, and replication.AnyModel ("*") for the
// breaker that undeclared models share when the default policy is hook.
type breakerMetrics struct {
	resolver    *replication.Resolver
	state       *prometheus.Desc
	transitions *prometheus.CounterVec // model, to
	refusals    *prometheus.CounterVec // model
}

func newBreakerMetrics() *breakerMetrics {
	return &breakerMetrics{
		state: prometheus.NewDesc("syncd_hook_breaker_state",
			"Each conflict hook breaker's state: 0 closed, 1 open, 2 half-open; model is a model declared with the hook policy, or * for undeclared models.",
			[]string{"model"}, nil),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_hook_breaker_transitions_total",
			Help: "Conflict hook breaker transitions, by model and the state entered (closed, open, half_open).",
		}, []string{"model", "to"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_hook_breaker_refusals_total",
			Help: "Writes refused hook_unavailable (retryable) because their model's conflict hook breaker was open.",
		}, []string{"model"}),
	}
}

// transition is the resolver's OnBreaker callback.
func (m *breakerMetrics) transition(model string, t replication.BreakerTransition) {
	m.transitions.WithLabelValues(model, t.To.String()).Inc()
}

// register adds the breakers' metrics to reg once the resolver exists,
// with every declared breaker's series present from the start.
func (m *breakerMetrics) register(reg prometheus.Registerer, r *replication.Resolver) error {
	m.resolver = r
	for _, b := range r.Breakers() {
		m.refusals.WithLabelValues(b.Model)
		for _, to := range []replication.BreakerState{replication.BreakerClosed, replication.BreakerOpen, replication.BreakerHalfOpen} {
			m.transitions.WithLabelValues(b.Model, to.String())
		}
	}
	for _, c := range []prometheus.Collector{m, m.transitions, m.refusals} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// countRefusals counts the writes of b refused because a breaker was open.
func (m *breakerMetrics) countRefusals(b *replication.Batch, breakerOf func(model string) string) {
	for _, w := range b.Writes {
		if w.Refusal != nil && w.Refusal.Code == syncproto.CodeHookUnavailable {
			m.refusals.WithLabelValues(breakerOf(w.Mutation.Model)).Inc()
		}
	}
}

func (m *breakerMetrics) Describe(ch chan<- *prometheus.Desc) { ch <- m.state }

func (m *breakerMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, b := range m.resolver.Breakers() {
		ch <- prometheus.MustNewConstMetric(m.state, prometheus.GaugeValue, float64(b.State), b.Model)
	}
}
