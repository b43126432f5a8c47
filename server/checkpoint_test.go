package server_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncproto"
)

// TestWALStaysBoundedUnderAStreamOfPushes: syncd's connections never
// checkpoint on commit (sqlitedb.Checkpointer runs the checkpoints beside
// the store's writer), yet a stream of pushes does not grow the
// write-ahead log without bound: on a single node the committer, on a
// cluster node the materializer, tells the checkpointer of each write, and
// Config.MaxLogPages (--max-log-pages) sets the bound. The stream appends
// about six times the bound to the log; unchecked (the committer's Wrote
// removed), the -wal file held all of it.
func TestWALStaysBoundedUnderAStreamOfPushes(t *testing.T) {
	const maxLogPages = 500 // 2 MiB: an eighth of the default, so the stream is short
	ts := startServer(t, server.Config{Synchronous: sqlitedb.Normal, MaxLogPages: maxLogPages,
		RequestsPerSecond: 1e9, RequestBurst: 1 << 30})
	c, clock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")

	// The session rate limit is lifted so that the pushes come as one
	// stream. Each value is about two pages, written twice (the record
	// and its oplog entry): a push of 4 appends some 20 pages or more,
	// 150 pushes some 12 MB, twice the bound checked below.
	const pushes, perPush = 150, 4
	const bound = 3 * maxLogPages * 4096
	value := `"` + strings.Repeat("x", 8000) + `"`
	for i := range pushes {
		muts := make([]syncproto.Mutation, perPush)
		for j := range muts {
			muts[j] = put(t, clock, "notes", fmt.Sprintf("n%d", (i*perPush+j)%64), value)
		}
		requireApplied(t, c.push(fmt.Sprintf("p%d", i), muts...))
	}
	for _, n := range ts.nodes {
		wal, err := os.Stat(n.DataPath + "-wal")
		require.NoError(t, err)
		// The log peaks near maxLogPages plus what a few rounds of the
		// checkpointer's spacing append, and never beyond twice it plus
		// one write.
		t.Logf("%s: log at %d bytes", n.DataPath, wal.Size())
		require.Less(t, wal.Size(), int64(bound), "the log was checkpointed and reused")
	}
}
