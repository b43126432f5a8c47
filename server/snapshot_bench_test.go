package server_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// BenchmarkSnapshotServe measures serving one snapshot of
// SYNCD_BENCH_SNAPSHOT_N records (100,000 by default, values of about 200
// bytes, what issue 12's snapshot storm bootstraps) from a real syncd over
// HTTP: each op is one whole snapshot, read to its trailer and checked
// complete (its line count against the trailer's) without decoding the
// records, so the figure is the server's. Beside it, in the same run, the
// ceiling: the same rows read with plain SQL from the same database file
// (one read transaction, the same query and columns, scanned into reused
// buffers), half before and half after the server's snapshots. "ratio" is
// records/s over ceiling_records/s.
func BenchmarkSnapshotServe(b *testing.B) {
	n := benchSize(b, "SYNCD_BENCH_SNAPSHOT_N", 100_000)
	ts := startServer(b, server.Config{RequestsPerSecond: 1e9, RequestBurst: 1 << 30, Quotas: noQuotas, RetentionInterval: -1, Synchronous: sqlitedb.Normal})
	token := ts.Member(b, "bench", "bench-client")
	preloadRecords(b, ts, token, n)
	ceiling := openSnapshotCeiling(b, ts.DataPath)

	ctx := context.Background()
	ceiling.read(b, ctx, n)
	var bytesRead int64
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		bytesRead += fetchWholeSnapshot(b, ts.url, token, n)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	ceiling.read(b, ctx, n)

	rate := float64(n*b.N) / elapsed.Seconds()
	b.ReportMetric(rate, "records/s")
	b.ReportMetric(float64(bytesRead)/float64(b.N)/(1<<20), "MiB/snapshot")
	b.ReportMetric(ceiling.rate(), "ceiling_records/s")
	b.ReportMetric(rate/ceiling.rate(), "ratio")
}

// benchSize is the number in the environment variable env, or def.
func benchSize(b *testing.B, env string, def int) int {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(b, err, env)
	return n
}

// preloadRecords puts n records of about 200 bytes on distinct keys through
// one session, pushes of syncproto.MaxBatch with benchWindow in flight.
func preloadRecords(b *testing.B, ts *testServer, token string, n int) {
	b.Helper()
	value := []byte(`{"v":"` + string(bytes.Repeat([]byte("abcdefghijklmnopqrstuvwxyz"), 8)[:192]) + `"}`)
	preloadValues(b, ts, token, n, "notes", func(int) []byte { return value })
}

// preloadValues is preloadRecords of model with record i's value valueOf(i).
func preloadValues(b *testing.B, ts *testServer, token string, n int, model string, valueOf func(i int) []byte) {
	b.Helper()
	c, clock := session(b, ts, token, "bench-client")
	var frames [][]byte
	for i := 0; i < n; i += syncproto.MaxBatch {
		muts := make([]syncproto.Mutation, min(syncproto.MaxBatch, n-i))
		for j := range muts {
			muts[j] = syncproto.Mutation{OpID: newOpID(b), Model: model, Key: fmt.Sprintf("note-%09d", i+j), Op: syncproto.OpPut, Value: valueOf(i + j), HLC: clock.Now()}
		}
		frame, err := syncproto.Encode(&syncproto.Push{ID: fmt.Sprintf("p%d", len(frames)), Mutations: muts})
		require.NoError(b, err)
		frames = append(frames, frame)
	}
	ctx := context.Background()
	sent, inFlight := 0, 0
	for answered := 0; answered < len(frames); answered++ {
		for ; inFlight < benchWindow && sent < len(frames); sent, inFlight = sent+1, inFlight+1 {
			require.NoError(b, c.conn.Write(ctx, websocket.MessageText, frames[sent]))
		}
		msg := c.recv()
		pr, ok := msg.(*syncproto.PushResult)
		require.True(b, ok, "preload answered %T", msg)
		require.Equal(b, syncproto.StatusApplied, pr.Results[0].Status)
		inFlight--
	}
}

// fetchWholeSnapshot reads one snapshot to its end, requires it complete
// (header, want record lines, a trailer counting them) and returns its
// size in bytes.
func fetchWholeSnapshot(b *testing.B, base, token string, want int) int64 {
	b.Helper()
	return fetchSnapshotAt(b, base+syncproto.SnapshotPath, token, want)
}

// fetchSnapshotAt is fetchWholeSnapshot of the snapshot at url.
func fetchSnapshotAt(b *testing.B, url, token string, want int) int64 {
	b.Helper()
	resp := syncdtest.Get(b, url, token)
	defer resp.Body.Close()
	require.Equal(b, http.StatusOK, resp.StatusCode)
	var lc lineCounter
	size, err := io.Copy(&lc, resp.Body)
	require.NoError(b, err)
	require.Equal(b, want+2, lc.lines, "header, records, trailer")
	require.Equal(b, fmt.Sprintf(`{"end":true,"records":%d}`, want), string(lc.last))
	return size
}

// lineCounter counts newline-terminated lines and keeps the last one.
type lineCounter struct {
	lines int
	last  []byte
	cur   []byte // the line being read, kept only when short
}

func (lc *lineCounter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(lc.cur) < 256 {
				lc.cur = append(lc.cur, p...)
			}
			return n, nil
		}
		lc.cur = append(lc.cur, p[:i]...)
		lc.lines++
		lc.last = append(lc.last[:0], lc.cur...)
		lc.cur = lc.cur[:0]
		p = p[i+1:]
	}
	return n, nil
}

// snapshotCeiling reads the records a snapshot carries with plain SQL.
type snapshotCeiling struct {
	db      *sql.DB
	rows    int
	elapsed time.Duration
}

func openSnapshotCeiling(b *testing.B, path string) *snapshotCeiling {
	b.Helper()
	db, err := sqlitedb.Open(context.Background(), path, sqlitedb.Options{ReadOnly: true})
	require.NoError(b, err)
	b.Cleanup(func() { db.Close() })
	return &snapshotCeiling{db: db}
}

func (sc *snapshotCeiling) rate() float64 { return float64(sc.rows) / sc.elapsed.Seconds() }

// read reads every record of the tenant in one read transaction, as the
// snapshot does, and requires want of them.
func (sc *snapshotCeiling) read(b *testing.B, ctx context.Context, want int) {
	b.Helper()
	start := time.Now()
	tx, err := sc.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	require.NoError(b, err)
	defer tx.Rollback()
	var head uint64
	require.NoError(b, tx.QueryRowContext(ctx, `SELECT applied_seq FROM records_state WHERE id = 1`).Scan(&head))
	rows, err := tx.QueryContext(ctx, `SELECT tenant, model, key, value, version, wall, logical, origin, deleted, op_id, seq
		FROM records WHERE tenant = ? ORDER BY tenant, model, key`, "bench")
	require.NoError(b, err)
	defer rows.Close()
	var (
		tenant, model, key, value, origin, opID sql.RawBytes
		version, wall, logical, seq             int64
		deleted                                 bool
	)
	n := 0
	for rows.Next() {
		require.NoError(b, rows.Scan(&tenant, &model, &key, &value, &version, &wall, &logical, &origin, &deleted, &opID, &seq))
		n++
	}
	require.NoError(b, rows.Err())
	sc.elapsed += time.Since(start)
	sc.rows += n
	require.Equal(b, want, n)
}
