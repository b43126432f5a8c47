package server_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncproto"
)

// benchWindow is how many pushes the benchmark client keeps in flight.
const benchWindow = 4

// BenchmarkServerApply measures syncd's apply throughput over a real
// websocket for pushes of 1, 100 and 500 mutations: one client, up to
// benchWindow pushes in flight, every mutation a put of a new key with a
// fresh UUIDv7 op id, on a database file with syncd's defaults
// (WAL, synchronous=FULL). One op is one mutation; ns/op is the server's.
//
// Beside it, in the same run, the ceiling: plain SQL on a database opened
// the same way (same pragmas) with the same tables and indexes (created by
// the replication and ledger packages themselves), doing the row writes the
// apply path does per mutation (oplog insert, record upsert, ledger
// insert) in one transaction per push. It leaves out what the server does
// besides those writes (the websocket, decoding and validation, the ledger
// and record reads, the policy, the applied-seq update and version guard),
// so "ratio" (mut/s over ceiling_mut/s) is the share of the storage ceiling
// the whole server path reaches.
func BenchmarkServerApply(b *testing.B) {
	for _, size := range []int{1, 100, 500} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) { benchServerApply(b, size) })
	}
}

func benchServerApply(b *testing.B, size int) {
	pushes := benchPushes(b, b.N, size)
	// The ceiling runs half before and half after the server, so that a
	// change in the machine's load during the run weighs on both.
	ceiling := newRawCeiling(b)
	half := len(pushes) / 2
	ceiling.write(b, pushes[:half])

	ts := startServer(b, server.Config{RequestsPerSecond: 1e9, RequestBurst: 1 << 30, Quotas: noQuotas, RetentionInterval: -1})
	c, _ := session(b, ts, ts.Member(b, "bench", "bench-client"), "bench-client")
	frames := make([][]byte, len(pushes))
	for i, muts := range pushes {
		frame, err := syncproto.Encode(&syncproto.Push{ID: fmt.Sprintf("p%d", i), Mutations: muts})
		require.NoError(b, err)
		frames[i] = frame
	}

	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	sent, inFlight := 0, 0
	for answered := 0; answered < len(frames); answered++ {
		for ; inFlight < benchWindow && sent < len(frames); sent, inFlight = sent+1, inFlight+1 {
			if err := c.conn.Write(ctx, websocket.MessageText, frames[sent]); err != nil {
				b.Fatal(err)
			}
		}
		_, frame, err := c.conn.Read(ctx)
		if err != nil {
			b.Fatal(err)
		}
		msg, err := syncproto.Decode(frame)
		if err != nil {
			b.Fatal(err)
		}
		pr, ok := msg.(*syncproto.PushResult)
		if !ok || len(pr.Results) != len(pushes[answered]) || pr.Results[0].Status != syncproto.StatusApplied {
			b.Fatalf("push %d answered %s", answered, frame)
		}
		inFlight--
	}
	elapsed := time.Since(start)
	b.StopTimer()
	ceiling.write(b, pushes[half:])

	rate := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(rate, "mut/s")
	b.ReportMetric(ceiling.rate(), "ceiling_mut/s")
	b.ReportMetric(rate/ceiling.rate(), "ratio")
}

// benchPushes returns n new-key puts in pushes of size (the last one may be
// shorter).
func benchPushes(b *testing.B, n, size int) [][]syncproto.Mutation {
	clock := syncproto.NewClock("bench-client", nil)
	value := []byte(`{"title":"benchmark note","body":"a value of a typical size for a small JSON document","n":12345}`)
	var pushes [][]syncproto.Mutation
	for i := range n {
		if i%size == 0 {
			pushes = append(pushes, make([]syncproto.Mutation, 0, size))
		}
		op := newOpID(b)
		last := &pushes[len(pushes)-1]
		*last = append(*last, syncproto.Mutation{OpID: op, Model: "notes", Key: fmt.Sprintf("note-%09d", i), Op: syncproto.OpPut, Value: value, HLC: clock.Now()})
	}
	return pushes
}

// The ceiling's statements: the same rows the apply path writes.
const (
	rawOplogSQL = `INSERT INTO oplog (tenant, model, key, op_id, op, value, version, wall, logical, origin, client_id, applied_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	rawRecordSQL = `INSERT INTO records (tenant, model, key, value, version, wall, logical, origin, deleted, op_id, seq, hlc)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (tenant, model, key) DO UPDATE SET value = excluded.value, version = excluded.version,
		hlc = excluded.hlc, wall = excluded.wall, logical = excluded.logical, origin = excluded.origin,
		deleted = excluded.deleted, op_id = excluded.op_id, seq = excluded.seq`
	rawLedgerSQL = `INSERT INTO ledger_decisions (scope, op_id, op_time, digest, result, decided_at)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (scope, op_id) DO NOTHING`
)

// rawCeiling writes the apply path's rows with plain SQL, one transaction
// per push, on a database of its own, and keeps the time it took.
type rawCeiling struct {
	db      *sql.DB
	seq     uint64 // oplog rows written
	elapsed time.Duration
}

func newRawCeiling(b *testing.B) *rawCeiling {
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, filepath.Join(b.TempDir(), "ceiling.db"), sqlitedb.Options{})
	require.NoError(b, err)
	b.Cleanup(func() { db.Close() })
	_, err = replication.Migrate(ctx, db)
	require.NoError(b, err)
	return &rawCeiling{db: db}
}

// rate is the mutations written per second.
func (rc *rawCeiling) rate() float64 { return float64(rc.seq) / rc.elapsed.Seconds() }

// write writes the rows of pushes, timing the writes alone: what the server
// computes per mutation (digest, stored result) is computed beforehand.
func (rc *rawCeiling) write(b *testing.B, pushes [][]syncproto.Mutation) {
	ctx := context.Background()
	type row struct {
		m      *syncproto.Mutation
		digest []byte
		result []byte
	}
	rows := make([][]row, len(pushes))
	seq := rc.seq
	for i, muts := range pushes {
		for j := range muts {
			seq++
			m := &muts[j]
			res, err := json.Marshal(syncproto.Result{OpID: m.OpID, Status: syncproto.StatusApplied, Version: 1, Seq: seq, HLC: m.HLC})
			require.NoError(b, err)
			rows[i] = append(rows[i], row{m: m, digest: []byte(m.Digest()), result: res})
		}
	}

	start := time.Now()
	for _, push := range rows {
		tx, err := rc.db.BeginTx(ctx, nil)
		require.NoError(b, err)
		oplog, records, decisions := prepare(b, tx, rawOplogSQL), prepare(b, tx, rawRecordSQL), prepare(b, tx, rawLedgerSQL)
		for _, r := range push {
			m, now := r.m, time.Now().UnixMilli()
			res, err := oplog.ExecContext(ctx, "bench", m.Model, m.Key, m.OpID, string(m.Op), []byte(m.Value), 1,
				m.HLC.Wall, int64(m.HLC.Logical), m.HLC.Origin, "bench-client", now)
			require.NoError(b, err)
			seq, err := res.LastInsertId()
			require.NoError(b, err)
			_, err = records.ExecContext(ctx, "bench", m.Model, m.Key, []byte(m.Value), 1,
				m.HLC.Wall, int64(m.HLC.Logical), m.HLC.Origin, false, m.OpID, seq, m.HLC.String())
			require.NoError(b, err)
			_, err = decisions.ExecContext(ctx, "bench", m.OpID, m.HLC.Wall, r.digest, r.result, now)
			require.NoError(b, err)
		}
		require.NoError(b, tx.Commit())
	}
	rc.elapsed += time.Since(start)
	rc.seq = seq
}

func prepare(b *testing.B, tx *sql.Tx, query string) *sql.Stmt {
	st, err := tx.Prepare(query)
	require.NoError(b, err)
	return st
}
