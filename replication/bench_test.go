package replication_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	r "github.com/syncd-dev/syncd/replication"
)

// The row writes of the apply path, per mutation, measured three ways for
// batches (one transaction each) of 1, 100 and 500 mutations, on a real
// database file with syncd's pragmas (WAL, synchronous=FULL):
//
//   - raw: the ceiling, plain SQL doing the same two row writes (record
//     upsert, oplog insert) into the same tables;
//   - store: Log.Append plus Records.Put (validation, the applied-seq
//     update, the version guard);
//   - applier: Applier.Apply under LWW (record read, Resolve, and the
//     store's writes).
//
// Every mutation creates a new key with a UUIDv7 op id, as a pushing client
// would. store and applier report "of_raw", their throughput as a fraction
// of raw's at the same batch size in the same run (run raw first, that is,
// do not filter it out). The server's own benchmark compares itself with
// these numbers.
func BenchmarkRowWrites(b *testing.B) {
	for _, batch := range []int{1, 100, 500} {
		for _, mode := range []string{"raw", "store", "applier"} {
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
	resolver, err := r.NewResolver(r.ResolverOptions{})
	require.NoError(b, err)
	applier := r.NewApplier(resolver, s.log, s.records, s.conflicts)
	value := []byte(`{"title":"benchmark note","body":"a value of a typical size for a small JSON document","n":12345}`)

	write := func(tx *sql.Tx, i int) error {
		p := r.Proposal{
			Tenant: "tenant-1", OpID: uuid.Must(uuid.NewV7()).String(), Model: "notes",
			Key: fmt.Sprintf("note-%09d", i), Op: r.OpPut, Value: value,
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
			e, err := s.log.Append(ctx, tx, r.NewEntry(r.Record{
				Tenant: p.Tenant, Model: p.Model, Key: p.Key, Value: p.Value, Version: 1, HLC: p.HLC, OpID: p.OpID,
			}, p.ClientID))
			if err != nil {
				return err
			}
			return s.records.Put(ctx, tx, e.Record())
		default:
			_, err := applier.Apply(ctx, tx, p)
			return err
		}
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
			require.NoError(b, tx.Commit())
			tx = nil
		}
	}
	if tx != nil {
		require.NoError(b, tx.Commit())
	}

	nsPerOp := float64(b.Elapsed().Nanoseconds()) / float64(i)
	b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "mutations/s")
	if mode == "raw" {
		rawNsPerOp.Store(batch, nsPerOp)
	} else if raw, ok := rawNsPerOp.Load(batch); ok {
		b.ReportMetric(raw.(float64)/nsPerOp, "of_raw")
	}
}
