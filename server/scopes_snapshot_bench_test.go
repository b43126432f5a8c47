package server_test

import (
	"fmt"
	"testing"
	"time"

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
func BenchmarkScopedSnapshot(b *testing.B) {
	n := benchSize(b, "SYNCD_BENCH_SCOPED_N", 100_000)
	const perValue = 1000
	scopes := &replication.Scopes{}
	require.NoError(b, scopes.Set("project=notes.p"))
	ts := startServer(b, server.Config{RequestsPerSecond: 1e9, RequestBurst: 1 << 30, Quotas: noQuotas, RetentionInterval: -1, Synchronous: sqlitedb.Normal, Scopes: scopes})
	pad := fmt.Sprintf("%0180d", 0)
	big := ts.Issue(b, auth.Principal{Tenant: "big", ClientID: "bench-client", Read: []string{"*"}, Write: []string{"*"}, Scopes: map[string][]string{"project": {"*"}}})
	preloadValues(b, ts, big, n, "notes", func(i int) []byte { return fmt.Appendf(nil, `{"p":"v%05d","v":%q}`, i%(n/perValue), pad) })
	small := ts.Issue(b, auth.Principal{Tenant: "small", ClientID: "bench-client", Read: []string{"*"}, Write: []string{"*"}, Scopes: map[string][]string{"project": {"*"}}})
	preloadValues(b, ts, small, perValue, "notes", func(int) []byte { return fmt.Appendf(nil, `{"p":"v00007","v":%q}`, pad) })
	scoped := ts.url + syncproto.SnapshotPath + "?scoped=1&scope=project:v00007"
	plain := ts.url + syncproto.SnapshotPath

	var scopedTime, plainTime time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		fetchSnapshotAt(b, scoped, big, perValue)
		scopedTime += time.Since(start)
		start = time.Now()
		fetchSnapshotAt(b, plain, small, perValue)
		plainTime += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(float64(scopedTime.Microseconds())/1000/float64(b.N), "scoped_ms")
	b.ReportMetric(float64(plainTime.Microseconds())/1000/float64(b.N), "ceiling_ms")
	b.ReportMetric(scopedTime.Seconds()/plainTime.Seconds(), "ratio")
}
