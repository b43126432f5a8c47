package offlinequeue_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/internal/sqlitedb"
)

// benchPayload is a mutation of the size the client queues for a short note.
var benchPayload = []byte(`{"op_id":"0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","model":"notes","key":"note-0042",` +
	`"op":"put","value":{"text":"a short note of about sixty bytes, as apps write"},"hlc":"1733140000000.0.phone-1"}`)

// durableKind is one durable queue and the ceiling it is measured against.
type durableKind struct {
	name string
	open func(b *testing.B, dir string) offlinequeue.Queue
	// ceiling performs n of the raw operation the queue's durability costs
	// and returns its rate per second.
	ceiling func(b *testing.B, dir string, n int) float64
}

var durableKinds = []durableKind{
	{
		name: "file",
		open: func(b *testing.B, dir string) offlinequeue.Queue {
			q, err := offlinequeue.OpenFile(filepath.Join(dir, "queue.ndjson"), offlinequeue.FileOptions{})
			require.NoError(b, err)
			return q
		},
		ceiling: rawAppendFsync,
	},
	{
		name: "sqlite",
		open: func(b *testing.B, dir string) offlinequeue.Queue {
			q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
			require.NoError(b, err)
			return q
		},
		ceiling: rawSQLiteInsert,
	},
}

// BenchmarkEnqueue measures each durable queue's keyed enqueue rate with 1
// and with 16 concurrent producers, each beside what bounds it, measured in
// the same run (the machine's fsync rate is too noisy to compare across runs):
//
//	producers=1:  enq/s, ceiling/s (file: write+fsync of the exact line the
//	              queue writes; sqlite: one-row transactions on the queue's
//	              own table and index, same pragmas), x_ceiling = enq/s over
//	              ceiling/s (target >= 0.8)
//	producers=16: enq/s, x_single = enq/s over one producer's rate measured
//	              just before on a fresh queue (group commit; target >= 8)
func BenchmarkEnqueue(b *testing.B) {
	for _, k := range durableKinds {
		b.Run(k.name+"/producers=1", func(b *testing.B) {
			dir := b.TempDir()
			q := k.open(b, dir)
			defer q.Close()
			b.ResetTimer()
			rate := enqueueRate(b, q, b.N, 1, 0)
			b.StopTimer()
			ceiling := k.ceiling(b, dir, b.N)
			b.ReportMetric(rate, "enq/s")
			b.ReportMetric(ceiling, "ceiling/s")
			b.ReportMetric(rate/ceiling, "x_ceiling")
		})
		b.Run(k.name+"/producers=16", func(b *testing.B) {
			single := func() float64 {
				q := k.open(b, b.TempDir())
				defer q.Close()
				return enqueueRate(b, q, max(100, min(b.N/8, 1000)), 1, 0)
			}()
			q := k.open(b, b.TempDir())
			defer q.Close()
			b.ResetTimer()
			rate := enqueueRate(b, q, b.N, 16, 1<<32)
			b.StopTimer()
			b.ReportMetric(rate, "enq/s")
			b.ReportMetric(rate/single, "x_single")
		})
	}
}

// enqueueRate enqueues n keyed items from producers goroutines and returns
// items per second. Keys start at keyBase so runs on one queue never dedup.
func enqueueRate(b *testing.B, q offlinequeue.Queue, n, producers int, keyBase int64) float64 {
	b.Helper()
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range producers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if _, err := q.Enqueue(ctx, benchPayload, fmt.Sprintf("op-%d", keyBase+i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// rawAppendFsync appends the exact line the file queue writes for one
// enqueue, n times, each followed by fsync.
func rawAppendFsync(b *testing.B, dir string, n int) float64 {
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
	defer f.Close()
	start := time.Now()
	for range n {
		if _, err := f.Write(line); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// rawSQLiteInsert runs n one-row transactions on a copy of the SQLite
// queue's items table and key index, with the queue's pragmas
// (synchronous=FULL, WAL).
func rawSQLiteInsert(b *testing.B, dir string, n int) float64 {
	b.Helper()
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, filepath.Join(dir, "raw.db"), sqlitedb.Options{})
	require.NoError(b, err)
	defer db.Close()
	_, err = db.ExecContext(ctx, `CREATE TABLE items (id INTEGER PRIMARY KEY AUTOINCREMENT, payload BLOB NOT NULL,
		key BLOB NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, enqueued_at INTEGER NOT NULL);
		CREATE UNIQUE INDEX items_key ON items (key) WHERE length(key) > 0`)
	require.NoError(b, err)
	stmt, err := db.PrepareContext(ctx, `INSERT INTO items (payload, key, enqueued_at) VALUES (?, ?, ?)`)
	require.NoError(b, err)
	defer stmt.Close()
	start := time.Now()
	for i := range n {
		if _, err := stmt.ExecContext(ctx, benchPayload, []byte(fmt.Sprintf("op-%d", i)), time.Now().UnixNano()); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}
