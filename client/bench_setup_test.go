package client_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/ledger"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// What the client benchmarks (bench_test.go) set up before their timers: the
// server, the workload, the filled queue, the seeded database, and the raw
// SQLite ceilings they are compared with.

// benchProcessStart approximates when the test binary's -test.timeout began
// to count (package initialization runs first, so it errs early).
var benchProcessStart = time.Now()

// benchContext bounds one benchmark: SYNCD_BENCH_WAIT from now (default
// defaultWait), but never past the test binary's own timeout less a margin,
// so a client that never finishes fails the benchmark with its progress
// rather than the binary's panic.
func benchContext(b *testing.B) context.Context {
	b.Helper()
	wait := defaultWait
	if v := os.Getenv(envWait); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("%s=%q: want a positive duration", envWait, v)
		}
		wait = d
	}
	deadline := time.Now().Add(wait)
	if f := flag.Lookup("test.timeout"); f != nil {
		if t, ok := f.Value.(flag.Getter).Get().(time.Duration); ok && t > 0 {
			deadline = minTime(deadline, benchProcessStart.Add(t-min(time.Minute, t/10)))
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	b.Cleanup(cancel)
	return ctx
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// benchSyncd is a real syncd on a loopback port, with its defaults, and the
// token of the one client a benchmark runs against it.
type benchSyncd struct {
	url   string
	token string
}

// startBenchSyncd serves the syncd database at dataPath (created if missing,
// or seeded before) on a loopback port until the benchmark ends.
func startBenchSyncd(b *testing.B, dataPath, clientID string) *benchSyncd {
	b.Helper()
	srv := syncdtest.Start(b, server.Config{DataPath: dataPath})
	return &benchSyncd{url: srv.URL, token: srv.Member(b, benchTenant, clientID)}
}

// benchKey and benchValue are record i's key and value in every benchmark:
// a short JSON note, as an app writes.
func benchKey(i int) string { return fmt.Sprintf("note-%07d", i) }

func benchValue(i int) []byte {
	return fmt.Appendf(nil, `{"text":"note %07d: a short note of about sixty bytes, as apps write"}`, i)
}

// benchWorkload makes the writes the replay benchmarks queue: puts of new
// keys, each with a fresh UUIDv7 op id and a stamp of one device's clock, as
// Client.Put makes them. It is safe for concurrent use.
type benchWorkload struct{ clock *syncproto.Clock }

func newBenchWorkload(clientID string) *benchWorkload {
	return &benchWorkload{clock: syncproto.NewClock(clientID, nil)}
}

func (w *benchWorkload) mutation(i int) syncproto.Mutation {
	return syncproto.Mutation{
		OpID: uuid.Must(uuid.NewV7()).String(), Model: benchModel, Key: benchKey(i),
		Op: syncproto.OpPut, Value: benchValue(i), HLC: w.clock.Now(),
	}
}

// benchMutations makes n writes of one device.
func benchMutations(b *testing.B, clientID string, n int) []syncproto.Mutation {
	w := newBenchWorkload(clientID)
	muts := make([]syncproto.Mutation, n)
	for i := range muts {
		muts[i] = w.mutation(i)
		require.NoError(b, muts[i].Validate())
	}
	return muts
}

// fillProducers is how many goroutines enqueue at once: more than the SQLite
// queue's group-commit size (256), so every commit carries a full group.
const fillProducers = 512

// benchFillQueue creates the SQLite queue at path holding mutation(i) for i
// in [0, n), enqueued as Client.Put enqueues (payload: the mutation's JSON;
// key: its op id) through offlinequeue's public API by fillProducers
// concurrent producers, so the queue's group commit batches them. Queue
// order follows the producers' interleaving, not i.
func benchFillQueue(ctx context.Context, b *testing.B, path string, n int, mutation func(i int) syncproto.Mutation) {
	b.Helper()
	q, err := offlinequeue.OpenSQLite(path, offlinequeue.SQLiteOptions{Options: offlinequeue.Options{MaxDepth: max(n, offlinequeue.DefaultMaxDepth)}})
	require.NoError(b, err)
	defer q.Close()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, fillProducers)
	for range fillProducers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				m := mutation(i)
				payload, err := json.Marshal(&m)
				if err == nil {
					_, err = q.Enqueue(ctx, payload, m.OpID)
				}
				if err != nil {
					errs <- fmt.Errorf("enqueue write %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	require.NoError(b, <-errs)
	depth, err := q.Len(ctx)
	require.NoError(b, err)
	require.Equal(b, n, depth)
}

// replayCeiling creates, at path, syncd's records, oplog and ledger tables
// through the replication and ledger packages themselves (same columns,
// indexes and key shapes) with syncd's pragmas (sqlitedb: WAL,
// synchronous=FULL), then does for each write exactly the row writes syncd's
// apply path keeps: the oplog insert, the record upsert and the ledger
// insert, in transactions of one push batch (syncproto.MaxBatch). It leaves
// out the apply path's reads (record, ledger lookup, ledger floor) and its
// one-row applied-seq update, and computes the digests and stored results
// before the clock starts. It returns the seconds the writes took.
func replayCeiling(ctx context.Context, b *testing.B, path string, muts []syncproto.Mutation) float64 {
	b.Helper()
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{})
	require.NoError(b, err)
	defer db.Close()
	_, err = replication.NewRecords(ctx, db)
	require.NoError(b, err)
	_, err = replication.NewSQLiteLog(ctx, db, replication.LogOptions{})
	require.NoError(b, err)
	_, err = ledger.NewSQL(ctx, db, ledger.Options{})
	require.NoError(b, err)

	digests, results := make([][]byte, len(muts)), make([][]byte, len(muts))
	for i := range muts {
		m := &muts[i]
		digests[i] = []byte(m.Digest())
		// A fresh oplog numbers the writes 1, 2, ... in order.
		results[i], err = json.Marshal(syncproto.Result{OpID: m.OpID, Status: syncproto.StatusApplied, Version: 1, Seq: uint64(i + 1), HLC: m.HLC})
		require.NoError(b, err)
	}
	prepare := func(query string) *sql.Stmt {
		stmt, err := db.PrepareContext(ctx, query)
		require.NoError(b, err)
		b.Cleanup(func() { stmt.Close() })
		return stmt
	}
	appendOp := prepare(`INSERT INTO oplog (tenant, model, key, op_id, op, value, version, wall, logical, origin, client_id, applied_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	upsert := prepare(`INSERT INTO records (tenant, model, key, value, version, wall, logical, origin, deleted, op_id, seq, hlc)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (tenant, model, key) DO UPDATE SET value = excluded.value, version = excluded.version, hlc = excluded.hlc,
			wall = excluded.wall, logical = excluded.logical, origin = excluded.origin, deleted = excluded.deleted,
			op_id = excluded.op_id, seq = excluded.seq`)
	decide := prepare(`INSERT INTO ledger_decisions (scope, op_id, op_time, digest, result, decided_at) VALUES (?, ?, ?, ?, ?, ?)`)

	start := time.Now()
	for lo := 0; lo < len(muts); lo += syncproto.MaxBatch {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(b, err)
		app, ups, dec := tx.StmtContext(ctx, appendOp), tx.StmtContext(ctx, upsert), tx.StmtContext(ctx, decide)
		for i := lo; i < min(lo+syncproto.MaxBatch, len(muts)); i++ {
			m := &muts[i]
			now := time.Now().UnixMilli()
			res, err := app.ExecContext(ctx, benchTenant, m.Model, m.Key, m.OpID, string(m.Op), []byte(m.Value), 1,
				m.HLC.Wall, int64(m.HLC.Logical), m.HLC.Origin, m.HLC.Origin, now)
			require.NoError(b, err)
			seq, err := res.LastInsertId()
			require.NoError(b, err)
			_, err = ups.ExecContext(ctx, benchTenant, m.Model, m.Key, []byte(m.Value), 1,
				m.HLC.Wall, int64(m.HLC.Logical), m.HLC.Origin, false, m.OpID, seq, m.HLC.String())
			require.NoError(b, err)
			_, err = dec.ExecContext(ctx, benchTenant, m.OpID, m.HLC.Wall, digests[i], results[i], now)
			require.NoError(b, err)
		}
		require.NoError(b, tx.Commit())
	}
	return time.Since(start).Seconds()
}

// seedWriter is the device that wrote the records BenchmarkInitialSync
// seeds; seedStamp is record i's timestamp (in the past, a millisecond apart).
const seedWriter = "seed-writer"

func seedStamp(i int) syncproto.Timestamp {
	const wall = 1_767_225_600_000 // 2026-01-01T00:00:00Z
	return syncproto.Timestamp{Wall: wall + int64(i), Origin: seedWriter}
}

// seedTxRows is how many records one seeding transaction writes.
const seedTxRows = 50_000

// seedSyncd creates syncd's database at dataPath holding n records (version
// 1 of benchKey(i) in benchModel of benchTenant), each with its oplog entry,
// written through replication's SQLiteLog.AppendAll and Records.Put in
// transactions of seedTxRows. It returns the oplog head.
func seedSyncd(ctx context.Context, b *testing.B, dataPath string, n int) uint64 {
	b.Helper()
	db, err := sqlitedb.Open(ctx, dataPath, sqlitedb.Options{})
	require.NoError(b, err)
	defer db.Close()
	records, err := replication.NewRecords(ctx, db)
	require.NoError(b, err)
	oplog, err := replication.NewSQLiteLog(ctx, db, replication.LogOptions{})
	require.NoError(b, err)
	for lo := 0; lo < n; lo += seedTxRows {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(b, err)
		for i := lo; i < min(lo+seedTxRows, n); i++ {
			e := replication.NewEntry(replication.Record{
				Tenant: benchTenant, Model: benchModel, Key: benchKey(i), Value: benchValue(i),
				Version: 1, HLC: seedStamp(i), OpID: uuid.Must(uuid.NewV7()).String(),
			}, seedWriter)
			e.Seq = uint64(i + 1) // the database is new: entry i is seq i+1
			es, err := oplog.AppendAll(ctx, tx, []replication.Entry{e})
			require.NoError(b, err)
			require.NoError(b, records.Put(ctx, tx, es[0].Record()))
		}
		require.NoError(b, tx.Commit())
	}
	bounds, err := oplog.Bounds(ctx, replication.Scope{AllTenants: true})
	require.NoError(b, err)
	require.Equal(b, uint64(n), bounds.Head)
	return bounds.Head
}

// replicaRecordsTable has the shape of the client replica's records table
// (client/replica.go), for replicaCeiling.
const replicaRecordsTable = `CREATE TABLE records (
	model   TEXT NOT NULL,
	key     TEXT NOT NULL,
	value   BLOB,
	version INTEGER NOT NULL,
	hlc     TEXT NOT NULL,
	wall    INTEGER NOT NULL,
	deleted INTEGER NOT NULL,
	PRIMARY KEY (model, key)
) WITHOUT ROWID`

// ceilingChunk is how many rows replicaCeiling makes between timed inserts.
const ceilingChunk = 10_000

// replicaCeiling creates at path a table of the replica's records shape, with
// the replica's pragmas (sqlitedb: WAL, synchronous=FULL), and inserts the n
// records seedSyncd seeds, in one transaction. Rows are made in chunks
// outside the clock; it returns the seconds the transaction took.
func replicaCeiling(ctx context.Context, b *testing.B, path string, n int) float64 {
	b.Helper()
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{})
	require.NoError(b, err)
	defer db.Close()
	_, err = db.ExecContext(ctx, replicaRecordsTable)
	require.NoError(b, err)

	type row struct {
		key, hlc string
		value    []byte
		wall     int64
	}
	rows := make([]row, ceilingChunk)
	var elapsed time.Duration
	timed := func(fn func()) {
		start := time.Now()
		fn()
		elapsed += time.Since(start)
	}
	// A context that cannot be cancelled: with one that can, the SQLite
	// driver starts a goroutine per statement to watch it, and the ceiling
	// measured that rather than SQLite (below the path it bounds).
	raw := context.WithoutCancel(ctx)
	var tx *sql.Tx
	var insert *sql.Stmt
	timed(func() {
		tx, err = db.BeginTx(ctx, nil)
		require.NoError(b, err)
		insert, err = tx.PrepareContext(ctx, `INSERT INTO records (model, key, value, version, hlc, wall, deleted) VALUES (?, ?, ?, ?, ?, ?, ?)`)
		require.NoError(b, err)
	})
	for lo := 0; lo < n; lo += ceilingChunk {
		chunk := rows[:min(ceilingChunk, n-lo)]
		for j := range chunk {
			ts := seedStamp(lo + j)
			chunk[j] = row{key: benchKey(lo + j), hlc: ts.String(), value: benchValue(lo + j), wall: ts.Wall}
		}
		timed(func() {
			for _, r := range chunk {
				_, err := insert.ExecContext(raw, benchModel, r.key, r.value, 1, r.hlc, r.wall, false)
				require.NoError(b, err)
			}
		})
	}
	timed(func() { require.NoError(b, tx.Commit()) })
	return elapsed.Seconds()
}
