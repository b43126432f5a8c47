package reconnect

import "github.com/prometheus/client_golang/prometheus"

// metrics are one coordinator's instruments. A nil *metrics records nothing.
type metrics struct {
	attempts     prometheus.Counter
	outcomes     *prometheus.CounterVec
	replays      *prometheus.CounterVec
	stepFailures *prometheus.CounterVec
}

// newMetrics registers the metrics listed in doc.go on reg, or returns nil
// when reg is nil. Every label value is created up front, so each series is
// scraped as 0 before its first event.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		attempts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_client_reconnect_attempts_total",
			Help: "Reconnect attempts (calls to the reconnect step).",
		}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_client_reconnect_outcomes_total",
			Help: "Reconnect runs by how they ended.",
		}, []string{"result"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_client_replay_runs_total",
			Help: "Replays started by reconnect runs, by how they ended.",
		}, []string{"result"}),
		stepFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_client_reconnect_step_failures_total",
			Help: "Failed reconnect attempts by the step that failed.",
		}, []string{"step"}),
	}
	for _, c := range []prometheus.Collector{m.attempts, m.outcomes, m.replays, m.stepFailures} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []Result{Reconnected, GaveUp, Aborted} {
		m.outcomes.WithLabelValues(r.String())
	}
	for _, r := range []string{"completed", "failed", "aborted"} {
		m.replays.WithLabelValues(r)
	}
	for _, s := range []Step{StepReconnect, StepActivate, StepBind} {
		m.stepFailures.WithLabelValues(s.String())
	}
	return m, nil
}

func (m *metrics) attempted() {
	if m != nil {
		m.attempts.Inc()
	}
}

func (m *metrics) stepFailed(s Step) {
	if m != nil {
		m.stepFailures.WithLabelValues(s.String()).Inc()
	}
}

func (m *metrics) finished(o Outcome) {
	if m == nil {
		return
	}
	m.outcomes.WithLabelValues(o.Result.String()).Inc()
	if !o.ReplayRan {
		return
	}
	switch {
	case o.ReplayErr == nil:
		m.replays.WithLabelValues("completed").Inc()
	case o.Result == Aborted:
		m.replays.WithLabelValues("aborted").Inc()
	default:
		m.replays.WithLabelValues("failed").Inc()
	}
}
