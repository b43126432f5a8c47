package auth

import "github.com/prometheus/client_golang/prometheus"

// authMetrics are the JWT verifier's and the JWKS cache's metrics
// (docs/metrics.md).
type authMetrics struct {
	verifications   *prometheus.CounterVec
	jwksFetches     *prometheus.CounterVec
	jwksKeys        prometheus.Gauge
	jwksStale       prometheus.Gauge
	jwksLastSuccess prometheus.Gauge
}

func newAuthMetrics(reg prometheus.Registerer) *authMetrics {
	m := &authMetrics{
		verifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_jwt_verifications_total",
			Help: "JWTs presented, by result: ok, or the reason for the refusal.",
		}, []string{"result"}),
		jwksFetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_jwks_fetches_total",
			Help: "JWKS fetches (start, background refresh, unknown kid), by result: ok or error.",
		}, []string{"result"}),
		jwksKeys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_jwks_keys",
			Help: "Signature keys of the JWKS in force.",
		}),
		jwksStale: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_jwks_stale",
			Help: "1 while the last JWKS fetch failed and the last good keys stay in force, else 0.",
		}),
		jwksLastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_jwks_last_success_timestamp_seconds",
			Help: "When the JWKS in force was fetched, in seconds since the Unix epoch.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.verifications, m.jwksFetches, m.jwksKeys, m.jwksStale, m.jwksLastSuccess)
	}
	return m
}
