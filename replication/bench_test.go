package replication_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	r "github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// The row writes of the apply path, per mutation, measured three ways for
// batches (one transaction each) of 1, 100 and 500 mutations, on a real
// database file with syncd's pragmas (WAL, synchronous=FULL):
//
//   - raw: the ceiling, plain SQL doing the same two row writes (record
//     upsert, oplog insert) into the same tables;
//   - store: SQLiteLog.AppendAll plus Records.Put (validation, the applied-seq
//     update, the version guard);
//   - apply: the state machine's step, replication.Apply over a Store in
//     the transaction, one Batch per transaction under LWW (the record
//     and ledger reads, Decide, and the store's writes plus the ledger
//     row, a third row write the raw ceiling does not make; the server's
//     benchmark measures against a ceiling with all three).
//
// Every mutation creates a new key with a UUIDv7 op id, as a pushing client
// would. store and apply report "of_raw", their throughput as a fraction
// of raw's at the same batch size in the same run (run raw first, that is,
// do not filter it out). The server's own benchmark compares itself with
// these numbers.
func BenchmarkRowWrites(b *testing.B) {
	for _, batch := range []int{1, 100, 500} {
		for _, mode := range []string{"raw", "store", "apply"} {
			b.Run(fmt.Sprintf("%s/batch=%d", mode, batch), func(b *testing.B) {
				benchRowWrites(b, mode, batch)
			})
		}
	}
}

// rawNsPerOp remembers raw's cost per mutation by batch size, for of_raw.
var rawNsPerOp sync.Map

const (
	rawUpsertSQL = `INSERT INTO records (tenant, model, key, value, version, hlc, wall, logical, origin, deleted, op_id, seq)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (tenant, model, key) DO UPDATE SET value = excluded.value, version = excluded.version,
		hlc = excluded.hlc, wall = excluded.wall, logical = excluded.logical, origin = excluded.origin,
		deleted = excluded.deleted, op_id = excluded.op_id, seq = excluded.seq`
	rawAppendSQL = `INSERT INTO oplog (tenant, model, key, op_id, op, value, version, wall, logical, origin, client_id, applied_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

func benchRowWrites(b *testing.B, mode string, batch int) {
	ctx := context.Background()
	s := openStore(b, r.Retention{}, r.Retention{})
	st, err := r.OpenStore(ctx, s.db, r.StoreOptions{})
	require.NoError(b, err)
	var pending r.Batch
	value := []byte(`{"title":"benchmark note","body":"a value of a typical size for a small JSON document","n":12345}`)

	write := func(tx *sql.Tx, i int) error {
		p := r.Proposal{
			Tenant: "tenant-1", OpID: uuid.Must(uuid.NewV7()).String(), Model: "notes",
			Key: fmt.Sprintf("note-%09d", i), Op: syncproto.OpPut, Value: value,
			HLC: ts(1_700_000_000_000+int64(i), 0, "client-1"), ClientID: "client-1",
		}
		switch mode {
		case "raw":
			res, err := tx.ExecContext(ctx, rawAppendSQL, p.Tenant, p.Model, p.Key, p.OpID, "put", p.Value, 1,
				p.HLC.Wall, 0, p.HLC.Origin, p.ClientID, p.HLC.Wall)
			if err != nil {
				return err
			}
			seq, err := res.LastInsertId()
			if err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, rawUpsertSQL, p.Tenant, p.Model, p.Key, p.Value, 1, p.HLC.String(),
				p.HLC.Wall, 0, p.HLC.Origin, false, p.OpID, seq)
			return err
		case "store":
			es, err := s.log.AppendNext(ctx, tx, r.NewEntry(r.Record{
				Tenant: p.Tenant, Model: p.Model, Key: p.Key, Value: p.Value, Version: 1, HLC: p.HLC, OpID: p.OpID,
			}, p.ClientID))
			if err != nil {
				return err
			}
			return s.records.Put(ctx, tx, es[0].Record())
		default:
			pending.Tenant, pending.ClientID, pending.At = p.Tenant, p.ClientID, time.UnixMilli(p.HLC.Wall)
			pending.Writes = append(pending.Writes, r.Write{Mutation: mutationOf(p), Policy: syncproto.PolicyLWW})
			return nil
		}
	}
	commit := func(tx *sql.Tx) {
		if len(pending.Writes) > 0 {
			fx, err := r.Apply(ctx, st.In(tx), &pending)
			require.NoError(b, err)
			require.Len(b, fx.Entries, len(pending.Writes))
			pending.Writes = pending.Writes[:0]
		}
		require.NoError(b, tx.Commit())
	}

	var tx *sql.Tx
	i := 0
	for b.Loop() {
		if tx == nil {
			tx, err = s.db.BeginTx(ctx, nil)
			require.NoError(b, err)
		}
		require.NoError(b, write(tx, i))
		i++
		if i%batch == 0 {
			commit(tx)
			tx = nil
		}
	}
	if tx != nil {
		commit(tx)
	}

	nsPerOp := float64(b.Elapsed().Nanoseconds()) / float64(i)
	b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "mutations/s")
	if mode == "raw" {
		rawNsPerOp.Store(batch, nsPerOp)
	} else if raw, ok := rawNsPerOp.Load(batch); ok {
		b.ReportMetric(raw.(float64)/nsPerOp, "of_raw")
	}
}

// BenchmarkScopedApply measures the committer's apply path for writes of
// a scoped model (issue 21: committer CPU per write with 10,000 declared
// values within 1.2x of 10): scope project over tasks and members, members
// its membership model; the writer, alice, and bob are members of every
// one of N values in use (a membership row each); each op is one batch of
// 10 new tasks spread over the values, replication.Apply over the Store in
// one transaction, then the commit. cpu_us/write is the process's CPU
// time (user and system, getrusage) per task written, which the commit's
// fsync waits do not inflate; "cpu_of_10_values" is the 10,000-value run's
// over the 10-value run's, in the same process (run both, 10 first).
func BenchmarkScopedApply(b *testing.B) {
	var base float64
	for _, values := range []int{10, 10_000} {
		b.Run(fmt.Sprintf("values=%d", values), func(b *testing.B) {
			cpu := benchScopedApply(b, values)
			b.ReportMetric(cpu/scopedApplyWrites/1e3, "cpu_us/write")
			if values == 10 {
				base = cpu
			} else if base > 0 {
				b.ReportMetric(cpu/base, "cpu_of_10_values")
			}
		})
	}
}

// scopedApplyWrites is the number of tasks one op of BenchmarkScopedApply
// writes.
const scopedApplyWrites = 10

// cpuTime returns the CPU time the process used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchScopedApply runs BenchmarkScopedApply over n values and returns its
// CPU time per op in nanoseconds.
func benchScopedApply(b *testing.B, n int) float64 {
	ctx := context.Background()
	s := openStore(b, r.Retention{}, r.Retention{})
	scopes := &r.Scopes{}
	require.NoError(b, scopes.Set("project=tasks.project_id,members.project_id"))
	require.NoError(b, scopes.SetMembership("project=members:user"))
	st, err := r.OpenStore(ctx, s.db, r.StoreOptions{Scopes: scopes})
	require.NoError(b, err)
	wall := int64(1_700_000_000_000)
	apply := func(writes []r.Write) {
		tx, err := s.db.BeginTx(ctx, nil)
		require.NoError(b, err)
		batch := r.Batch{Tenant: "tenant-1", ClientID: "alice-1", User: "alice", At: time.UnixMilli(wall), Writes: writes}
		fx, err := r.Apply(ctx, st.In(tx), &batch)
		require.NoError(b, err)
		for i, res := range fx.Results {
			require.Equal(b, syncproto.StatusApplied, res.Status, "write %d: %+v", i, res)
		}
		require.NoError(b, tx.Commit())
	}
	put := func(model, key, value string) r.Write {
		wall++
		return r.Write{Policy: syncproto.PolicyLWW, Mutation: syncproto.Mutation{OpID: uuid.Must(uuid.NewV7()).String(),
			Model: model, Key: key, Op: syncproto.OpPut, Value: []byte(value), HLC: ts(wall, 0, "alice-1")}}
	}
	// alice founds every value (her own membership row), then adds bob.
	for _, user := range []string{"alice", "bob"} {
		var writes []r.Write
		for v := range n {
			writes = append(writes, put("members", fmt.Sprintf("%s-v%05d", user, v), fmt.Sprintf(`{"user":%q,"project_id":"v%05d"}`, user, v)))
			if len(writes) == 500 || v == n-1 {
				apply(writes)
				writes = nil
			}
		}
	}
	writes := make([]r.Write, scopedApplyWrites)
	i := 0
	var cpu time.Duration
	for b.Loop() {
		start := cpuTime(b)
		for j := range writes {
			writes[j] = put("tasks", fmt.Sprintf("task-%09d", i), fmt.Sprintf(`{"project_id":"v%05d","title":"a task"}`, (i*7919)%n))
			i++
		}
		apply(writes)
		cpu += cpuTime(b) - start
	}
	return float64(cpu.Nanoseconds()) / float64(b.N)
}
