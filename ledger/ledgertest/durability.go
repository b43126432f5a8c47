package ledgertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/ledger"
)

// workerReport is what one parallel worker saw.
type workerReport struct {
	won     bool   // it recorded the contested op
	replay  []byte // the contested op's result it was answered with
	records int
	err     error
}

func (s suite) parallelTransactions(t *testing.T) {
	const workers, txs, perTx = 4, 10, 5
	st := s.open(t, ledger.Options{MaxAge: time.Hour})
	ctx := t.Context()
	contested := op("tenant-c", 0)
	// Decided two hours before base, due by age: the pruner evicts them
	// among the writers.
	aged := make([]ledger.Decision, 50)
	for i := range aged {
		aged[i] = at("tenant-p", fmt.Sprintf("aged-%02d", i), base.Add(-2*time.Hour+time.Duration(i)*time.Second), base.Add(-2*time.Hour))
	}
	record(t, st, aged...)

	worker := func(w int) workerReport {
		var rep workerReport
		for i := range txs {
			tx, err := st.Begin(ctx)
			if err != nil {
				rep.err = err
				return rep
			}
			if err := s.workerTx(ctx, tx, w, i, perTx, contested, &rep); err != nil {
				rep.err = fmt.Errorf("worker %d tx %d: %w", w, i, err)
				_ = tx.Rollback()
				return rep
			}
			if err := tx.Commit(); err != nil {
				rep.err = err
				return rep
			}
			rep.records += perTx
		}
		return rep
	}

	reports := make(chan workerReport, workers)
	side := make(chan error, 2)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { reports <- worker(w) })
	}
	wg.Go(func() { // prunes between and among the writers
		for range 5 {
			if _, err := st.Prune(ctx, base); err != nil {
				side <- err
				return
			}
		}
		side <- nil
	})
	wg.Go(func() { // reads committed state meanwhile
		for range 50 {
			if _, _, err := st.Get(ctx, contested.Scope, contested.OpID); err != nil {
				side <- err
				return
			}
			if _, err := st.Stats(ctx); err != nil {
				side <- err
				return
			}
		}
		side <- nil
	})
	wg.Wait()
	close(reports)
	close(side)
	for err := range side {
		require.NoError(t, err)
	}

	winners, records := 0, 0
	var winner []byte
	var replays [][]byte
	for rep := range reports {
		require.NoError(t, rep.err)
		records += rep.records
		if rep.won {
			winners++
			winner = rep.replay
		} else {
			replays = append(replays, rep.replay)
		}
	}
	require.Equal(t, 1, winners, "exactly one transaction decides the contested op")
	for _, r := range replays {
		require.Equal(t, winner, r, "the others are answered with the winner's result")
	}
	require.Equal(t, workers*txs*perTx, records)
	requireStats(t, st, ledger.Stats{Entries: records + 1, Scopes: workers + 2, MaxFloor: aged[len(aged)-1].OpTime})
	requireFloor(t, st, contested.Scope, time.Time{})
	got, ok, err := st.Get(ctx, contested.Scope, contested.OpID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, winner, got.Result)
}

// workerTx is one transaction of parallelTransactions' worker w: in its
// first transaction it races for the contested op, then it decides perTx
// ops of its own.
func (suite) workerTx(ctx context.Context, tx Txn, w, i, perTx int, contested ledger.Decision, rep *workerReport) error {
	if i == 0 {
		got, o, err := tx.Lookup(ctx, contested.Scope, contested.OpID, contested.OpTime)
		if err != nil {
			return err
		}
		switch o {
		case ledger.Miss:
			mine := contested
			mine.Result = []byte(fmt.Sprintf("decided by worker %d", w))
			if err := tx.Record(ctx, mine); err != nil {
				return err
			}
			rep.won, rep.replay = true, mine.Result
		case ledger.Hit:
			rep.replay = got.Result
		default:
			return fmt.Errorf("contested op: outcome %s", o)
		}
	}
	for j := range perTx {
		d := op(fmt.Sprintf("tenant-%d", w), i*perTx+j)
		_, o, err := tx.Lookup(ctx, d.Scope, d.OpID, d.OpTime)
		if err != nil {
			return err
		}
		if o != ledger.Miss {
			return fmt.Errorf("op %q: outcome %s before it was recorded", d.OpID, o)
		}
		if err := tx.Record(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

func (s suite) durableAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	opts := ledger.Options{MaxEntries: 3, Now: func() time.Time { return decidedAt }}
	st := s.h.Open(t, dir, opts)
	a, b := ops("tenant-a", 0, 5), ops("tenant-b", 0, 2)
	record(t, st, append(a, b...)...)
	prune(t, st, base, 2)
	floor := a[1].OpTime
	require.NoError(t, st.Close())

	st = s.h.Open(t, dir, opts)
	requireStats(t, st, ledger.Stats{Entries: 5, Scopes: 2, MaxFloor: floor})
	requireFloor(t, st, "tenant-a", floor)
	requireFloor(t, st, "tenant-b", time.Time{})
	requireOutcomes(t, st, a, func(i int) ledger.Outcome {
		if i < 2 {
			return ledger.Expired
		}
		return ledger.Hit
	})
	tx := begin(t, st)
	require.ErrorIs(t, tx.Record(t.Context(), ledger.Decision{Scope: "tenant-a", OpID: "late", OpTime: floor}), ledger.ErrExpired)
	require.NoError(t, tx.Rollback())

	// The counts survived too: two more in tenant-a are two too many.
	record(t, st, ops("tenant-a", 5, 7)...)
	prune(t, st, base, 2)
	floor = a[3].OpTime

	// A reopen with a clock far behind still does not lower a floor.
	prune(t, st, base.Add(-365*24*time.Hour), 0)
	require.NoError(t, st.Close())
	st = s.h.Open(t, dir, opts)
	requireStats(t, st, ledger.Stats{Entries: 5, Scopes: 2, MaxFloor: floor})
	requireFloor(t, st, "tenant-a", floor)
}

// migratesLegacyFloor opens a ledger of the previous format, whose one
// floor covered every scope: the decisions are kept, and that floor becomes
// the floor of every scope, those it held decisions for and any other (a
// scope whose decisions were all evicted left no other trace).
func (s suite) migratesLegacyFloor(t *testing.T) {
	dir := t.TempDir()
	a, b := ops("tenant-a", 0, 6), ops("tenant-b", 0, 2)
	legacyFloor := a[2].OpTime // the old format kept decisions at or below its floor
	s.h.Legacy(t, dir, append(a, b...), legacyFloor)
	opts := ledger.Options{MaxEntries: 4, Now: func() time.Time { return decidedAt }}
	st := s.h.Open(t, dir, opts)

	requireStats(t, st, ledger.Stats{Entries: 8, Scopes: 2, MaxFloor: legacyFloor})
	for _, scope := range []string{"tenant-a", "tenant-b", "tenant-new"} {
		requireFloor(t, st, scope, legacyFloor)
		_, o := lookup(t, st, ledger.Decision{Scope: scope, OpID: "unknown", OpTime: legacyFloor})
		require.Equal(t, ledger.Expired, o, "scope %q at the old floor", scope)
		_, o = lookup(t, st, ledger.Decision{Scope: scope, OpID: "unknown", OpTime: legacyFloor.Add(time.Millisecond)})
		require.Equal(t, ledger.Miss, o, "scope %q above the old floor", scope)
	}
	requireOutcomes(t, st, append(a, b...), func(int) ledger.Outcome { return ledger.Hit })
	for _, d := range append(a, b...) {
		got, ok, err := st.Get(t.Context(), d.Scope, d.OpID)
		require.NoError(t, err)
		require.True(t, ok)
		requireSame(t, d, got)
	}

	// Retention works per scope on the migrated decisions: tenant-a is two
	// over the count, tenant-b under it.
	prune(t, st, base, 2)
	requireFloor(t, st, "tenant-a", legacyFloor) // a0, a1 are below it
	requireStats(t, st, ledger.Stats{Entries: 6, Scopes: 2, MaxFloor: legacyFloor})
	record(t, st,
		at("tenant-a", "new-1", legacyFloor.Add(time.Millisecond), base.Add(time.Hour)),
		at("tenant-a", "new-2", legacyFloor.Add(2*time.Millisecond), base.Add(time.Hour)))
	prune(t, st, base, 2)
	requireFloor(t, st, "tenant-a", a[3].OpTime)
	requireFloor(t, st, "tenant-b", legacyFloor)

	// Opened again, it is not migrated twice.
	require.NoError(t, st.Close())
	st = s.h.Open(t, dir, opts)
	requireStats(t, st, ledger.Stats{Entries: 6, Scopes: 2, MaxFloor: a[3].OpTime})
	requireFloor(t, st, "tenant-a", a[3].OpTime)
	requireOutcomes(t, st, append(a[4:], b...), func(int) ledger.Outcome { return ledger.Hit })
}

// migratesLegacyWithoutFloor opens a ledger of the previous format that
// never evicted: nothing expires.
func (s suite) migratesLegacyWithoutFloor(t *testing.T) {
	dir := t.TempDir()
	a := ops("tenant-a", 0, 3)
	s.h.Legacy(t, dir, a, time.Time{})
	st := s.h.Open(t, dir, ledger.Options{Now: func() time.Time { return decidedAt }})
	requireStats(t, st, held(3, 1))
	requireFloor(t, st, "tenant-a", time.Time{})
	requireOutcomes(t, st, a, func(int) ledger.Outcome { return ledger.Hit })
	record(t, st, at("tenant-a", "wall-time-zero", time.UnixMilli(0), base))
}
