package offlinequeue_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/internal/sqlitedb"
)

// benchPayload is a mutation of the size the client queues for a short note.
var benchPayload = []byte(`{"op_id":"0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","model":"notes","key":"note-0042",` +
	`"op":"put","value":{"text":"a short note of about sixty bytes, as apps write"},"hlc":"1733140000000.0.phone-1"}`)

// benchChunk is how many operations run before the benchmark switches
// between the measured queue and what it is compared with. Alternating in
// small chunks makes a change of machine load during the run weigh on both
// sides alike: fsync rates on a shared machine drift by 2x within a minute.
const benchChunk = 100

// benchOptions lift the depth limit above any b.N the benchmarks reach
// (they measure the rate, not the limit); m, if not nil, receives the
// queue's metrics.
func benchOptions(m *offlinequeue.Metrics) offlinequeue.Options {
	return offlinequeue.Options{MaxDepth: math.MaxInt32, Metrics: m}
}

// durableKind is one durable queue and the ceiling it is measured against.
type durableKind struct {
	name string
	open func(b *testing.B, dir string, m *offlinequeue.Metrics) offlinequeue.Queue
	// ceiling opens the raw operation the queue's durability costs; do(n)
	// performs it n times.
	ceiling func(b *testing.B, dir string) (do func(n int), done func())
}

var durableKinds = []durableKind{
	{
		name: "file",
		open: func(b *testing.B, dir string, m *offlinequeue.Metrics) offlinequeue.Queue {
			q, err := offlinequeue.OpenFile(filepath.Join(dir, "queue.ndjson"), offlinequeue.FileOptions{Options: benchOptions(m)})
			require.NoError(b, err)
			return q
		},
		ceiling: rawAppendFsync,
	},
	{
		name: "sqlite",
		open: func(b *testing.B, dir string, m *offlinequeue.Metrics) offlinequeue.Queue {
			q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{Options: benchOptions(m)})
			require.NoError(b, err)
			return q
		},
		ceiling: rawSQLiteInsert,
	},
}

// BenchmarkEnqueue measures each durable queue's keyed enqueue rate with 1
// and with 16 concurrent producers, each beside what bounds it, measured in
// the same run in alternating chunks:
//
//	producers=1:  enq/s, ceiling/s (file: write+fsync of the exact line the
//	              queue writes; sqlite: one-row transactions on the queue's
//	              own table and index, same pragmas), x_ceiling = enq/s over
//	              ceiling/s (target >= 0.85)
//	producers=16: enq/s, x_single = enq/s over one producer's rate on a
//	              second queue of the same kind (group commit; target >= 8),
//	              enq/commit = the mean group a durable write carried
//	              (syncd_client_queue_commit_enqueues)
func BenchmarkEnqueue(b *testing.B) {
	for _, k := range durableKinds {
		b.Run(k.name+"/producers=1", func(b *testing.B) {
			dir := b.TempDir()
			q := k.open(b, dir, nil)
			defer q.Close()
			ceiling, done := k.ceiling(b, dir)
			defer done()
			var queueTime, ceilingTime time.Duration
			keys := &keySource{}
			for left := b.N; left > 0; left -= benchChunk {
				n := min(left, benchChunk)
				queueTime += timed(func() { enqueue(b, q, n, 1, keys) })
				ceilingTime += timed(func() { ceiling(n) })
			}
			report(b, "enq/s", b.N, queueTime)
			report(b, "ceiling/s", b.N, ceilingTime)
			b.ReportMetric(float64(ceilingTime)/float64(queueTime), "x_ceiling")
		})
		b.Run(k.name+"/producers=16", func(b *testing.B) {
			reg := prometheus.NewRegistry()
			m, err := offlinequeue.NewMetrics(reg)
			require.NoError(b, err)
			many, one := k.open(b, b.TempDir(), m), k.open(b, b.TempDir(), nil)
			defer many.Close()
			defer one.Close()
			var manyTime, oneTime time.Duration
			manyKeys, oneKeys := &keySource{}, &keySource{}
			singles := 0
			for left := b.N; left > 0; left -= 16 * benchChunk {
				n := min(left, 16*benchChunk)
				manyTime += timed(func() { enqueue(b, many, n, 16, manyKeys) })
				oneTime += timed(func() { enqueue(b, one, benchChunk, 1, oneKeys) })
				singles += benchChunk
			}
			report(b, "enq/s", b.N, manyTime)
			b.ReportMetric((float64(b.N)/manyTime.Seconds())/(float64(singles)/oneTime.Seconds()), "x_single")
			b.ReportMetric(meanGroup(b, reg), "enq/commit")
		})
	}
}

// meanGroup is the mean of syncd_client_queue_commit_enqueues on reg.
func meanGroup(b *testing.B, reg *prometheus.Registry) float64 {
	writes, enqueues := commitHistogram(b, reg)
	return enqueues / float64(writes)
}

func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

func report(b *testing.B, unit string, n int, d time.Duration) {
	b.ReportMetric(float64(n)/d.Seconds(), unit)
}

// keySource hands out keys that never repeat on one queue, so no enqueue
// of the benchmark is a dedup hit.
type keySource struct{ next atomic.Int64 }

func (k *keySource) key() string { return fmt.Sprintf("op-%d", k.next.Add(1)) }

// enqueue makes n keyed enqueues from producers goroutines.
func enqueue(b *testing.B, q offlinequeue.Queue, n, producers int, keys *keySource) {
	b.Helper()
	ctx := context.Background()
	var issued atomic.Int64
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for issued.Add(1) <= int64(n) {
				if _, err := q.Enqueue(ctx, benchPayload, keys.key()); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// rawAppendFsync appends the exact line the file queue writes for one
// enqueue, each time followed by fsync.
func rawAppendFsync(b *testing.B, dir string) (func(n int), func()) {
	b.Helper()
	sample := filepath.Join(dir, "sample.ndjson")
	q, err := offlinequeue.OpenFile(sample, offlinequeue.FileOptions{})
	require.NoError(b, err)
	_, err = q.Enqueue(context.Background(), benchPayload, "op-1")
	require.NoError(b, err)
	require.NoError(b, q.Close())
	content, err := os.ReadFile(sample)
	require.NoError(b, err)
	lines := bytes.Split(bytes.TrimSuffix(content, []byte("\n")), []byte("\n"))
	line := append(lines[len(lines)-1], '\n')

	f, err := os.OpenFile(filepath.Join(dir, "raw.ndjson"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(b, err)
	return func(n int) {
		for range n {
			if _, err := f.Write(line); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
		}
	}, func() { f.Close() }
}

// rawSQLiteInsert runs one-row transactions on a copy of the SQLite queue's
// items table and key index, with the queue's pragmas (synchronous=FULL, WAL).
func rawSQLiteInsert(b *testing.B, dir string) (func(n int), func()) {
	b.Helper()
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, filepath.Join(dir, "raw.db"), sqlitedb.Options{})
	require.NoError(b, err)
	_, err = db.ExecContext(ctx, `CREATE TABLE items (id INTEGER PRIMARY KEY AUTOINCREMENT, payload BLOB NOT NULL,
		key BLOB NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, enqueued_at INTEGER NOT NULL);
		CREATE UNIQUE INDEX items_key ON items (key) WHERE length(key) > 0`)
	require.NoError(b, err)
	var stmt *sql.Stmt
	stmt, err = db.PrepareContext(ctx, `INSERT INTO items (payload, key, enqueued_at) VALUES (?, ?, ?)`)
	require.NoError(b, err)
	keys := &keySource{}
	return func(n int) {
			for range n {
				if _, err := stmt.ExecContext(ctx, benchPayload, []byte(keys.key()), time.Now().UnixNano()); err != nil {
					b.Fatal(err)
				}
			}
		}, func() {
			stmt.Close()
			db.Close()
		}
}
