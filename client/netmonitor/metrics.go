package netmonitor

import "github.com/prometheus/client_golang/prometheus"

// metrics are one monitor's instruments. A nil *metrics records nothing.
type metrics struct {
	online    prometheus.Gauge
	probeOK   prometheus.Counter
	probeFail prometheus.Counter
	toOnline  prometheus.Counter
	toOffline prometheus.Counter
}

// newMetrics registers the metrics listed in doc.go on reg, or returns nil
// when reg is nil.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	online := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "syncd_client_network_online",
		Help: "1 when the network monitor reports online, 0 when offline or not yet decided.",
	})
	probes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncd_client_probe_total",
		Help: "Reachability probes by result (a timeout or panic is a fail).",
	}, []string{"result"})
	transitions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncd_client_network_transitions_total",
		Help: "State decisions of the network monitor, including the first one, by new state.",
	}, []string{"to"})
	for _, c := range []prometheus.Collector{online, probes, transitions} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return &metrics{
		online:    online,
		probeOK:   probes.WithLabelValues("ok"),
		probeFail: probes.WithLabelValues("fail"),
		toOnline:  transitions.WithLabelValues("online"),
		toOffline: transitions.WithLabelValues("offline"),
	}, nil
}

func (m *metrics) probed(err error) {
	if m == nil {
		return
	}
	if err == nil {
		m.probeOK.Inc()
	} else {
		m.probeFail.Inc()
	}
}

func (m *metrics) decided(s State) {
	if m == nil {
		return
	}
	if s == Online {
		m.online.Set(1)
		m.toOnline.Inc()
	} else {
		m.online.Set(0)
		m.toOffline.Inc()
	}
}
