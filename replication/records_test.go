package replication_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	r "github.com/syncd-dev/syncd/replication"
)

// rec returns version v of tenant/model/key, changed by oplog seq.
func rec(tenant, model, key string, v, seq uint64) r.Record {
	return r.Record{
		Tenant: tenant, Model: model, Key: key, Value: []byte(fmt.Sprintf(`{"v":%d}`, v)),
		Version: v, HLC: ts(int64(1000+v), 0, "c1"), OpID: fmt.Sprintf("op-%s-%d", key, v), Seq: seq,
	}
}

func get(t *testing.T, s *store, tenant, model, key string) (r.Record, bool) {
	t.Helper()
	var (
		got    r.Record
		exists bool
	)
	inTx(t, s.db, func(tx *sql.Tx) error {
		var err error
		got, exists, err = s.records.Get(context.Background(), tx, tenant, model, key)
		return err
	})
	return got, exists
}

// tryPut runs Put in its own transaction, committing only on success.
func tryPut(t *testing.T, s *store, rec r.Record) error {
	t.Helper()
	tx, err := s.db.BeginTx(context.Background(), nil)
	require.NoError(t, err)
	if err := s.records.Put(context.Background(), tx, rec); err != nil {
		require.NoError(t, tx.Rollback())
		return err
	}
	return tx.Commit()
}

func TestRecordsPutGet(t *testing.T) {
	s := openStore(t, r.Retention{}, r.Retention{})
	_, exists := get(t, s, "t1", "notes", "a")
	require.False(t, exists)

	require.NoError(t, tryPut(t, s, rec("t1", "notes", "a", 1, 1)))
	got, exists := get(t, s, "t1", "notes", "a")
	require.True(t, exists)
	require.Equal(t, rec("t1", "notes", "a", 1, 1), got)

	tomb := rec("t1", "notes", "a", 2, 2)
	tomb.Value, tomb.Deleted = nil, true
	require.NoError(t, tryPut(t, s, tomb))
	got, exists = get(t, s, "t1", "notes", "a")
	require.True(t, exists, "a tombstone exists")
	require.Equal(t, tomb, got)

	_, exists = get(t, s, "t2", "notes", "a")
	require.False(t, exists, "tenants do not share keys")
}

// TestRecordsGuardVersions: the store itself refuses a write that would
// leave a gap or repeat a version, and a seq that does not advance.
func TestRecordsGuardVersions(t *testing.T) {
	s := openStore(t, r.Retention{}, r.Retention{})
	require.NoError(t, tryPut(t, s, rec("t1", "notes", "a", 1, 1)))
	require.NoError(t, tryPut(t, s, rec("t1", "notes", "a", 2, 2)))

	require.ErrorIs(t, tryPut(t, s, rec("t1", "notes", "a", 4, 3)), r.ErrVersionGap, "gap")
	require.ErrorIs(t, tryPut(t, s, rec("t1", "notes", "a", 2, 3)), r.ErrVersionGap, "repeat")
	require.ErrorIs(t, tryPut(t, s, rec("t1", "notes", "a", 1, 3)), r.ErrVersionGap, "backwards")
	require.ErrorIs(t, tryPut(t, s, rec("t1", "notes", "b", 2, 3)), r.ErrVersionGap, "absent key starts at 1")
	require.ErrorIs(t, tryPut(t, s, rec("t1", "notes", "a", 3, 2)), r.ErrSeqNotNewer)
	require.ErrorIs(t, tryPut(t, s, rec("t1", "notes", "b", 1, 1)), r.ErrSeqNotNewer)

	for name, mutate := range map[string]func(*r.Record){
		"empty key":            func(x *r.Record) { x.Key = "" },
		"version 0":            func(x *r.Record) { x.Version = 0 },
		"seq 0":                func(x *r.Record) { x.Seq = 0 },
		"zero hlc":             func(x *r.Record) { x.HLC = ts(0, 0, "") },
		"tombstone with value": func(x *r.Record) { x.Deleted = true },
	} {
		bad := rec("t1", "notes", "a", 3, 3)
		mutate(&bad)
		require.ErrorIs(t, tryPut(t, s, bad), r.ErrInvalidRecord, name)
	}

	got, _ := get(t, s, "t1", "notes", "a")
	require.Equal(t, rec("t1", "notes", "a", 2, 2), got, "a refused write changed the record")
	require.NoError(t, tryPut(t, s, rec("t1", "notes", "a", 3, 3)))
}

// TestRecordsPutAll: a batch of records is stored in order, a key written
// twice counting its first write, with the applied seq advanced once; a
// gap anywhere in the batch fails it whole.
func TestRecordsPutAll(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, r.Retention{}, r.Retention{})
	batch := []r.Record{rec("t1", "notes", "a", 1, 1), rec("t1", "notes", "b", 1, 2), rec("t1", "notes", "a", 2, 3)}
	inTx(t, s.db, func(tx *sql.Tx) error { return s.records.PutAll(ctx, tx, batch) })
	got, _ := get(t, s, "t1", "notes", "a")
	require.Equal(t, batch[2], got)

	tx, err := s.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.ErrorIs(t, s.records.PutAll(ctx, tx, []r.Record{rec("t1", "notes", "c", 1, 4), rec("t1", "notes", "a", 4, 5)}), r.ErrVersionGap)
	require.ErrorIs(t, s.records.PutAll(ctx, tx, []r.Record{rec("t1", "notes", "c", 1, 5), rec("t1", "notes", "d", 1, 5)}), r.ErrSeqNotNewer, "seqs must increase")
	require.NoError(t, tx.Rollback())

	// New keys go in one statement; one that exists fails it, named.
	for refused, batch := range map[string][]r.Record{
		"b": {rec("t1", "notes", "c", 1, 4), rec("t1", "notes", "b", 1, 5), rec("t1", "notes", "d", 1, 6)},
		"c": {rec("t1", "notes", "c", 1, 4), rec("t1", "notes", "d", 1, 5), rec("t1", "notes", "c", 1, 6)},
	} {
		tx, err := s.db.BeginTx(ctx, nil)
		require.NoError(t, err)
		err = s.records.PutAll(ctx, tx, batch)
		require.ErrorIs(t, err, r.ErrVersionGap)
		require.ErrorContains(t, err, "put record notes/"+refused+" v1")
		require.NoError(t, tx.Rollback())
	}

	keys := []r.RecordKey{{Model: "notes", Key: "a"}, {Model: "notes", Key: "b"}, {Model: "notes", Key: "absent"}}
	inTx(t, s.db, func(tx *sql.Tx) error {
		all, err := s.records.GetAll(ctx, tx, "t1", keys)
		require.Equal(t, map[r.RecordKey]r.Record{keys[0]: batch[2], keys[1]: batch[1]}, all)
		return err
	})
}

func TestRecordsSnapshot(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, r.Retention{}, r.Retention{})
	seq := uint64(0)
	for _, k := range []struct{ tenant, model, key string }{
		{"t1", "todos", "b"}, {"t1", "notes", "z"}, {"t2", "notes", "a"}, {"t1", "notes", "a"}, {"", "notes", "n"},
	} {
		seq++
		require.NoError(t, tryPut(t, s, rec(k.tenant, k.model, k.key, 1, seq)))
	}
	tomb := rec("t1", "notes", "a", 2, seq+1)
	tomb.Value, tomb.Deleted = nil, true
	require.NoError(t, tryPut(t, s, tomb))

	collect := func(scope r.Scope) ([]string, uint64) {
		var keys []string
		head, err := s.records.Snapshot(ctx, scope, func(h uint64, x r.Record) error {
			keys = append(keys, fmt.Sprintf("%s/%s/%s@%d", x.Tenant, x.Model, x.Key, h))
			return nil
		})
		require.NoError(t, err)
		return keys, head
	}
	keys, head := collect(r.Scope{Tenant: "t1", AllModels: true})
	require.Equal(t, uint64(6), head)
	require.Equal(t, []string{"t1/notes/a@6", "t1/notes/z@6", "t1/todos/b@6"}, keys, "ordered by model and key, tombstone included")
	keys, _ = collect(r.Scope{Tenant: "t1", Models: []string{"todos"}})
	require.Equal(t, []string{"t1/todos/b@6"}, keys)
	keys, _ = collect(r.Scope{Tenant: "", AllModels: true})
	require.Equal(t, []string{"/notes/n@6"}, keys)
	keys, _ = collect(r.Scope{})
	require.Empty(t, keys, "the zero scope selects nothing")
	keys, _ = collect(r.Scope{AllTenants: true, AllModels: true})
	require.Len(t, keys, 5)
	keys, head = collect(r.Scope{Tenant: "nobody", AllModels: true})
	require.Empty(t, keys)
	require.Equal(t, uint64(6), head, "an empty snapshot still has a head")

	var got r.Record
	_, err := s.records.Snapshot(ctx, r.Scope{Tenant: "t1", Models: []string{"notes"}}, func(_ uint64, x r.Record) error {
		got = x
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, rec("t1", "notes", "z", 1, 2), got, "full records are streamed")
}

// TestRecordsSnapshotIsConsistent: writes committed while a snapshot is
// being streamed are not in it, and its head is the one it started with.
func TestRecordsSnapshotIsConsistent(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, r.Retention{}, r.Retention{})
	require.NoError(t, tryPut(t, s, rec("t1", "notes", "a", 1, 1)))
	require.NoError(t, tryPut(t, s, rec("t1", "notes", "b", 1, 2)))

	var seen []r.Record
	head, err := s.records.Snapshot(ctx, r.Scope{Tenant: "t1", AllModels: true}, func(_ uint64, x r.Record) error {
		if len(seen) == 0 {
			require.NoError(t, tryPut(t, s, rec("t1", "notes", "b", 2, 3)))
			require.NoError(t, tryPut(t, s, rec("t1", "notes", "c", 1, 4)))
		}
		seen = append(seen, x)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, uint64(2), head)
	require.Equal(t, []r.Record{rec("t1", "notes", "a", 1, 1), rec("t1", "notes", "b", 1, 2)}, seen)

	stop := errors.New("client went away")
	calls := 0
	_, err = s.records.Snapshot(ctx, r.Scope{Tenant: "t1", AllModels: true}, func(uint64, r.Record) error {
		calls++
		return stop
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, calls)
}

// TestRecordsPutLoggedWritesWhatPutAllWrites: the Store copies new keys
// from their oplog rows; every column of every row is what PutAll would
// have bound, tombstones, logical counters and later versions included.
func TestRecordsPutLoggedWritesWhatPutAllWrites(t *testing.T) {
	ctx := context.Background()
	tomb := rec("t1", "notes", "gone", 1, 3)
	tomb.Value, tomb.Deleted = nil, true
	ticked := rec("t1", "todos", "b", 1, 4)
	ticked.HLC = ts(1_733_140_000_000, 7, "client:a.b-c_d")
	batches := [][]r.Record{
		{rec("t1", "notes", "a", 1, 1), rec("t2", "notes", "a", 1, 2), tomb, ticked},
		{rec("t1", "notes", "a", 2, 5), rec("t1", "notes", "c", 1, 6), rec("t1", "notes", "c", 2, 7), rec("t1", "notes", "d", 1, 8)},
	}
	rows := func(put func(s *store, tx *sql.Tx, recs []r.Record) error) [][]any {
		s := openStore(t, r.Retention{}, r.Retention{})
		for _, recs := range batches {
			inTx(t, s.db, func(tx *sql.Tx) error {
				es := make([]r.Entry, len(recs))
				for i, rec := range recs {
					es[i] = r.NewEntry(rec, "client-1")
					es[i].Seq = rec.Seq
				}
				if _, err := s.log.AppendAll(ctx, tx, es); err != nil {
					return err
				}
				return put(s, tx, recs)
			})
		}
		q, err := s.db.QueryContext(ctx, `SELECT tenant, model, key, value, version, hlc, wall, logical, origin, deleted, op_id, seq,
			typeof(value), typeof(hlc), typeof(deleted) FROM records ORDER BY tenant, model, key`)
		require.NoError(t, err)
		defer q.Close()
		var out [][]any
		for q.Next() {
			row := make([]any, 15)
			ptrs := make([]any, len(row))
			for i := range row {
				ptrs[i] = &row[i]
			}
			require.NoError(t, q.Scan(ptrs...))
			out = append(out, row)
		}
		require.NoError(t, q.Err())
		return out
	}
	bound := rows(func(s *store, tx *sql.Tx, recs []r.Record) error { return s.records.PutAll(ctx, tx, recs) })
	logged := rows(func(s *store, tx *sql.Tx, recs []r.Record) error { return s.records.PutLogged(ctx, tx, recs) })
	require.Len(t, bound, 6)
	require.Equal(t, bound, logged)
}
