package cluster

import "github.com/prometheus/client_golang/prometheus"

// metrics are a node's cluster instruments (docs/metrics.md). Labels take
// values from fixed lists.
type metrics struct {
	appliedSeq       prometheus.Gauge
	streamHead       prometheus.Gauge
	lagSeconds       prometheus.Gauge
	applySeconds     prometheus.Histogram
	publishSeconds   prometheus.Histogram
	publishedBatches prometheus.Counter
	publishFailures  prometheus.Counter
	waitingQuorum    prometheus.Gauge
	leaseHeld        prometheus.Gauge
	jobs             *prometheus.CounterVec // kind, result: applied|stale_token|too_soon
	snapshotAge      prometheus.Gauge
	snapshots        *prometheus.CounterVec // result: stored|failed
	digestChecks     *prometheus.CounterVec // result: match|mismatch
	failed           prometheus.Gauge
	refused          *prometheus.CounterVec // reason: refusalReasons
	misconfigured    prometheus.Gauge
	configMismatch   prometheus.Gauge

	clusterVersion    prometheus.Gauge
	nodeFormat        prometheus.Gauge
	waitingForUpgrade prometheus.Gauge
	recordsUnverified prometheus.Gauge
	recordsChecks     *prometheus.CounterVec // result: match|mismatch
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		appliedSeq: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_cluster_applied_seq", Help: "Stream sequence of the last command this node applied.",
		}),
		streamHead: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_cluster_stream_head_seq", Help: "Newest stream sequence this node knows of.",
		}),
		lagSeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_cluster_lag_seconds", Help: "Age of the oldest stream command this node has not applied (0 when caught up).",
		}),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "syncd_cluster_apply_duration_seconds", Help: "Time to apply one group of stream commands in one transaction.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		publishSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "syncd_cluster_publish_duration_seconds", Help: "Time from publishing a command to its stream acknowledgement (retries included).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		publishedBatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_cluster_published_batches_total", Help: "Push batches this node published to the command stream.",
		}),
		publishFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_cluster_publish_failures_total", Help: "Commands whose publish was not acknowledged within the commit timeout.",
		}),
		waitingQuorum: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_cluster_waiting_for_quorum", Help: "1 while this node's JetStream calls get no answer (no leader), else 0.",
		}),
		leaseHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_cluster_lease_held", Help: "1 while this node holds the singleton-job lease, else 0.",
		}),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_cluster_jobs_total", Help: "Singleton job commands applied by this node, by kind and result (applied, stale_token; too_soon: a records check within a minute of the last).",
		}, []string{"kind", "result"}),
		snapshotAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_cluster_snapshot_age_seconds", Help: "Age of the newest snapshot in the object store, read every few seconds (unset until the first snapshot).",
		}),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_cluster_snapshots_total", Help: "Snapshots this node took as the lease holder, by result (stored, failed).",
		}, []string{"result"}),
		digestChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_cluster_digest_checks_total", Help: "Comparisons of this node's state digest with a peer's at the same sequence, by result (match, mismatch).",
		}, []string{"result"}),
		failed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_cluster_node_failed", Help: "1 when this node stopped serving (divergence, a stream gap, a command it cannot apply).",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_cluster_commands_refused_total", Help: "Stream messages this node refused and skipped, as every node does, by reason (unauthenticated, malformed, invalid, future_stamp, job_now, job_token).",
		}, []string{"reason"}),
		misconfigured: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_cluster_misconfigured", Help: "1 while the command stream's settings differ from what syncd requires, or the stream is gone (the node does not serve), else 0.",
		}),
		configMismatch: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_cluster_config_mismatch", Help: "1 while a part of this node's configuration that every node must share differs from the majority's (the node does not serve), else 0.",
		}),
		clusterVersion: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_cluster_version", Help: "The cluster version as this node last surveyed it: the lowest command stream format its members announce, the newest it publishes.",
		}),
		nodeFormat: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_cluster_node_format", Help: "The highest command stream format this node understands and announces.",
		}),
		waitingForUpgrade: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_cluster_waiting_for_upgrade", Help: "1 while this node waits at a command of a format it does not understand (it does not serve until upgraded), else 0.",
		}),
		recordsUnverified: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_cluster_records_unverified", Help: "1 while this node's records, restored from a snapshot, wait for a records check to agree with its peers (it does not serve), else 0.",
		}),
		recordsChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_cluster_records_checks_total", Help: "Comparisons of this node's digest with a peer's at a records check (record contents), by result (match, mismatch).",
		}, []string{"result"}),
	}
	// Every known label value exists from the start, at zero, so a rate
	// or an alert on it has a series before the first event.
	for _, kind := range []JobKind{JobCompactOplog, JobPruneConflicts, JobPruneLedger} {
		for _, result := range []string{"applied", "stale_token"} {
			m.jobs.WithLabelValues(string(kind), result)
		}
	}
	for _, result := range []string{"applied", "too_soon"} {
		m.jobs.WithLabelValues(string(JobCheckRecords), result)
	}
	for _, result := range []string{"stored", "failed"} {
		m.snapshots.WithLabelValues(result)
	}
	for _, reason := range refusalReasons {
		m.refused.WithLabelValues(reason)
	}
	for _, result := range []string{"match", "mismatch"} {
		m.digestChecks.WithLabelValues(result)
		m.recordsChecks.WithLabelValues(result)
	}
	if reg != nil {
		reg.MustRegister(m.appliedSeq, m.streamHead, m.lagSeconds, m.applySeconds, m.publishSeconds,
			m.publishedBatches, m.publishFailures, m.waitingQuorum, m.leaseHeld, m.jobs,
			m.snapshotAge, m.snapshots, m.digestChecks, m.failed, m.refused, m.misconfigured, m.configMismatch,
			m.clusterVersion, m.nodeFormat, m.waitingForUpgrade, m.recordsUnverified, m.recordsChecks)
	}
	return m
}
