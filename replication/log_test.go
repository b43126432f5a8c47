package replication_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	r "github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/replication/logtest"
)

// harness returns s's log as the conformance suite sees it.
func (s *store) harness() logtest.Harness {
	return logtest.Harness{Log: s.log, DB: s.db, Now: s.clock.Now, Advance: s.clock.Advance}
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
		_, err := s.log.Append(ctx, tx, logtest.Entry("t1", "notes", k))
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
		_, err = s.log.Append(ctx, tx, logtest.Entry("t1", "notes", "b"))
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
	b, err := reopened.Bounds(ctx)
	require.NoError(t, err)
	require.Equal(t, r.Bounds{Oldest: 3, Head: 2}, b)
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
	b, err := s.log.Bounds(ctx)
	require.NoError(t, err)
	require.Equal(t, r.Bounds{Oldest: 4, Head: 5}, b)
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
	_, err = s.log.Append(ctx, tx, logtest.Entry("t1", "notes", "b"))
	require.NoError(t, err)

	page := read(t, s, r.ReadRequest{Scope: r.Scope{Tenant: "t1", AllModels: true}})
	require.Equal(t, []uint64{1}, logtest.Seqs(page.Entries))
	require.Equal(t, uint64(1), page.Head)
	b, err := s.log.Bounds(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), b.Head)
}
