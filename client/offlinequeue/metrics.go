package offlinequeue

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the queue's Prometheus instruments. Create one per registry with
// NewMetrics and share it by the queues of one process; label values tell the
// queues apart.
type Metrics struct {
	depth       *prometheus.GaugeVec
	deadLetters *prometheus.GaugeVec
	overflow    *prometheus.CounterVec
	evictions   *prometheus.CounterVec
	groups      *prometheus.HistogramVec
	deferred    *prometheus.CounterVec
}

// NewMetrics registers the queue metrics on reg (never on the global registry):
//
//	syncd_client_queue_depth{queue}           gauge   pending items
//	syncd_client_queue_dead_letters{queue}    gauge   items in the dead-letter store
//	syncd_client_queue_overflow_total{queue}  counter enqueues refused by MaxDepth
//	syncd_client_queue_dead_letters_evicted_total{queue}
//	                                          counter dead letters evicted beyond MaxDeadLetters
//	syncd_client_queue_commit_enqueues{queue} histogram enqueues that shared one
//	                                          durable write (group commit; file and SQLite queues)
//	syncd_client_queue_deferred_syncs_total{queue}
//	                                          counter syncs the queue ran itself for writes
//	                                          committed without one (MarkDoneUnsynced) when no
//	                                          synced write came within the window
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_client_queue_depth",
			Help: "Pending items in the offline queue.",
		}, []string{"queue"}),
		deadLetters: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_client_queue_dead_letters",
			Help: "Items in the offline queue's dead-letter store.",
		}, []string{"queue"}),
		overflow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_client_queue_overflow_total",
			Help: "Enqueues refused because the queue was at its maximum depth.",
		}, []string{"queue"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_client_queue_dead_letters_evicted_total",
			Help: "Dead letters deleted because the dead-letter store was beyond its maximum (MaxDeadLetters).",
		}, []string{"queue"}),
		groups: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "syncd_client_queue_commit_enqueues",
			Help:    "Enqueues written by one durable write of the queue (group commit): 1 for a lone enqueue.",
			Buckets: groupBuckets,
		}, []string{"queue"}),
		deferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_client_queue_deferred_syncs_total",
			Help: "Syncs the queue ran itself to make writes committed without a sync (outcomes) durable, because no synced write came within the window.",
		}, []string{"queue"}),
	}
	for _, c := range []prometheus.Collector{m.depth, m.deadLetters, m.overflow, m.evictions, m.groups, m.deferred} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// recorder binds the metrics to one queue's label. A nil *Metrics yields a
// recorder whose methods do nothing, so implementations never nil-check.
func (m *Metrics) recorder(queue string) recorder {
	if m == nil {
		return recorder{}
	}
	return recorder{
		depth:       m.depth.WithLabelValues(queue),
		deadLetters: m.deadLetters.WithLabelValues(queue),
		overflow:    m.overflow.WithLabelValues(queue),
		evictions:   m.evictions.WithLabelValues(queue),
		groups:      m.groups.WithLabelValues(queue),
		deferred:    m.deferred.WithLabelValues(queue),
	}
}

// groupBuckets are the commit group sizes the histogram tells apart: 1,
// 2, 4, ... up to maxBatch, the most one SQLite commit takes.
var groupBuckets = prometheus.ExponentialBuckets(1, 2, 9)

// recorder is one queue's view of Metrics.
type recorder struct {
	depth       prometheus.Gauge
	deadLetters prometheus.Gauge
	overflow    prometheus.Counter
	evictions   prometheus.Counter
	groups      prometheus.Observer
	deferred    prometheus.Counter
}

func (r recorder) setCounts(pending, dead int) {
	if r.depth == nil {
		return
	}
	r.depth.Set(float64(pending))
	r.deadLetters.Set(float64(dead))
}

func (r recorder) overflowed() {
	if r.overflow != nil {
		r.overflow.Inc()
	}
}

func (r recorder) evicted(n int) {
	if r.evictions != nil && n > 0 {
		r.evictions.Add(float64(n))
	}
}

// committed records one durable write that carried n enqueues.
func (r recorder) committed(n int) {
	if r.groups != nil && n > 0 {
		r.groups.Observe(float64(n))
	}
}

// deferredSynced records one sync the queue ran for unsynced writes.
func (r recorder) deferredSynced() {
	if r.deferred != nil {
		r.deferred.Inc()
	}
}
