package server

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/internal/buildinfo"
	"github.com/syncd-dev/syncd/ledger"
)

// infoCollector exports, at each scrape, what does not change with this
// process's traffic: which build answers, which database it serves, and
// the durable totals of its stores. The _total counters of metrics count
// since the process started; these gauges are what the database holds now,
// the figures syncctl status shows.
type infoCollector struct {
	databaseID    string
	schemaVersion int
	ledger        interface {
		Stats(context.Context) (ledger.Stats, error)
	}

	build, database, ledgerEntries *prometheus.Desc
}

// statsTimeout bounds the store read of one scrape: a scrape during a
// long commit reports no durable totals rather than waiting.
const statsTimeout = time.Second

func newInfoCollector(databaseID string, schemaVersion int, l interface {
	Stats(context.Context) (ledger.Stats, error)
}) *infoCollector {
	return &infoCollector{
		databaseID: databaseID, schemaVersion: schemaVersion, ledger: l,
		build: prometheus.NewDesc("syncd_build_info", "The build answering: always 1, with its release version, source revision and Go toolchain as labels.",
			[]string{"version", "revision", "go_version"}, nil),
		database: prometheus.NewDesc("syncd_database_info", "The database served (welcome.database_id): always 1, with the id (a restore changes it) and the schema version of its file (an upgrade that migrates it changes it) as labels.",
			[]string{"database_id", "schema_version"}, nil),
		ledgerEntries: prometheus.NewDesc("syncd_ledger_entries", "Decisions the replay ledger holds now, over every tenant (durable; syncctl status's ledger figure).", nil, nil),
	}
}

func (c *infoCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.build
	ch <- c.database
	ch <- c.ledgerEntries
}

func (c *infoCollector) Collect(ch chan<- prometheus.Metric) {
	b := buildinfo.Read()
	ch <- prometheus.MustNewConstMetric(c.build, prometheus.GaugeValue, 1, b.Version, b.Revision, b.GoVersion)
	ch <- prometheus.MustNewConstMetric(c.database, prometheus.GaugeValue, 1, c.databaseID, strconv.Itoa(c.schemaVersion))
	ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
	defer cancel()
	if st, err := c.ledger.Stats(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(c.ledgerEntries, prometheus.GaugeValue, float64(st.Entries))
	}
}
