package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/syncproto"
)

// metrics are syncd's Prometheus instruments. Label sets are bounded: status,
// policy, code and reason take values from fixed lists; no label carries a
// tenant, client id, key or op id.
type metrics struct {
	connections        prometheus.Gauge
	connectionsTotal   *prometheus.CounterVec // result: accepted|unauthorized|refused
	pushes             prometheus.Counter
	mutations          *prometheus.CounterVec // status
	applySeconds       prometheus.Histogram
	batchSize          prometheus.Histogram
	commitGroupBatches prometheus.Histogram
	conflicts          *prometheus.CounterVec // policy
	hookFallbacks      prometheus.Counter
	ledgerHits         prometheus.Counter
	ledgerRecords      prometheus.Counter
	ledgerEvictions    prometheus.Counter
	oplogHead          prometheus.Gauge
	oplogOldest        prometheus.Gauge
	resyncs            prometheus.Counter
	syncLag            prometheus.Histogram
	bytesReceived      prometheus.Counter
	bytesSent          prometheus.Counter
	protocolErrors     *prometheus.CounterVec // code
	rateLimited        prometheus.Counter
	subscribers        prometheus.Gauge
	refusedPerAddress  prometheus.Counter
	snapshotsActive    prometheus.Gauge
	snapshotsWaiting   prometheus.Gauge
	snapshotsShared    prometheus.Counter
	snapshotsRefused   prometheus.Counter
	snapshotsCut       prometheus.Counter
	quotaRefusals      *prometheus.CounterVec // quota: token_mutations|tenant_mutations|token_connections|tenant_connections
	quotaWaits         *prometheus.CounterVec // quota: token_frame_bytes|tenant_frame_bytes
	frameBudgetInUse   prometheus.Gauge
	frameBudgetWaits   prometheus.Counter
	valuesOmitted      prometheus.Counter
	scopeBackfills     *prometheus.CounterVec // outcome: done|revoked|aborted
	scopeBackfillTime  prometheus.Histogram
	scopeEvictions     *prometheus.CounterVec // reason: moved|revoked|unsubscribed|not_granted
	scopeRequested     *prometheus.CounterVec // result: unchanged|new|changed|cleared|failed|deferred
	feedDelivered      prometheus.Counter
	feedPagesMerged    prometheus.Counter   // feed pages written within another's frame
	pushAnswerSeconds  prometheus.Histogram // a push's arrival to its answer written

	operatorDisconnects prometheus.Counter
	adminTokenChanges   *prometheus.CounterVec // change: issued|revoked
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		quotaRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_quota_refusals_total", Help: "Frames and upgrades refused by a token's or tenant's quota, by quota (token_mutations, tenant_mutations, token_connections, tenant_connections).",
		}, []string{"quota"}),
		quotaWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_quota_waits_total", Help: "Frames that waited, unread, for their token's or tenant's share of the frame budget, by quota (token_frame_bytes, tenant_frame_bytes).",
		}, []string{"quota"}),
		frameBudgetInUse: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_frame_budget_bytes", Help: "Bytes of the frame budget held by frames being read, decoded or applied.",
		}),
		frameBudgetWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_frame_budget_waits_total", Help: "Frames that waited for the frame budget before being read.",
		}),
		snapshotsActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_snapshots_active", Help: "Snapshot downloads being served.",
		}),
		snapshotsWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_snapshots_waiting", Help: "Snapshot requests waiting for a turn (the concurrency limit's queue).",
		}),
		snapshotsShared: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_snapshots_shared_total", Help: "Snapshots served from the database read of another device of the same scope whose turn came while they waited.",
		}),
		snapshotsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_snapshots_refused_total", Help: "Snapshot requests refused server_busy by the concurrency limits.",
		}),
		snapshotsCut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_snapshots_cut_total", Help: "Snapshots that ended before their trailer (a stalled reader, the time bound, an error).",
		}),
		valuesOmitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_winner_values_omitted_total",
			Help: "Winner values left out of push_result answers (value_omitted) to keep them within max_frame_bytes.",
		}),
		operatorDisconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_operator_disconnects_total", Help: "Sessions ended by an operator through the admin API or the console (they drain, close 1001, and the device reconnects).",
		}),
		refusedPerAddress: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_connections_refused_per_address_total",
			Help: "TCP connections closed at accept because their IP address had Config.MaxConnectionsPerAddress open.",
		}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_connections", Help: "Open websocket sessions.",
		}),
		connectionsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_connections_total", Help: "Websocket upgrade requests by result (accepted, unauthorized, refused).",
		}, []string{"result"}),
		pushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_pushes_total", Help: "Push messages answered.",
		}),
		mutations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_mutations_total", Help: "Pushed mutations by result status (applied, duplicate, superseded, conflict, rejected, expired).",
		}, []string{"status"}),
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "syncd_apply_duration_seconds", Help: "Time from a push's arrival at the committer to its durable commit.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "syncd_push_batch_size", Help: "Mutations per push message.",
			Buckets: []float64{1, 2, 5, 10, 25, 50, 100, 250, 500},
		}),
		commitGroupBatches: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "syncd_commit_group_pushes", Help: "Push messages sharing one database commit (group commit).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
		}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_conflicts_total", Help: "Conflict-log rows written, by policy (lww, optimistic, hook).",
		}, []string{"policy"}),
		hookFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_conflict_hook_fallbacks_total", Help: "Conflict-hook decisions that fell back to last-writer-wins (timeout, error or panic).",
		}),
		ledgerHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_ledger_hits_total", Help: "Resent mutations answered from the replay ledger.",
		}),
		ledgerRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_ledger_records_total", Help: "Decisions recorded in the replay ledger.",
		}),
		ledgerEvictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_ledger_evictions_total", Help: "Decisions evicted from the replay ledger by retention.",
		}),
		oplogHead: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_oplog_head_seq", Help: "Sequence number of the newest oplog entry.",
		}),
		oplogOldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_oplog_oldest_seq", Help: "Sequence number of the oldest retained oplog entry, of any tenant.",
		}),
		resyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_resyncs_total", Help: "Devices sent to a snapshot: pulls and subscriptions answered resync (entries of the device's own tenant after its cursor were compacted), and hellos from a replica of another database (a restore).",
		}),
		syncLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "syncd_sync_lag_seconds", Help: "Time from an entry's commit to its delivery to a live subscriber.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		bytesReceived: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_received_bytes_total", Help: "Websocket message bytes received.",
		}),
		bytesSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_sent_bytes_total", Help: "Websocket message bytes sent.",
		}),
		protocolErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_protocol_errors_total", Help: "Error messages sent to clients, by error code.",
		}, []string{"code"}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_rate_limited_total", Help: "Messages refused by a session's rate limit.",
		}),
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_subscribers", Help: "Live change-feed subscriptions.",
		}),
		feedPagesMerged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_feed_pages_merged_total", Help: "Change-feed pages written within the frame of the page queued before them (a subscriber's writer fell behind), each a frame and a write saved.",
		}),
		pushAnswerSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "syncd_push_answer_seconds", Help: "Time from a push's arrival to its answer written to the connection: syncd_apply_duration_seconds plus the wait for the session's writer and the write.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
	}
	for _, q := range []string{quotaTokenMutations, quotaTenantMutations, quotaTokenConns, quotaTenantConns} {
		m.quotaRefusals.WithLabelValues(q)
	}
	for _, q := range []string{quotaTokenFrames, quotaTenantFrames} {
		m.quotaWaits.WithLabelValues(q)
	}
	reg.MustRegister(m.quotaRefusals, m.quotaWaits, m.frameBudgetInUse, m.frameBudgetWaits, m.snapshotsActive, m.snapshotsWaiting, m.snapshotsShared, m.snapshotsRefused, m.snapshotsCut, m.valuesOmitted, m.operatorDisconnects, m.refusedPerAddress, m.connections, m.connectionsTotal, m.pushes, m.mutations, m.applySeconds,
		m.batchSize, m.commitGroupBatches, m.conflicts, m.hookFallbacks, m.ledgerHits,
		m.ledgerRecords, m.ledgerEvictions, m.oplogHead, m.oplogOldest, m.resyncs, m.syncLag,
		m.bytesReceived, m.bytesSent, m.protocolErrors, m.rateLimited, m.subscribers)
	reg.MustRegister(m.feedPagesMerged, m.pushAnswerSeconds)
	m.registerScopes(reg)
	m.registerAdmin(reg)
	return m
}

// Backfill outcomes (syncd_scope_backfills_total).
const (
	backfillDone    = "done"    // the value's last page was sent
	backfillRevoked = "revoked" // the grant was lost before the last page
	backfillAborted = "aborted" // the subscription ended or was replaced first
)

// registerScopes makes partial sync's instruments: backfills and their
// time, evictions by reason, and every feed entry delivered (its ratio to
// syncd_mutations_total{status="applied"} is the deliveries per write).
func (m *metrics) registerScopes(reg prometheus.Registerer) {
	m.scopeBackfills = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncd_scope_backfills_total", Help: "Scope values backfilled to subscriptions, by outcome (done, revoked, aborted).",
	}, []string{"outcome"})
	m.scopeBackfillTime = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "syncd_scope_backfill_seconds", Help: "Time from a backfill's first page read to its last page sent, of backfills done.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
	m.scopeEvictions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncd_scope_evictions_total", Help: "Evictions sent to devices, by reason (moved: evict entries; revoked, unsubscribed, not_granted: changes.evictions).",
	}, []string{"reason"})
	m.feedDelivered = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "syncd_feed_entries_delivered_total", Help: "Change-feed entries (evict entries included) sent to live subscribers.",
	})
	for _, o := range []string{backfillDone, backfillRevoked, backfillAborted} {
		m.scopeBackfills.WithLabelValues(o)
	}
	for _, r := range []string{syncproto.EvictMoved, syncproto.EvictRevoked, syncproto.EvictUnsubscribed, syncproto.EvictNotGranted} {
		m.scopeEvictions.WithLabelValues(r)
	}
	reg.MustRegister(m.scopeBackfills, m.scopeBackfillTime, m.scopeEvictions, m.feedDelivered)
	m.registerRequested(reg)
}
