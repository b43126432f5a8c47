package replication_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/fakeclock"
	r "github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/replication/logtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// harness returns s's log as the conformance suite sees it.
func (s *store) harness() logtest.Harness {
	return logtest.Harness{Log: s.log, Now: s.clock.Now, Advance: s.clock.Advance,
		Append: func(ctx context.Context, es ...r.Entry) ([]r.Entry, error) {
			tx, err := s.db.BeginTx(ctx, nil)
			if err != nil {
				return nil, err
			}
			out, err := s.log.AppendNext(ctx, tx, es...)
			if err != nil {
				return nil, errors.Join(err, tx.Rollback())
			}
			return out, tx.Commit()
		}}
}

func read(t *testing.T, s *store, req r.ReadRequest) r.Page {
	t.Helper()
	return logtest.Read(t, s.harness(), req)
}

func TestSQLiteLogConformance(t *testing.T) {
	logtest.Run(t, func(t *testing.T, ret r.Retention) logtest.Harness {
		return openStore(t, ret, r.Retention{}).harness()
	})
}

// TestMemoryLogConformance runs the whole conformance suite on Memory's
// oplog, which serves the simulation's change feed.
func TestMemoryLogConformance(t *testing.T) {
	logtest.Run(t, func(t *testing.T, ret r.Retention) logtest.Harness {
		clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		mem, err := r.NewMemory(r.MemoryOptions{Log: ret, Now: clock.Now})
		require.NoError(t, err)
		return logtest.Harness{Log: mem, Now: clock.Now, Advance: clock.Advance,
			Append: func(_ context.Context, es ...r.Entry) ([]r.Entry, error) { return mem.AppendNext(es...) }}
	})
}

// TestMemoryApplyRetention holds Memory written the simulation's way
// (Apply, and CompactTo's bound of its own) to the per-tenant retention
// rule.
func TestMemoryApplyRetention(t *testing.T) {
	logtest.RunRetention(t, func(t *testing.T, keep int64) logtest.Retaining {
		mem, err := r.NewMemory(r.MemoryOptions{})
		require.NoError(t, err)
		at := time.UnixMilli(1_700_000_000_000).UTC()
		return logtest.Retaining{
			Feed: mem,
			Append: func(t testing.TB, es ...r.Entry) []r.Entry {
				var out []r.Entry
				for _, e := range es {
					fx, err := mem.Apply(context.Background(), &r.Batch{Tenant: e.Tenant, ClientID: e.ClientID, At: at, Writes: []r.Write{{
						Mutation: syncproto.Mutation{OpID: e.OpID, Model: e.Model, Key: e.Key, Op: e.Op, Value: e.Value, HLC: e.HLC},
						Policy:   syncproto.PolicyLWW,
					}}})
					require.NoError(t, err)
					require.Len(t, fx.Entries, 1)
					out = append(out, fx.Entries...)
				}
				return out
			},
			Compact: func(testing.TB) int64 { return int64(mem.CompactTo(int(keep))) },
		}
	})
}

// TestSQLiteLogMigratesVersion1: an oplog of schema version 1 (one count
// bound and one floor for the whole log) keeps its entries, counts them per
// tenant, and keeps its floor as every tenant's, known or not, so a cursor
// that was expired stays expired; it is migrated once (Migrate, the first
// step of the database's migrations).
func TestSQLiteLogMigratesVersion1(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	_, err := db.ExecContext(ctx, `
		CREATE TABLE oplog (
			seq INTEGER PRIMARY KEY AUTOINCREMENT, tenant TEXT NOT NULL, model TEXT NOT NULL, key TEXT NOT NULL,
			op_id TEXT NOT NULL, op TEXT NOT NULL CHECK (op IN ('put', 'delete')), value BLOB,
			version INTEGER NOT NULL CHECK (version > 0), wall INTEGER NOT NULL, logical INTEGER NOT NULL,
			origin TEXT NOT NULL, client_id TEXT NOT NULL, applied_at INTEGER NOT NULL);
		CREATE INDEX oplog_tenant_seq ON oplog (tenant, seq);`)
	require.NoError(t, err)
	for i, tenant := range []string{"a", "a", "gone", "a", "a", "b", "b"} {
		_, err := db.ExecContext(ctx, `INSERT INTO oplog (tenant, model, key, op_id, op, value, version, wall, logical, origin, client_id, applied_at)
			VALUES (?, 'notes', ?, ?, 'put', '1', 1, 1000, 0, 'c1', 'c1', 0)`, tenant, fmt.Sprint(i), fmt.Sprint("op-", i))
		require.NoError(t, err)
	}
	// Version 1 compacted the log's oldest three entries: its floor is 3.
	_, err = db.ExecContext(ctx, `DELETE FROM oplog WHERE seq <= 3`)
	require.NoError(t, err)

	clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	open := func() *r.SQLiteLog {
		_, err := r.Migrate(ctx, db)
		require.NoError(t, err)
		l, err := r.NewSQLiteLog(ctx, db, r.LogOptions{Retention: r.Retention{MaxEntries: 1, MaxAge: -1}, Now: clock.Now})
		require.NoError(t, err)
		return l
	}
	l := open()
	for _, tenant := range []string{"a", "b", "gone", "never"} {
		b, err := l.Bounds(ctx, r.Scope{Tenant: tenant})
		require.NoError(t, err)
		require.Equal(t, r.Bounds{Floor: 3, Oldest: 4, Head: 7}, b, tenant)
	}
	_, err = l.Read(ctx, r.ReadRequest{After: 2, Scope: r.Scope{Tenant: "gone", AllModels: true}})
	require.ErrorIs(t, err, r.ErrCursorExpired, "a cursor expired before the migration stays expired")

	l = open() // not migrated twice
	n, err := l.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "a and b each hold 2 and keep 1: the counts were taken at the migration")
	floors, err := l.Floors(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, r.Floors{All: 3, Tenants: map[string]uint64{"a": 4, "b": 6}}, floors)
}

// TestSQLiteLogCompactInIsBoundedAndPerTenant: a replicated compaction job
// removes at most its limit, from the tenant most beyond its bound first,
// and a sequence of jobs ends where Compact ends.
func TestSQLiteLogCompactInIsBoundedAndPerTenant(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, r.Retention{MaxEntries: 2, MaxAge: -1}, r.Retention{})
	h := s.harness()
	for i := range 8 {
		logtest.AppendCommitted(t, h, logtest.Entry("big", "notes", fmt.Sprint(i)))
	}
	for i := range 4 {
		logtest.AppendCommitted(t, h, logtest.Entry("small", "notes", fmt.Sprint(i)))
	}
	compactIn := func(limit int) int64 {
		var n int64
		inTx(t, s.db, func(tx *sql.Tx) (err error) {
			n, err = s.log.CompactIn(ctx, tx, s.clock.Now(), limit)
			return err
		})
		return n
	}
	require.Equal(t, int64(3), compactIn(3))
	floors, err := s.log.Floors(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, map[string]uint64{"big": 3}, floors.Tenants, "the tenant most beyond its bound goes first")
	require.Equal(t, int64(5), compactIn(100), "big's other 3 and small's 2")
	require.Zero(t, compactIn(100))
	floors, err = s.log.Floors(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, map[string]uint64{"big": 6, "small": 10}, floors.Tenants)
}

// TestSQLiteLogGapFreeAfterRollback: a rolled-back append and a failed
// statement inside a committed transaction leave no gap in the seqs
// readers see.
func TestSQLiteLogGapFreeAfterRollback(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, r.Retention{}, r.Retention{})
	h := s.harness()
	logtest.AppendCommitted(t, h, logtest.Entry("t1", "notes", "a"))

	tx, err := s.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	for _, k := range []string{"x", "y", "z"} {
		_, err := s.log.AppendNext(ctx, tx, logtest.Entry("t1", "notes", k))
		require.NoError(t, err)
	}
	require.NoError(t, tx.Rollback())

	inTx(t, s.db, func(tx *sql.Tx) error {
		// A statement that fails inside the transaction (the table's CHECK
		// refuses the op) rolls back only itself, seq included.
		_, err := tx.ExecContext(ctx, `INSERT INTO oplog
			(tenant, model, key, op_id, op, value, version, wall, logical, origin, client_id, applied_at)
			VALUES ('t1', 'notes', 'bad', 'op-bad', 'upsert', NULL, 1, 1, 0, 'c1', 'c1', 0)`)
		require.ErrorContains(t, err, "CHECK constraint failed")
		_, err = s.log.AppendNext(ctx, tx, logtest.Entry("t1", "notes", "b"))
		return err
	})
	got := logtest.AppendCommitted(t, h, logtest.Entry("t1", "notes", "c"))

	require.Equal(t, uint64(3), got[0].Seq)
	page := read(t, s, r.ReadRequest{Scope: r.Scope{AllTenants: true, AllModels: true}})
	require.Equal(t, []uint64{1, 2, 3}, logtest.Seqs(page.Entries))
}

// TestSQLiteLogReopenKeepsHead: the head survives compacting everything and
// opening the log again.
func TestSQLiteLogReopenKeepsHead(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, r.Retention{MaxEntries: 1}, r.Retention{})
	logtest.AppendCommitted(t, s.harness(), logtest.Entry("t1", "notes", "a"), logtest.Entry("t1", "notes", "b"))
	s.clock.Advance(r.DefaultLogRetention.MaxAge + time.Second)
	n, err := s.log.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), n)

	reopened, err := r.NewSQLiteLog(ctx, s.db, r.LogOptions{Now: s.clock.Now})
	require.NoError(t, err)
	b, err := reopened.Bounds(ctx, r.Scope{Tenant: "t1"})
	require.NoError(t, err)
	require.Equal(t, r.Bounds{Floor: 2, Oldest: 3, Head: 2}, b)
	select {
	case <-reopened.Notify(1):
	default:
		t.Fatal("a reopened log must know its head")
	}
	h := s.harness()
	h.Log = reopened
	require.Equal(t, []uint64{3}, logtest.Seqs(logtest.AppendCommitted(t, h, logtest.Entry("t1", "notes", "c"))))
}

// TestSQLiteLogCompactionStopsAtYoungEntry: entries are removed only as a
// prefix, so an entry whose AppliedAt is out of order (the clock stepped
// back) stops age-based compaction rather than leaving a hole.
func TestSQLiteLogCompactionStopsAtYoungEntry(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, r.Retention{MaxEntries: -1, MaxAge: time.Hour, Chunk: 2}, r.Retention{})
	h := s.harness()
	logtest.AppendCommitted(t, h, logtest.Entry("t1", "notes", "old1"), logtest.Entry("t1", "notes", "old2"), logtest.Entry("t1", "notes", "old3"))
	s.clock.Advance(2 * time.Hour)
	logtest.AppendCommitted(t, h, logtest.Entry("t1", "notes", "young"))
	s.clock.Advance(-2 * time.Hour)
	logtest.AppendCommitted(t, h, logtest.Entry("t1", "notes", "old-again"))
	s.clock.Advance(2*time.Hour + time.Minute)

	n, err := s.log.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	b, err := s.log.Bounds(ctx, r.Scope{Tenant: "t1"})
	require.NoError(t, err)
	require.Equal(t, r.Bounds{Floor: 3, Oldest: 4, Head: 5}, b)
}

// TestSQLiteLogReadDuringWrite: readers use deferred transactions even on
// a handle whose transactions are immediate, so a long write transaction
// does not block the change feed, and readers see only committed entries.
func TestSQLiteLogReadDuringWrite(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, r.Retention{}, r.Retention{})
	logtest.AppendCommitted(t, s.harness(), logtest.Entry("t1", "notes", "a"))

	tx, err := s.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = s.log.AppendNext(ctx, tx, logtest.Entry("t1", "notes", "b"))
	require.NoError(t, err)

	page := read(t, s, r.ReadRequest{Scope: r.Scope{Tenant: "t1", AllModels: true}})
	require.Equal(t, []uint64{1}, logtest.Seqs(page.Entries))
	require.Equal(t, uint64(1), page.Head)
	b, err := s.log.Bounds(ctx, r.Scope{Tenant: "t1"})
	require.NoError(t, err)
	require.Equal(t, uint64(1), b.Head)
}
