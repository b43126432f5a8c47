package main

import (
	"fmt"
	"io"
	"math"
	"time"
)

// benchReport is syncctl bench's result; --json prints it as is.
type benchReport struct {
	Config         benchConfigView `json:"config"`
	ConnectSeconds float64         `json:"connect_seconds"`
	Connections    struct {
		Requested   int         `json:"requested"`
		Open        int         `json:"open_at_end"`
		Subscribers int         `json:"subscribers_at_end"`
		Pushers     int         `json:"pushers"`
		Connect     latencyView `json:"connect"`
	} `json:"connections"`
	DurationSeconds float64          `json:"duration_seconds"`
	Pushes          int64            `json:"pushes"`
	Mutations       int64            `json:"mutations_applied"`
	PushesPerSec    float64          `json:"pushes_per_second"`
	MutationsPerSec float64          `json:"mutations_per_second"`
	Statuses        map[string]int64 `json:"results_by_status"`
	Ack             latencyView      `json:"ack_latency"`
	Delivery        struct {
		latencyView
		Writes    int64 `json:"acknowledged_writes"`
		Delivered int64 `json:"delivered"`
		Missing   int64 `json:"missing"`
	} `json:"feed_delivery"`
	Snapshots struct {
		latencyView
		Fetched  int64 `json:"fetched"`
		Complete int64 `json:"complete"`
		Records  int64 `json:"records"`
		Retries  int64 `json:"retries_after_busy"`    // fetched again after a 503 server_busy
		Failed   int64 `json:"retries_after_failure"` // fetched again after a failure or a body cut short
	} `json:"snapshots"`
	PreloadRetries int64            `json:"preload_retries"` // preload pushes sent again after rate_limited or server_busy
	Errors         map[string]int64 `json:"errors"`
	Servers        []serverView     `json:"servers"`
}

// serverView is one node's process figures around the run: before any
// connection, loaded (every session still open, after the run), and after
// every session closed.
type serverView struct {
	URL    string        `json:"url"`
	Before serverFigures `json:"before"`
	Loaded serverFigures `json:"loaded"`
	After  serverFigures `json:"after"`
}

// benchConfigView is the run's configuration in the report.
type benchConfigView struct {
	URLs           []string `json:"urls"`
	Connections    int      `json:"connections"`
	PushShare      float64  `json:"push_share"`
	SubscribeShare float64  `json:"subscribe_share"`
	Rate           float64  `json:"rate"`
	Inflight       int      `json:"inflight"`
	Batch          int      `json:"batch"`
	ValueSize      int      `json:"value_size"`
	Models         []string `json:"models"`
	Keys           int      `json:"keys"`
	Preload        int      `json:"preload"`
	Storm          int      `json:"snapshot_storm"`
	Duration       string   `json:"duration"`
	ReadBuffer     int      `json:"read_buffer"` // 0: the kernel's default
}

func (c benchConfig) view() benchConfigView {
	return benchConfigView{
		URLs: c.urls, Connections: c.connections, PushShare: c.pushShare, SubscribeShare: c.subscribeShare,
		Rate: c.rate, Inflight: c.inflight, Batch: c.batch, ValueSize: c.valueSize, Models: c.models,
		Keys: c.keys, Preload: c.preload, Storm: c.storm, Duration: c.duration.String(),
		ReadBuffer: c.readBuffer,
	}
}

// fill copies the run's measurements into the report.
func (rep *benchReport) fill(r *benchRun, elapsed time.Duration, conns, subs, pushers int) {
	rep.Connections.Requested = r.cfg.connections
	rep.Connections.Open, rep.Connections.Subscribers, rep.Connections.Pushers = conns, subs, pushers
	rep.Connections.Connect = r.connect.view()
	rep.DurationSeconds = round3(elapsed.Seconds())
	rep.Pushes, rep.Mutations = r.pushes.Load(), r.mutations.Load()
	rep.PushesPerSec = round3(float64(rep.Pushes) / elapsed.Seconds())
	rep.MutationsPerSec = round3(float64(rep.Mutations) / elapsed.Seconds())
	rep.Statuses = r.statuses.snapshot()
	rep.Ack = r.ack.view()
	rep.Delivery.latencyView = r.deliveries.latency.view()
	rep.Delivery.Writes, rep.Delivery.Delivered, rep.Delivery.Missing = r.deliveries.tally(subs)
	rep.Snapshots.latencyView = r.snapshot.view()
	rep.Snapshots.Fetched, rep.Snapshots.Complete, rep.Snapshots.Records = r.snapshots.Load(), r.snapshotsComplete.Load(), r.snapshotRecords.Load()
	rep.Snapshots.Retries, rep.Snapshots.Failed = r.snapshotRetries.Load(), r.snapshotRetriesFailed.Load()
	rep.PreloadRetries = r.preloadRetries.Load()
	rep.Errors = r.errors.snapshot()
	rep.ConnectSeconds = round3(rep.ConnectSeconds)
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// print writes the report as people read it.
func (rep *benchReport) print(w io.Writer) error {
	c := rep.Config
	load := "closed loop"
	if c.Rate > 0 {
		load = fmt.Sprintf("%g pushes/s each", c.Rate)
	}
	if err := fields(w,
		[2]string{"connections", fmt.Sprintf("%d requested, %d open at end (%d subscribed), %d pushing; connected in %.1fs", c.Connections, rep.Connections.Open, rep.Connections.Subscribers, rep.Connections.Pushers, rep.ConnectSeconds)},
		[2]string{"load", fmt.Sprintf("batch %d x %d-byte values, %s, inflight %d, %d keys, models %v", c.Batch, c.ValueSize, load, c.Inflight, c.Keys, c.Models)},
		[2]string{"duration", fmt.Sprintf("%.1fs", rep.DurationSeconds)},
		[2]string{"throughput", fmt.Sprintf("%d pushes (%.1f/s), %d mutations applied (%.1f/s)", rep.Pushes, rep.PushesPerSec, rep.Mutations, rep.MutationsPerSec)},
		[2]string{"results", describeCounts(rep.Statuses)},
		[2]string{"feed", fmt.Sprintf("%d acknowledged writes, %d deliveries, %d missing", rep.Delivery.Writes, rep.Delivery.Delivered, rep.Delivery.Missing)},
		[2]string{"snapshots", fmt.Sprintf("%d of %d complete (%d records), %d retries after busy, %d after a failure", rep.Snapshots.Complete, c.Storm, rep.Snapshots.Records, rep.Snapshots.Retries, rep.Snapshots.Failed)},
		[2]string{"preload", fmt.Sprintf("%d records, %d pushes sent again after a refusal", c.Preload, rep.PreloadRetries)},
		[2]string{"errors", describeCounts(rep.Errors)},
	); err != nil {
		return err
	}
	fmt.Fprintln(w)
	t := newTable(w, "LATENCY (ms)", "COUNT", "P50", "P90", "P99", "P99.9", "MAX")
	for _, l := range []struct {
		name string
		v    latencyView
	}{{"connect", rep.Connections.Connect}, {"push ack", rep.Ack}, {"feed delivery", rep.Delivery.latencyView}, {"snapshot", rep.Snapshots.latencyView}} {
		t.row(l.name, fmt.Sprint(l.v.Count), ms(l.v.P50), ms(l.v.P90), ms(l.v.P99), ms(l.v.P999), ms(l.v.Max))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	t = newTable(w, "SERVER", "RSS BEFORE", "RSS LOADED", "RSS AFTER", "GOROUTINES BEFORE", "LOADED", "AFTER")
	for _, s := range rep.Servers {
		t.row(s.URL, mib(s.Before.RSSBytes), mib(s.Loaded.RSSBytes), mib(s.After.RSSBytes),
			num(s.Before.Goroutines), num(s.Loaded.Goroutines), num(s.After.Goroutines))
	}
	return t.flush()
}

func ms(v float64) string { return fmt.Sprintf("%.1f", v) }

func mib(b int64) string {
	if b < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

func num(n int64) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}
