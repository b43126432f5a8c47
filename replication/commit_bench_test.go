package replication_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
)

// BenchmarkOneWriteCommit is the committer's transaction for one awaited
// write, against its ceiling: each op is one push of one new key applied
// as the single node's committer applies it (replication.Apply in one
// transaction on its own connection, automatic checkpoints off, as syncd
// opens its database) and committed, then one durable single-row INSERT
// into a table of its own in a second file opened the same way but with
// SQLite's automatic checkpoints (the commit BenchmarkAwaitedPut's
// ceiling probe times). Alternating them one by one puts both under the
// same load. It reports, per synchronous level:
//
//	commit_p50_us, ceiling_p50_us  the medians of each
//	x_ceiling                      commit_p50_us over ceiling_p50_us
//	cpu_us/commit                  the thread's CPU time (user and system,
//	                               getrusage RUSAGE_THREAD) per commit, which
//	                               fsync waits do not inflate
//	wal_kb/commit                  the write-ahead log bytes per commit
//	                               (its file's growth: nothing checkpoints it)
func BenchmarkOneWriteCommit(b *testing.B) {
	for _, level := range []sqlitedb.Synchronous{sqlitedb.Full, sqlitedb.Normal} {
		b.Run("sync="+level.String(), func(b *testing.B) { benchOneWriteCommit(b, level) })
	}
}

func benchOneWriteCommit(b *testing.B, level sqlitedb.Synchronous) {
	ctx := context.Background()
	dir := b.TempDir()
	db, err := sqlitedb.Open(ctx, filepath.Join(dir, "syncd.db"), sqlitedb.Options{Synchronous: level, NoAutoCheckpoint: true})
	require.NoError(b, err)
	b.Cleanup(func() { db.Close() })
	st, writer := committerOf(b, db)
	ceiling, err := sqlitedb.Open(ctx, filepath.Join(dir, "ceiling.db"), sqlitedb.Options{Synchronous: level})
	require.NoError(b, err)
	defer ceiling.Close()
	_, err = ceiling.ExecContext(ctx, `CREATE TABLE c (id INTEGER PRIMARY KEY, v BLOB)`)
	require.NoError(b, err)

	value := []byte(`{"title":"benchmark note","body":"a value of a typical size for a small JSON document","n":12345}`)
	i := 0
	commit := func() {
		commitPush(b, writer, st, oneWrite(i, time.Now().UnixMilli(), value), nil)
		i++
	}
	insert := func() {
		_, err := ceiling.ExecContext(ctx, `INSERT INTO c (v) VALUES (?)`, value)
		require.NoError(b, err)
	}
	for range 50 { // the trees' first pages, the tenant's and scope's rows
		commit()
		insert()
	}
	walSize := func() int64 {
		fi, err := os.Stat(filepath.Join(dir, "syncd.db-wal"))
		require.NoError(b, err)
		return fi.Size()
	}
	walBefore := walSize()

	runtime.LockOSThread() // RUSAGE_THREAD measures this goroutine's thread
	defer runtime.UnlockOSThread()
	var commits, inserts []time.Duration
	var cpu time.Duration
	for b.Loop() {
		c0, t0 := threadCPU(b), time.Now()
		commit()
		t1 := time.Now()
		cpu += threadCPU(b) - c0
		insert()
		commits, inserts = append(commits, t1.Sub(t0)), append(inserts, time.Since(t1))
	}
	b.StopTimer()
	slices.Sort(commits)
	slices.Sort(inserts)
	p50, ceil50 := commits[len(commits)/2], inserts[len(inserts)/2]
	b.ReportMetric(float64(p50.Nanoseconds())/1e3, "commit_p50_us")
	b.ReportMetric(float64(ceil50.Nanoseconds())/1e3, "ceiling_p50_us")
	b.ReportMetric(float64(p50)/float64(ceil50), "x_ceiling")
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(len(commits)), "cpu_us/commit")
	b.ReportMetric(float64(walSize()-walBefore)/1024/float64(len(commits)), "wal_kb/commit")
}

// threadCPU returns the CPU time of the calling thread so far.
func threadCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
