package sqlitedb_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
)

// writePages commits n transactions of a page-sized row each, calling
// wrote after each, and returns the log's size.
func writePages(t *testing.T, db *sql.DB, path string, n int, wrote func(int)) int64 {
	t.Helper()
	ctx := context.Background()
	_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT)`)
	require.NoError(t, err)
	value := strings.Repeat("x", 3000)
	for i := range n {
		_, err := db.ExecContext(ctx, `INSERT OR REPLACE INTO t (id, v) VALUES (?, ?)`, i%100, value)
		require.NoError(t, err)
		wrote(1)
	}
	wal, err := os.Stat(path + "-wal")
	require.NoError(t, err)
	return wal.Size()
}

// TestCheckpointerBoundsTheLogWithoutAutomaticCheckpoints: with
// NoAutoCheckpoint every connection reads wal_autocheckpoint back as 0 and
// the log holds every page written; with a Checkpointer told of each write
// it is checkpointed and reused, and stays within LimitLogPages (by
// default twice MaxLogPages) whatever was written.
func TestCheckpointerBoundsTheLogWithoutAutomaticCheckpoints(t *testing.T) {
	ctx := context.Background()
	const writes = 3000 // a page or more each: 12 MiB unchecked
	const maxPages = 500
	open := func(t *testing.T) (*sql.DB, string) {
		path := filepath.Join(t.TempDir(), "x.db")
		db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{Synchronous: sqlitedb.Normal, NoAutoCheckpoint: true})
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		return db, path
	}

	t.Run("unchecked", func(t *testing.T) {
		db, path := open(t)
		conns := make([]*sql.Conn, 3) // several pool connections, not only the first
		for i := range conns {
			var err error
			conns[i], err = db.Conn(ctx)
			require.NoError(t, err)
			var pages int
			require.NoError(t, conns[i].QueryRowContext(ctx, `PRAGMA wal_autocheckpoint`).Scan(&pages))
			require.Zero(t, pages, "a commit never checkpoints")
		}
		for _, c := range conns {
			require.NoError(t, c.Close())
		}
		var none *sqlitedb.Checkpointer // a nil one does nothing
		size := writePages(t, db, path, writes, none.Wrote)
		require.Greater(t, size, int64(writes*4096), "no commit checkpointed")
	})

	for _, wait := range []bool{false, true} {
		name := map[bool]string{false: "passive", true: "wait for readers"}[wait]
		t.Run(name, func(t *testing.T) {
			db, path := open(t)
			c := sqlitedb.StartCheckpointer(db, sqlitedb.CheckpointerOptions{Every: 16, MaxLogPages: maxPages, WaitForReaders: wait})
			size := writePages(t, db, path, writes, c.Wrote)
			t.Logf("%+v", c.Stats())
			c.Close()
			c.Close() // twice is harmless
			// The log peaks between maxPages and LimitLogPages (twice
			// maxPages) plus one write.
			t.Logf("log peaked at %d bytes", size)
			require.Less(t, size, int64(4*maxPages*4096), "the log was checkpointed and reused")
		})
	}
}

// TestCheckpointerWriterStepIsBoundedInFrames: under a stream of writes
// (page-sized, at synchronous=NORMAL, so the writer outruns the
// goroutine's fsyncs), Wrote's own steps each copy at most InlineFrames
// frames, counted from SQLite's log index, however far behind the
// goroutine is; the log never grows past LimitLogPages plus one write; and
// the metrics report the same counts as Stats.
func TestCheckpointerWriterStepIsBoundedInFrames(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{Synchronous: sqlitedb.Normal, NoAutoCheckpoint: true})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	const maxPages, inline, limit = 200, 64, 1000
	c := sqlitedb.StartCheckpointer(db, sqlitedb.CheckpointerOptions{Every: 8, MaxLogPages: maxPages, InlineFrames: inline, LimitLogPages: limit})
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))

	size := writePages(t, db, path, 5000, c.Wrote)
	c.Close()
	s := c.Stats()
	t.Logf("log peaked at %d bytes; %+v", size, s)
	require.Positive(t, s.Writer+s.WriterAtLimit, "the log started over")
	require.LessOrEqual(t, s.WriterMaxFrames, int64(inline), "a writer's step copied at most InlineFrames")
	require.LessOrEqual(t, s.WriterFrames, s.Writer*inline)
	const frame = 4096 + 24 // a page and its frame header
	require.LessOrEqual(t, size, int64(32+(limit+1)*frame), "the log stayed within LimitLogPages and one write")

	got := map[string]float64{}
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			got[name] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	require.Equal(t, map[string]float64{
		"syncd_wal_checkpoints_total/background":            float64(s.Background),
		"syncd_wal_checkpoints_total/writer":                float64(s.Writer),
		"syncd_wal_checkpoints_total/writer_at_limit":       float64(s.WriterAtLimit),
		"syncd_wal_checkpoint_frames_total/background":      float64(s.BackgroundFrames),
		"syncd_wal_checkpoint_frames_total/writer":          float64(s.WriterFrames),
		"syncd_wal_checkpoint_frames_total/writer_at_limit": float64(s.WriterAtLimitFrames),
		"syncd_wal_checkpoints_deferred_total":              float64(s.Deferred),
		"syncd_wal_frames":                                  float64(s.LogFrames),
	}, got)
}
