package client

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/syncproto"
)

// metrics are the client's own instruments; the queue, the network monitor
// and the reconnect coordinator register theirs beside them.
type metrics struct {
	connected     prometheus.Gauge
	replays       *prometheus.CounterVec // result: complete, partial, failed
	replaySeconds prometheus.Histogram
	replayResults *prometheus.CounterVec // status of each server result
	deadLetters   prometheus.Counter
	feedEntries   prometheus.Counter
	resyncs       prometheus.Counter
	// snapshotsAbandoned counts snapshot downloads given up, by reason
	// (see the abandoned* constants).
	snapshotsAbandoned *prometheus.CounterVec
	clockRefused       prometheus.Counter
	// outcomesPruned counts outcomes forgotten (OutcomeRetention, MaxOutcomes).
	outcomesPruned prometheus.Counter
	// backfillEntries counts backfill entries stored; evictedRows rows
	// dropped by evictions, by reason.
	backfillEntries prometheus.Counter
	evictedRows     *prometheus.CounterVec
	// tokenRenewals counts sessions replaced to present a fresh token
	// before the old one's exp (tokensource.go).
	tokenRenewals prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_client_connected", Help: "1 while the client has a bound connection to a server.",
		}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_client_replays_total", Help: "Replay passes over the queue, by result (complete, partial, failed).",
		}, []string{"result"}),
		replaySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "syncd_client_replay_duration_seconds", Help: "Duration of one replay pass.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}),
		replayResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_client_replay_results_total", Help: "Server results for replayed writes, by status.",
		}, []string{"status"}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_client_dead_letters_total", Help: "Writes moved to the dead-letter store.",
		}),
		feedEntries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_client_feed_entries_total", Help: "Change-feed entries applied to the local replica.",
		}),
		resyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_client_resyncs_total", Help: "Snapshots loaded into the local replica (bootstrap or resync).",
		}),
		snapshotsAbandoned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_client_snapshots_abandoned_total", Help: "Snapshot downloads given up, the replica left as it was, by reason (too_large, timeout, status, truncated, invalid, failed, scopes).",
		}, []string{"reason"}),
		clockRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_client_clock_refused_total", Help: "Observed timestamps not adopted: more than MaxObservedClockAhead ahead of the server's clock.",
		}),
		outcomesPruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_client_outcomes_pruned_total", Help: "Outcomes of decided writes forgotten: older than OutcomeRetention, or the oldest beyond MaxOutcomes.",
		}),
		backfillEntries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_client_backfill_entries_total", Help: "Backfill entries stored in the local replica (scope values added).",
		}),
		evictedRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_client_evicted_rows_total", Help: "Rows dropped from the local replica by evictions, by reason (moved, revoked, unsubscribed, not_granted).",
		}, []string{"reason"}),
		tokenRenewals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_client_token_renewals_total", Help: "Sessions replaced by a new connection to present a fresh token from the TokenSource before the old one's exp.",
		}),
	}
	for _, r := range []string{syncproto.EvictMoved, syncproto.EvictRevoked, syncproto.EvictUnsubscribed, syncproto.EvictNotGranted} {
		m.evictedRows.WithLabelValues(r)
	}
	// Every reason is exported from the start (at zero), so a rate over
	// one is defined before its first abandon.
	for _, r := range []string{abandonedTooLarge, abandonedTimeout, abandonedStatus, abandonedTruncate, abandonedInvalid, abandonedFailed, abandonedScopes} {
		m.snapshotsAbandoned.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.connected, m.replays, m.replaySeconds, m.replayResults, m.deadLetters, m.feedEntries, m.resyncs, m.snapshotsAbandoned, m.clockRefused, m.outcomesPruned, m.backfillEntries, m.evictedRows, m.tokenRenewals} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
