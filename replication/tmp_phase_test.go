package replication_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/ledger"
	r "github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

func BenchmarkTmpPhases(b *testing.B) {
	for _, batch := range []int{100, 500} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			ctx := context.Background()
			db, err := sqlitedb.Open(ctx, b.TempDir()+"/x.db", sqlitedb.Options{})
			require.NoError(b, err)
			defer db.Close()
			st, err := r.OpenStore(ctx, db, r.StoreOptions{})
			require.NoError(b, err)
			cdb, err := sqlitedb.Open(ctx, b.TempDir()+"/c.db", sqlitedb.Options{})
			require.NoError(b, err)
			defer cdb.Close()
			_, err = r.OpenStore(ctx, cdb, r.StoreOptions{})
			require.NoError(b, err)
			value := []byte(`{"title":"benchmark note","body":"a value of a typical size for a small JSON document","n":12345}`)
			clock := syncproto.NewClock("bench-client", nil)
			var batches []r.Batch
			for i := 0; i < b.N; i++ {
				if i%batch == 0 {
					batches = append(batches, r.Batch{Tenant: "bench", ClientID: "bench-client", At: time.UnixMilli(time.Now().UnixMilli()).UTC()})
				}
				bb := &batches[len(batches)-1]
				bb.Writes = append(bb.Writes, r.Write{Policy: r.PolicyLWW, Mutation: syncproto.Mutation{OpID: uuid.Must(uuid.NewV7()).String(), Model: "notes", Key: fmt.Sprintf("note-%09d", i), Op: syncproto.OpPut, Value: value, HLC: clock.Now()}})
			}
			var tBegin, tLoad, tDecide, tSave, tCommit, tCeil time.Duration
			b.ResetTimer()
			seq := int64(0)
			for _, bt := range batches {
				// ceiling
				t0 := time.Now()
				tx, _ := cdb.BeginTx(ctx, nil)
				o, _ := tx.Prepare(rawOplogSQL)
				rc, _ := tx.Prepare(rawRecordSQL)
				dc, _ := tx.Prepare(rawLedgerSQL)
				for _, w := range bt.Writes {
					m := &w.Mutation
					now := time.Now().UnixMilli()
					res, err := o.ExecContext(ctx, "bench", m.Model, m.Key, m.OpID, string(m.Op), []byte(m.Value), 1, m.HLC.Wall, int64(m.HLC.Logical), m.HLC.Origin, "bench-client", now)
					require.NoError(b, err)
					seq, _ = res.LastInsertId()
					_, err = rc.ExecContext(ctx, "bench", m.Model, m.Key, []byte(m.Value), 1, m.HLC.Wall, int64(m.HLC.Logical), m.HLC.Origin, false, m.OpID, seq, m.HLC.String())
					require.NoError(b, err)
					res2, _ := json.Marshal(syncproto.Result{OpID: m.OpID, Status: syncproto.StatusApplied, Version: 1, Seq: uint64(seq), HLC: m.HLC})
					_, err = dc.ExecContext(ctx, "bench", m.OpID, m.HLC.Wall, []byte(m.Digest()), res2, now)
					require.NoError(b, err)
				}
				require.NoError(b, tx.Commit())
				tCeil += time.Since(t0)

				t0 = time.Now()
				tx, _ = db.BeginTx(ctx, nil)
				s := st.In(tx)
				t1 := time.Now()
				v, err := s.Load(ctx, &bt)
				require.NoError(b, err)
				t2 := time.Now()
				fx, err := r.Decide(v, bt)
				require.NoError(b, err)
				t3 := time.Now()
				require.NoError(b, s.Save(ctx, &fx))
				t4 := time.Now()
				require.NoError(b, tx.Commit())
				t5 := time.Now()
				tBegin += t1.Sub(t0)
				tLoad += t2.Sub(t1)
				tDecide += t3.Sub(t2)
				tSave += t4.Sub(t3)
				tCommit += t5.Sub(t4)
			}
			n := float64(b.N)
			us := func(d time.Duration) float64 { return float64(d.Microseconds()) / n }
			b.ReportMetric(us(tBegin), "begin_us")
			b.ReportMetric(us(tLoad), "load_us")
			b.ReportMetric(us(tDecide), "decide_us")
			b.ReportMetric(us(tSave), "save_us")
			b.ReportMetric(us(tCommit), "commit_us")
			b.ReportMetric(us(tBegin+tLoad+tDecide+tSave+tCommit), "apply_us")
			b.ReportMetric(us(tCeil), "ceil_us")
			_ = ledger.Hit
		})
	}
}

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
