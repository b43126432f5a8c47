package server_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mattn/go-sqlite3"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// BenchmarkScopedSnapshot measures a scoped snapshot (PROTOCOL.md 19.6) of
// one scope value holding 1,000 rows, in a tenant of
// SYNCD_BENCH_SCOPED_N rows (100,000 by default) over N/1,000 values,
// served by a real syncd over HTTP. The ceiling, in the same run: a plain
// snapshot of a tenant holding exactly 1,000 rows of the same size, served
// the same way. "ratio" is the scoped snapshot's time over the ceiling's
// (the issue asks for at most 2).
//
// The database is built before syncd opens it, through the store's own
// write path (replication.Apply over the Store, batches of
// syncproto.MaxBatch writes, scopedFixtureTx writes per transaction), once
// per run: b.Loop runs the body once, so -benchtime never rebuilds it.
// "build_s" is how long that took. With SYNCD_BENCH_SCOPED_DIR set, the
// database is kept in that directory (scoped-N.db) and a later run with
// the same N starts from it (build_s 0): profiles and query plans of the
// serving side without the build.
func BenchmarkScopedSnapshot(b *testing.B) {
	n := benchSize(b, "SYNCD_BENCH_SCOPED_N", 100_000)
	const perValue = 1000
	require.Zero(b, n%perValue, "SYNCD_BENCH_SCOPED_N must be a multiple of %d", perValue)
	scopes := &replication.Scopes{}
	require.NoError(b, scopes.Set("project=notes.p"))
	pad := fmt.Sprintf("%0180d", 0)
	dir := os.Getenv("SYNCD_BENCH_SCOPED_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	path := filepath.Join(dir, fmt.Sprintf("scoped-%d.db", n))
	began := time.Now()
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		buildScopedFixture(b, path+".new", scopes, "big", n, func(i int) string { return fmt.Sprintf(`{"p":"v%05d","v":%q}`, i%(n/perValue), pad) })
		buildScopedFixture(b, path+".new", scopes, "small", perValue, func(int) string { return fmt.Sprintf(`{"p":"v00007","v":%q}`, pad) })
		// Closing the last connection checkpointed the log into the file
		// and removed it: the file alone is the database.
		_, err := os.Stat(path + ".new-wal")
		require.ErrorIs(b, err, fs.ErrNotExist, "a write-ahead log outlived the build")
		require.NoError(b, os.Rename(path+".new", path))
	} else {
		require.NoError(b, err)
	}
	build := time.Since(began)

	ts := startServer(b, server.Config{DataPath: path, RequestsPerSecond: 1e9, RequestBurst: 1 << 30, Quotas: noQuotas, RetentionInterval: -1, Synchronous: sqlitedb.Normal, Scopes: scopes})
	member := func(tenant string) string {
		return ts.Issue(b, auth.Principal{Tenant: tenant, ClientID: "bench-client", Read: []string{"*"}, Write: []string{"*"}, Scopes: map[string][]string{"project": {"*"}}})
	}
	big, small := member("big"), member("small")
	scoped := ts.url + syncproto.SnapshotPath + "?scoped=1&scope=project:v00007"
	plain := ts.url + syncproto.SnapshotPath
	// The first of each after syncd opened the file, apart: the scoped one
	// reads pages of the whole file for the first time.
	start := time.Now()
	fetchSnapshotAt(b, scoped, big, perValue)
	firstScoped := time.Since(start)
	start = time.Now()
	fetchSnapshotAt(b, plain, small, perValue)
	firstPlain := time.Since(start)

	var scopedTime, plainTime time.Duration
	ops := 0
	for b.Loop() {
		start := time.Now()
		fetchSnapshotAt(b, scoped, big, perValue)
		scopedTime += time.Since(start)
		start = time.Now()
		fetchSnapshotAt(b, plain, small, perValue)
		plainTime += time.Since(start)
		ops++
	}
	b.ReportMetric(float64(scopedTime.Microseconds())/1000/float64(ops), "scoped_ms")
	b.ReportMetric(float64(plainTime.Microseconds())/1000/float64(ops), "ceiling_ms")
	b.ReportMetric(scopedTime.Seconds()/plainTime.Seconds(), "ratio")
	b.ReportMetric(build.Seconds(), "build_s")
	b.ReportMetric(float64(firstScoped.Microseconds())/1000, "first_scoped_ms")
	b.ReportMetric(float64(firstPlain.Microseconds())/1000, "first_ceiling_ms")
}

// scopedFixtureCacheKiB is the page cache of buildScopedFixture's
// connection, in KiB.
const scopedFixtureCacheKiB = 256 << 10

// scopedFixtureTx is how many writes one transaction of buildScopedFixture
// applies.
const scopedFixtureTx = 50_000

// buildScopedFixture writes n records of model notes, keys note-000000000
// on, record i's value valueOf(i), into tenant of the syncd database at
// path (made when missing) with scopes declared, through the committer's
// write path: replication.Apply over the Store, syncproto.MaxBatch writes
// a batch under LWW, scopedFixtureTx writes a transaction.
func buildScopedFixture(b *testing.B, path string, scopes *replication.Scopes, tenant string, n int, valueOf func(i int) string) {
	b.Helper()
	ctx := context.Background()
	// A cache that holds the pages the writes keep coming back to (the
	// tails of the table and the oplog, the 1,000 insertion points of
	// records_scope), which SQLite's default 2 MB does not.
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{Synchronous: sqlitedb.Normal, Configure: func(c *sqlite3.SQLiteConn) error {
		_, err := c.Exec(fmt.Sprintf("PRAGMA cache_size = -%d", scopedFixtureCacheKiB), nil)
		return err
	}})
	require.NoError(b, err)
	defer db.Close()
	st, err := replication.OpenStore(ctx, db, replication.StoreOptions{Scopes: scopes})
	require.NoError(b, err)
	const client = "bench-client"
	wall := time.Now().UnixMilli() - int64(n)
	grants := syncproto.ScopeSet{"project": {"*"}}
	for start := 0; start < n; start += scopedFixtureTx {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(b, err)
		for i := start; i < min(start+scopedFixtureTx, n); i += syncproto.MaxBatch {
			batch := replication.Batch{Tenant: tenant, ClientID: client, Grants: grants, At: time.UnixMilli(wall + int64(i)).UTC()}
			for j := i; j < min(i+syncproto.MaxBatch, n); j++ {
				batch.Writes = append(batch.Writes, replication.Write{Policy: syncproto.PolicyLWW, Mutation: syncproto.Mutation{
					OpID: newOpID(b), Model: "notes", Key: fmt.Sprintf("note-%09d", j), Op: syncproto.OpPut,
					Value: []byte(valueOf(j)), HLC: syncproto.Timestamp{Wall: wall + int64(j), Origin: client}}})
			}
			fx, err := replication.Apply(ctx, st.In(tx), &batch)
			require.NoError(b, err)
			for k, res := range fx.Results {
				require.Equal(b, syncproto.StatusApplied, res.Status, "write %d: %+v", i+k, res)
			}
		}
		require.NoError(b, tx.Commit())
	}
}
