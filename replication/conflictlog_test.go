package replication_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	r "github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// conflict returns a conflict-log row about tenant/model/key number i.
func conflict(tenant, model string, i int) r.ConflictEntry {
	return r.ConflictEntry{
		Tenant: tenant, Model: model, Key: fmt.Sprint("k", i), Policy: syncproto.PolicyLWW, Reason: r.ReasonOlderHLC,
		Loser:  r.Side{OpID: fmt.Sprint("op-lose-", i), Value: []byte(`{"lose":true}`), HLC: ts(500, 1, "c2")},
		Winner: r.Side{OpID: fmt.Sprint("op-win-", i), Version: 3, Value: []byte(`{"win":true}`), HLC: ts(1000, 0, "c1")},
	}
}

// insertConflicts inserts cs in one transaction and returns their ids.
func insertConflicts(t *testing.T, s *store, cs ...r.ConflictEntry) []int64 {
	t.Helper()
	var ids []int64
	inTx(t, s.db, func(tx *sql.Tx) error {
		for _, c := range cs {
			id, err := s.conflicts.Insert(context.Background(), tx, c)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	return ids
}

func list(t *testing.T, s *store, f r.ConflictFilter) []r.ConflictEntry {
	t.Helper()
	got, err := s.conflicts.List(context.Background(), f)
	require.NoError(t, err)
	return got
}

func ids(cs []r.ConflictEntry) []int64 {
	out := make([]int64, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

func TestConflictLogInsertList(t *testing.T) {
	s := openStore(t, r.Retention{}, r.Retention{})
	require.Empty(t, list(t, s, r.ConflictFilter{Scope: r.Scope{AllTenants: true, AllModels: true}}))

	want := conflict("t1", "notes", 1)
	want.Winner.Deleted, want.Winner.Value = true, nil
	require.Equal(t, []int64{1}, insertConflicts(t, s, want))
	want.ID, want.DecidedAt = 1, s.clock.Now()
	require.Equal(t, []r.ConflictEntry{want}, list(t, s, r.ConflictFilter{Scope: r.Scope{Tenant: "t1", AllModels: true}}))

	// A hook rejecting a create has no winner.
	noWinner := conflict("t1", "notes", 2)
	noWinner.Winner = r.Side{}
	insertConflicts(t, s, noWinner)
	got := list(t, s, r.ConflictFilter{Scope: r.Scope{Tenant: "t1", AllModels: true}, Limit: 1})
	require.Len(t, got, 1)
	require.Equal(t, r.Side{}, got[0].Winner)
}

func TestConflictLogFilters(t *testing.T) {
	s := openStore(t, r.Retention{}, r.Retention{})
	insertConflicts(t, s, conflict("t1", "notes", 1), conflict("t2", "notes", 2), conflict("t1", "todos", 3)) // ids 1..3
	s.clock.Advance(time.Minute)
	since := s.clock.Now()
	insertConflicts(t, s, conflict("t1", "notes", 4), conflict("", "notes", 5)) // ids 4, 5

	require.Equal(t, []int64{5, 4, 3, 2, 1}, ids(list(t, s, r.ConflictFilter{Scope: r.Scope{AllTenants: true, AllModels: true}})), "newest first")
	require.Equal(t, []int64{4, 3, 1}, ids(list(t, s, r.ConflictFilter{Scope: r.Scope{Tenant: "t1", AllModels: true}})))
	require.Equal(t, []int64{5}, ids(list(t, s, r.ConflictFilter{Scope: r.Scope{Tenant: "", AllModels: true}})))
	require.Empty(t, list(t, s, r.ConflictFilter{}), "the zero scope selects nothing")
	require.Equal(t, []int64{4, 1}, ids(list(t, s, r.ConflictFilter{Scope: r.Scope{Tenant: "t1", Models: []string{"notes"}}})))
	require.Equal(t, []int64{5, 4}, ids(list(t, s, r.ConflictFilter{Scope: r.Scope{AllTenants: true, AllModels: true}, Since: since})))

	// Paging with BeforeID.
	var pages [][]int64
	before := int64(0)
	for range 5 {
		page := list(t, s, r.ConflictFilter{Scope: r.Scope{AllTenants: true, AllModels: true}, Limit: 2, BeforeID: before})
		if len(page) == 0 {
			break
		}
		pages = append(pages, ids(page))
		before = page[len(page)-1].ID
	}
	require.Equal(t, [][]int64{{5, 4}, {3, 2}, {1}}, pages)
}

func TestConflictLogRolledBackInsertLeavesNothing(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, r.Retention{}, r.Retention{})
	tx, err := s.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = s.conflicts.Insert(ctx, tx, conflict("t1", "notes", 1))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	require.Empty(t, list(t, s, r.ConflictFilter{Scope: r.Scope{AllTenants: true, AllModels: true}}))
	require.Equal(t, []int64{1}, insertConflicts(t, s, conflict("t1", "notes", 2)), "ids are not consumed by a rollback")
}

func TestConflictLogPrune(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, r.Retention{}, r.Retention{MaxEntries: 5, MaxAge: 24 * time.Hour, Chunk: 2})
	for i := range 8 {
		insertConflicts(t, s, conflict("t1", "notes", i)) // ids 1..8, one minute apart
		s.clock.Advance(time.Minute)
	}

	n, err := s.conflicts.Prune(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), n, "keeps the newest 5")
	require.Equal(t, []int64{8, 7, 6, 5, 4}, ids(list(t, s, r.ConflictFilter{Scope: r.Scope{AllTenants: true, AllModels: true}})))

	n, err = s.conflicts.Prune(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing more to prune")

	// Rows 4..8 were decided 3..7 minutes after the start; a day and five
	// minutes later, rows 4 and 5 are more than a day old.
	s.clock.Advance(24*time.Hour - 3*time.Minute)
	n, err = s.conflicts.Prune(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	require.Equal(t, []int64{8, 7, 6}, ids(list(t, s, r.ConflictFilter{Scope: r.Scope{AllTenants: true, AllModels: true}})))

	// Ids keep growing after pruning.
	require.Equal(t, []int64{9}, insertConflicts(t, s, conflict("t1", "notes", 9)))
}

// TestConflictLogPruneIsPerTenant: one tenant's flood of conflicts never
// prunes another tenant's history, and the in-transaction prune of a
// replicated job removes the same rows.
func TestConflictLogPruneIsPerTenant(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, r.Retention{}, r.Retention{MaxEntries: 3, Chunk: 4})
	insertConflicts(t, s, conflict("quiet", "notes", 1), conflict("quiet", "notes", 2)) // ids 1, 2
	for i := range 10 {
		insertConflicts(t, s, conflict("noisy", "notes", i)) // ids 3..12
	}
	var n int64
	inTx(t, s.db, func(tx *sql.Tx) (err error) {
		n, err = s.conflicts.PruneIn(ctx, tx, s.clock.Now(), 4)
		return err
	})
	require.Equal(t, int64(4), n, "one chunk")
	n, err := s.conflicts.Prune(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), n, "the rest")
	all := r.Scope{AllTenants: true, AllModels: true}
	require.Equal(t, []int64{12, 11, 10, 2, 1}, ids(list(t, s, r.ConflictFilter{Scope: all})))
}

func TestConflictLogDefaults(t *testing.T) {
	s := openStore(t, r.Retention{}, r.Retention{})
	for i := range 3 {
		insertConflicts(t, s, conflict("t1", "notes", i))
	}
	s.clock.Advance(r.DefaultConflictRetention.MaxAge - time.Millisecond)
	n, err := s.conflicts.Prune(context.Background())
	require.NoError(t, err)
	require.Zero(t, n)
	s.clock.Advance(2 * time.Millisecond)
	n, err = s.conflicts.Prune(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(3), n)

	var many []r.ConflictEntry
	for i := range r.MaxConflictListLimit + 5 {
		many = append(many, conflict("t1", "notes", i))
	}
	insertConflicts(t, s, many...)
	require.Len(t, list(t, s, r.ConflictFilter{Scope: r.Scope{Tenant: "t1", AllModels: true}}), r.DefaultConflictListLimit)
	require.Len(t, list(t, s, r.ConflictFilter{Scope: r.Scope{Tenant: "t1", AllModels: true}, Limit: 1 << 20}), r.MaxConflictListLimit)
}
