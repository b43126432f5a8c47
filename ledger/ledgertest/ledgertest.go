// Package ledgertest is the conformance suite every ledger implementation
// passes. An implementation's tests call Run with a Harness that opens it:
//
//	func TestConformance(t *testing.T) { ledgertest.Run(t, harness) }
//
// The suite checks the promises of package ledger: lookup outcomes, response
// replay of the stored decision, scope isolation, refusal of empty op ids and
// duplicates, transaction visibility, retention by age and count with the
// coverage floor, chunked pruning, and parallel transactions.
package ledgertest

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/ledger"
)

// Txn is one transaction of the caller with the ledger bound to it.
type Txn interface {
	ledger.Tx
	// Commit and Rollback end the transaction; a second call fails with an
	// error matching sql.ErrTxDone.
	Commit() error
	Rollback() error
}

// Store is one open ledger as the suite drives it.
type Store interface {
	// Begin starts a write transaction. Like SQLite with BEGIN IMMEDIATE,
	// it may wait while another transaction is open, so the suite never
	// holds two open transactions on one goroutine.
	Begin(ctx context.Context) (Txn, error)
	Prune(ctx context.Context, now time.Time) (int, error)
	Stats(ctx context.Context) (ledger.Stats, error)
	Get(ctx context.Context, scope, opID string) (ledger.Decision, bool, error)
	// Close releases the store; the suite calls it before reopening.
	// Closing twice must be harmless.
	Close() error
}

// Harness opens the implementation under test.
type Harness struct {
	// Open opens the ledger kept in dir with opts, failing t on error, and
	// registers its Close with t.Cleanup. dir is empty for a new ledger;
	// after Close, Open with the same dir reopens what was left there.
	Open func(t *testing.T, dir string, opts ledger.Options) Store
	// Durable says that a reopened store keeps its decisions and floor. The
	// reopen cases run only for durable implementations.
	Durable bool
}

// base is the op time of the suite's first op; decidedAt is what the
// suite's clock returns, with sub-millisecond digits to check truncation.
var (
	base      = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	decidedAt = time.Date(2030, 1, 9, 0, 0, 0, 987_654_321, time.UTC)
)

// Run runs the conformance suite against h.
func Run(t *testing.T, h Harness) {
	s := suite{h: h}
	t.Run("MissOnEmptyLedger", s.missOnEmptyLedger)
	t.Run("RecordThenHit", s.recordThenHit)
	t.Run("StoredBytesAreCopies", s.storedBytesAreCopies)
	t.Run("SkipOnlyEmptyResult", s.skipOnlyEmptyResult)
	t.Run("ScopesAreIsolated", s.scopesAreIsolated)
	t.Run("EmptyOpIDNeverDecided", s.emptyOpIDNeverDecided)
	t.Run("ZeroOpTimeRefused", s.zeroOpTimeRefused)
	t.Run("DuplicateRecordRefused", s.duplicateRecordRefused)
	t.Run("RollbackDiscards", s.rollbackDiscards)
	t.Run("VisibleOnlyAfterCommit", s.visibleOnlyAfterCommit)
	t.Run("EndedTxRefuses", s.endedTxRefuses)
	t.Run("CanceledContext", s.canceledContext)
	t.Run("RetentionByCount", s.retentionByCount)
	t.Run("RetentionByAge", s.retentionByAge)
	t.Run("AgeFloorOnEmptyLedger", s.ageFloorOnEmptyLedger)
	t.Run("EvictedNeverMiss", s.evictedNeverMiss)
	t.Run("FloorMonotonic", s.floorMonotonic)
	t.Run("PruneInChunks", s.pruneInChunks)
	t.Run("ParallelTransactions", s.parallelTransactions)
	if h.Durable {
		t.Run("DurableAcrossReopen", s.durableAcrossReopen)
	}
}

type suite struct{ h Harness }

// open opens a new ledger with opts; a nil opts.Now becomes the suite clock.
func (s suite) open(t *testing.T, opts ledger.Options) Store {
	t.Helper()
	if opts.Now == nil {
		opts.Now = func() time.Time { return decidedAt }
	}
	return s.h.Open(t, t.TempDir(), opts)
}

// op is the suite's i-th op of scope: op time base + i seconds.
func op(scope string, i int) ledger.Decision {
	return ledger.Decision{
		Scope:     scope,
		OpID:      fmt.Sprintf("op-%06d", i),
		OpTime:    base.Add(time.Duration(i) * time.Second),
		Digest:    []byte(fmt.Sprintf("digest\x00%d", i)),
		Result:    []byte(fmt.Sprintf("result\x00%s/%d", scope, i)),
		DecidedAt: base.Add(time.Duration(i)*time.Second + time.Millisecond),
	}
}

// begin starts a transaction that the test's cleanup rolls back if the test
// left it open.
func begin(t *testing.T, st Store) Txn {
	t.Helper()
	tx, err := st.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

// record decides ds the way a caller does (Lookup says Miss, then Record),
// committing every 1,000 decisions.
func record(t *testing.T, st Store, ds ...ledger.Decision) {
	t.Helper()
	ctx := t.Context()
	for len(ds) > 0 {
		n := min(len(ds), 1000)
		tx := begin(t, st)
		for _, d := range ds[:n] {
			_, o, err := tx.Lookup(ctx, d.Scope, d.OpID, d.OpTime)
			require.NoError(t, err)
			require.Equal(t, ledger.Miss, o, "op %q before it was recorded", d.OpID)
			require.NoError(t, tx.Record(ctx, d))
		}
		require.NoError(t, tx.Commit())
		ds = ds[n:]
	}
}

// ops returns op(scope, i) for i in [from, to).
func ops(scope string, from, to int) []ledger.Decision {
	ds := make([]ledger.Decision, 0, to-from)
	for i := from; i < to; i++ {
		ds = append(ds, op(scope, i))
	}
	return ds
}

// lookup looks d up in a transaction of its own.
func lookup(t *testing.T, st Store, d ledger.Decision) (ledger.Decision, ledger.Outcome) {
	t.Helper()
	tx := begin(t, st)
	got, o, err := tx.Lookup(t.Context(), d.Scope, d.OpID, d.OpTime)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	return got, o
}

// requireOutcomes looks every d up in one transaction and requires want(i).
func requireOutcomes(t *testing.T, st Store, ds []ledger.Decision, want func(i int) ledger.Outcome) {
	t.Helper()
	tx := begin(t, st)
	for i, d := range ds {
		got, o, err := tx.Lookup(t.Context(), d.Scope, d.OpID, d.OpTime)
		require.NoError(t, err)
		require.Equal(t, want(i), o, "op %q at %s", d.OpID, d.OpTime)
		if o == ledger.Hit {
			requireSame(t, d, got)
		}
	}
	require.NoError(t, tx.Rollback())
}

// stored is d as the ledger gives it back: times truncated to the
// millisecond in UTC, a zero DecidedAt filled from the suite clock.
func stored(d ledger.Decision) ledger.Decision {
	if d.DecidedAt.IsZero() {
		d.DecidedAt = decidedAt
	}
	d.OpTime = d.OpTime.Truncate(time.Millisecond).UTC()
	d.DecidedAt = d.DecidedAt.Truncate(time.Millisecond).UTC()
	return d
}

// requireSame requires got to be the stored form of want.
func requireSame(t *testing.T, want, got ledger.Decision) {
	t.Helper()
	want = stored(want)
	require.Equal(t, want.Scope, got.Scope)
	require.Equal(t, want.OpID, got.OpID)
	require.True(t, want.OpTime.Equal(got.OpTime), "op time: want %s, got %s", want.OpTime, got.OpTime)
	require.Equal(t, time.UTC, got.OpTime.Location())
	require.True(t, bytes.Equal(want.Digest, got.Digest), "digest: want %q, got %q", want.Digest, got.Digest)
	require.True(t, bytes.Equal(want.Result, got.Result), "result: want %q, got %q", want.Result, got.Result)
	require.True(t, want.DecidedAt.Equal(got.DecidedAt), "decided at: want %s, got %s", want.DecidedAt, got.DecidedAt)
}

func requireStats(t *testing.T, st Store, entries int, floor time.Time) {
	t.Helper()
	got, err := st.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, entries, got.Entries, "entries")
	require.True(t, floor.Equal(got.Floor), "floor: want %s, got %s", floor, got.Floor)
}

func (s suite) missOnEmptyLedger(t *testing.T) {
	st := s.open(t, ledger.Options{})
	d := op("tenant-a", 1)
	got, o := lookup(t, st, d)
	require.Equal(t, ledger.Miss, o)
	require.Equal(t, ledger.Decision{}, got)
	_, ok, err := st.Get(t.Context(), d.Scope, d.OpID)
	require.NoError(t, err)
	require.False(t, ok)
	requireStats(t, st, 0, time.Time{})
}

func (s suite) recordThenHit(t *testing.T) {
	st := s.open(t, ledger.Options{})
	ctx := t.Context()
	binary := make([]byte, 512)
	for i := range binary {
		binary[i] = byte(i)
	}
	d := ledger.Decision{
		Scope:  "tenant-a",
		OpID:   "0190f3a2-7c1e-7d2a-9b1e-3f4c5d6e7f80",
		OpTime: base.Add(1_234_567 * time.Nanosecond), // truncated to base+1ms
		Digest: []byte{0xff, 0x00, 0xfe, 0x00},
		Result: binary,
		// DecidedAt left zero: the ledger stamps it from Options.Now.
	}

	tx := begin(t, st)
	_, o, err := tx.Lookup(ctx, d.Scope, d.OpID, d.OpTime)
	require.NoError(t, err)
	require.Equal(t, ledger.Miss, o)
	require.NoError(t, tx.Record(ctx, d))
	got, o, err := tx.Lookup(ctx, d.Scope, d.OpID, d.OpTime)
	require.NoError(t, err)
	require.Equal(t, ledger.Hit, o, "a transaction sees its own record")
	requireSame(t, d, got)
	require.NoError(t, tx.Commit())

	// The op time passed to a lookup does not matter once the op is held.
	got, o = lookup(t, st, ledger.Decision{Scope: d.Scope, OpID: d.OpID, OpTime: base.Add(time.Hour)})
	require.Equal(t, ledger.Hit, o)
	requireSame(t, d, got)
	got, ok, err := st.Get(ctx, d.Scope, d.OpID)
	require.NoError(t, err)
	require.True(t, ok)
	requireSame(t, d, got)
	requireStats(t, st, 1, time.Time{})
}

func (s suite) storedBytesAreCopies(t *testing.T) {
	st := s.open(t, ledger.Options{})
	ctx := t.Context()
	d := op("tenant-a", 1)
	want := op("tenant-a", 1)

	tx := begin(t, st)
	require.NoError(t, tx.Record(ctx, d))
	d.Digest[0], d.Result[0] = 'X', 'X' // the caller reuses its buffers
	got, o, err := tx.Lookup(ctx, d.Scope, d.OpID, d.OpTime)
	require.NoError(t, err)
	require.Equal(t, ledger.Hit, o)
	requireSame(t, want, got)
	got.Digest[0], got.Result[0] = 'Y', 'Y' // and scribbles on what it got
	require.NoError(t, tx.Commit())

	got, o = lookup(t, st, want)
	require.Equal(t, ledger.Hit, o)
	requireSame(t, want, got)
	got.Result[0] = 'Z'
	got, ok, err := st.Get(ctx, want.Scope, want.OpID)
	require.NoError(t, err)
	require.True(t, ok)
	requireSame(t, want, got)
}

func (s suite) skipOnlyEmptyResult(t *testing.T) {
	st := s.open(t, ledger.Options{})
	d := op("tenant-a", 1)
	d.Digest, d.Result = nil, []byte{}
	record(t, st, d)
	got, o := lookup(t, st, d)
	require.Equal(t, ledger.Hit, o)
	require.Nil(t, got.Digest)
	require.Nil(t, got.Result)
}

func (s suite) scopesAreIsolated(t *testing.T) {
	st := s.open(t, ledger.Options{})
	a, b, empty := op("tenant-a", 1), op("tenant-b", 1), op("", 1)
	require.Equal(t, a.OpID, b.OpID)
	record(t, st, a)
	_, o := lookup(t, st, b)
	require.Equal(t, ledger.Miss, o, "an op id decided in one scope is unknown in another")
	_, o = lookup(t, st, empty)
	require.Equal(t, ledger.Miss, o, "the empty scope is a scope of its own")

	record(t, st, b, empty)
	for _, d := range []ledger.Decision{a, b, empty} {
		got, o := lookup(t, st, d)
		require.Equal(t, ledger.Hit, o, "scope %q", d.Scope)
		requireSame(t, d, got)
	}
	requireStats(t, st, 3, time.Time{})
}

func (s suite) emptyOpIDNeverDecided(t *testing.T) {
	// A floor exists, so "never decided" must also mean "never expired".
	st := s.open(t, ledger.Options{MaxAge: time.Hour})
	ctx := t.Context()
	_, err := st.Prune(ctx, base.Add(2*time.Hour))
	require.NoError(t, err)

	tx := begin(t, st)
	for _, at := range []time.Time{base, base.Add(3 * time.Hour), {}} {
		got, o, err := tx.Lookup(ctx, "tenant-a", "", at)
		require.NoError(t, err)
		require.Equal(t, ledger.Miss, o, "empty op id at %s", at)
		require.Equal(t, ledger.Decision{}, got)
	}
	d := op("tenant-a", 3*3600)
	d.OpID = ""
	require.ErrorIs(t, tx.Record(ctx, d), ledger.ErrEmptyOpID)
	require.NoError(t, tx.Commit())
	requireStats(t, st, 0, base.Add(time.Hour))
}

func (s suite) zeroOpTimeRefused(t *testing.T) {
	st := s.open(t, ledger.Options{})
	ctx := t.Context()
	tx := begin(t, st)
	_, _, err := tx.Lookup(ctx, "tenant-a", "op-1", time.Time{})
	require.ErrorIs(t, err, ledger.ErrMissingOpTime)
	d := op("tenant-a", 1)
	d.OpTime = time.Time{}
	require.ErrorIs(t, tx.Record(ctx, d), ledger.ErrMissingOpTime)
	require.NoError(t, tx.Commit())
	requireStats(t, st, 0, time.Time{})
}

func (s suite) duplicateRecordRefused(t *testing.T) {
	st := s.open(t, ledger.Options{})
	ctx := t.Context()
	first := op("tenant-a", 1)
	second := first
	second.Digest, second.Result = []byte("other digest"), []byte("other result")

	tx := begin(t, st)
	require.NoError(t, tx.Record(ctx, first))
	require.ErrorIs(t, tx.Record(ctx, second), ledger.ErrAlreadyDecided, "within one transaction")
	require.NoError(t, tx.Commit(), "a refused Record leaves the transaction usable")

	tx = begin(t, st)
	require.ErrorIs(t, tx.Record(ctx, second), ledger.ErrAlreadyDecided, "in a later transaction")
	require.NoError(t, tx.Commit())

	got, o := lookup(t, st, first)
	require.Equal(t, ledger.Hit, o)
	requireSame(t, first, got)
	requireStats(t, st, 1, time.Time{})
}

func (s suite) rollbackDiscards(t *testing.T) {
	st := s.open(t, ledger.Options{})
	ctx := t.Context()
	d := op("tenant-a", 1)
	tx := begin(t, st)
	require.NoError(t, tx.Record(ctx, d))
	require.NoError(t, tx.Rollback())

	_, o := lookup(t, st, d)
	require.Equal(t, ledger.Miss, o)
	_, ok, err := st.Get(ctx, d.Scope, d.OpID)
	require.NoError(t, err)
	require.False(t, ok)
	requireStats(t, st, 0, time.Time{})
	record(t, st, d) // the op is free to be decided again
}

func (s suite) visibleOnlyAfterCommit(t *testing.T) {
	st := s.open(t, ledger.Options{})
	ctx := t.Context()
	d := op("tenant-a", 1)
	tx := begin(t, st)
	require.NoError(t, tx.Record(ctx, d))

	_, ok, err := st.Get(ctx, d.Scope, d.OpID)
	require.NoError(t, err)
	require.False(t, ok, "visible outside its transaction before commit")
	requireStats(t, st, 0, time.Time{})

	require.NoError(t, tx.Commit())
	got, ok, err := st.Get(ctx, d.Scope, d.OpID)
	require.NoError(t, err)
	require.True(t, ok)
	requireSame(t, d, got)
	requireStats(t, st, 1, time.Time{})
}

func (s suite) endedTxRefuses(t *testing.T) {
	st := s.open(t, ledger.Options{})
	ctx := t.Context()
	d := op("tenant-a", 1)
	tx := begin(t, st)
	_, _, err := tx.Lookup(ctx, d.Scope, d.OpID, d.OpTime)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())

	_, _, err = tx.Lookup(ctx, d.Scope, d.OpID, d.OpTime)
	require.Error(t, err, "lookup after commit")
	require.Error(t, tx.Record(ctx, d), "record after commit")
	require.ErrorIs(t, tx.Commit(), sql.ErrTxDone)
	require.ErrorIs(t, tx.Rollback(), sql.ErrTxDone)
	requireStats(t, st, 0, time.Time{})
}

func (s suite) canceledContext(t *testing.T) {
	st := s.open(t, ledger.Options{})
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	d := op("tenant-a", 1)

	tx := begin(t, st)
	_, _, err := tx.Lookup(canceled, d.Scope, d.OpID, d.OpTime)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, tx.Record(canceled, d), context.Canceled)
	_, o, err := tx.Lookup(t.Context(), d.Scope, d.OpID, d.OpTime)
	require.NoError(t, err)
	require.Equal(t, ledger.Miss, o, "a canceled Record stores nothing")
	require.NoError(t, tx.Record(t.Context(), d))
	require.NoError(t, tx.Commit())

	_, err = st.Prune(canceled, base)
	require.ErrorIs(t, err, context.Canceled)
	requireStats(t, st, 1, time.Time{})
}

func (s suite) retentionByCount(t *testing.T) {
	st := s.open(t, ledger.Options{MaxEntries: 10})
	ctx := t.Context()
	ds := ops("tenant-a", 0, 25)
	record(t, st, ds...)

	// MaxAge is the default week, so only the count evicts.
	n, err := st.Prune(ctx, base.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 15, n)
	floor := op("", 14).OpTime // the newest op time evicted
	requireStats(t, st, 10, floor)
	requireOutcomes(t, st, ds, func(i int) ledger.Outcome {
		if i < 15 {
			return ledger.Expired
		}
		return ledger.Hit
	})

	atFloor := ledger.Decision{Scope: "tenant-b", OpID: "new", OpTime: floor}
	_, o := lookup(t, st, atFloor)
	require.Equal(t, ledger.Expired, o, "an unknown op at the floor")
	tx := begin(t, st)
	require.ErrorIs(t, tx.Record(ctx, atFloor), ledger.ErrExpired)
	require.NoError(t, tx.Rollback())

	above := atFloor
	above.OpTime = floor.Add(time.Millisecond)
	record(t, st, above)
	n, err = st.Prune(ctx, base.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 1, n, "the oldest of the 11, the newcomer, goes")
	requireStats(t, st, 10, above.OpTime)
	_, o = lookup(t, st, above)
	require.Equal(t, ledger.Expired, o)
}

func (s suite) retentionByAge(t *testing.T) {
	st := s.open(t, ledger.Options{MaxAge: time.Hour})
	ctx := t.Context()
	ds := make([]ledger.Decision, 12)
	for i := range ds {
		ds[i] = op("tenant-a", i)
		ds[i].OpTime = base.Add(time.Duration(i) * 10 * time.Minute)
	}
	record(t, st, ds...)

	n, err := st.Prune(ctx, base.Add(2*time.Hour))
	require.NoError(t, err)
	require.Equal(t, 7, n, "op times base+0..base+60m are at or before now-MaxAge")
	floor := base.Add(time.Hour)
	requireStats(t, st, 5, floor)
	requireOutcomes(t, st, ds, func(i int) ledger.Outcome {
		if i <= 6 {
			return ledger.Expired
		}
		return ledger.Hit
	})

	_, o := lookup(t, st, ledger.Decision{Scope: "tenant-a", OpID: "never-seen", OpTime: base.Add(30 * time.Minute)})
	require.Equal(t, ledger.Expired, o)
	_, o = lookup(t, st, ledger.Decision{Scope: "tenant-a", OpID: "never-seen", OpTime: floor.Add(time.Millisecond)})
	require.Equal(t, ledger.Miss, o)
}

func (s suite) ageFloorOnEmptyLedger(t *testing.T) {
	st := s.open(t, ledger.Options{MaxAge: time.Hour})
	now := base.Add(90*time.Minute + 1234567*time.Nanosecond)
	n, err := st.Prune(t.Context(), now)
	require.NoError(t, err)
	require.Zero(t, n)
	floor := now.Add(-time.Hour).Truncate(time.Millisecond)
	requireStats(t, st, 0, floor)
	_, o := lookup(t, st, ledger.Decision{Scope: "tenant-a", OpID: "late", OpTime: floor})
	require.Equal(t, ledger.Expired, o, "an op older than MaxAge is expired even if nothing was evicted")
}

func (s suite) evictedNeverMiss(t *testing.T) {
	st := s.open(t, ledger.Options{MaxEntries: 2})
	tie := []ledger.Decision{op("tenant-a", 1), op("tenant-a", 2), op("tenant-a", 3)}
	for i := range tie {
		tie[i].OpTime = base
	}
	newest := op("tenant-a", 4)
	record(t, st, append(tie, newest)...)

	n, err := st.Prune(t.Context(), base)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	requireStats(t, st, 2, base)

	outcomes := map[ledger.Outcome]int{}
	for _, d := range tie {
		got, o := lookup(t, st, d)
		outcomes[o]++
		if o == ledger.Hit {
			requireSame(t, d, got)
		}
	}
	require.Equal(t, map[ledger.Outcome]int{ledger.Hit: 1, ledger.Expired: 2}, outcomes,
		"of three ops at the floor, the retained one hits and the evicted ones expire")
	_, o := lookup(t, st, newest)
	require.Equal(t, ledger.Hit, o)
}

func (s suite) floorMonotonic(t *testing.T) {
	st := s.open(t, ledger.Options{MaxAge: time.Hour, MaxEntries: 1})
	ctx := t.Context()
	_, err := st.Prune(ctx, base.Add(2*time.Hour))
	require.NoError(t, err)
	floor := base.Add(time.Hour)
	requireStats(t, st, 0, floor)

	_, err = st.Prune(ctx, base) // a clock that went back
	require.NoError(t, err)
	requireStats(t, st, 0, floor)

	// Count eviction raises the floor only to what it evicts.
	a := op("tenant-a", 0)
	a.OpTime = floor.Add(time.Minute)
	b := op("tenant-a", 1)
	b.OpTime = floor.Add(2 * time.Minute)
	record(t, st, a, b)
	n, err := st.Prune(ctx, base)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	requireStats(t, st, 1, a.OpTime)
}

func (s suite) pruneInChunks(t *testing.T) {
	const total, chunk = 20_000, 1000
	var (
		chunks []int
		stop   func()
	)
	// Op i is at base+i s; now-MaxAge lands on op 11,999, and the count
	// keeps the newest 5,000.
	st := s.open(t, ledger.Options{
		MaxAge:     time.Hour,
		MaxEntries: 5000,
		PruneChunk: chunk,
		OnPruneChunk: func(n int) {
			chunks = append(chunks, n)
			if stop != nil {
				stop()
			}
		},
	})
	ds := ops("tenant-a", 0, total)
	record(t, st, ds...)
	now := op("", 11_999).OpTime.Add(time.Hour)
	ageFloor := op("", 11_999).OpTime

	// Stopped after its first chunk, Prune has evicted exactly that chunk,
	// and the floor already covers everything the age rule will evict.
	ctx, cancel := context.WithCancel(t.Context())
	stop = cancel
	n, err := st.Prune(ctx, now)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, chunk, n)
	require.Equal(t, []int{chunk}, chunks)
	requireStats(t, st, total-chunk, ageFloor)
	requireOutcomes(t, st, ds[:2*chunk], func(i int) ledger.Outcome {
		if i < chunk {
			return ledger.Expired
		}
		return ledger.Hit // below the floor, but still held
	})

	stop, chunks = nil, nil
	n, err = st.Prune(t.Context(), now)
	require.NoError(t, err)
	require.Equal(t, total-chunk-5000, n)
	require.Len(t, chunks, 11+3, "11 age chunks, then 3 count chunks")
	sum := 0
	for _, c := range chunks {
		require.LessOrEqual(t, c, chunk)
		sum += c
	}
	require.Equal(t, n, sum)
	requireStats(t, st, 5000, op("", total-5000-1).OpTime)
	requireOutcomes(t, st, ds, func(i int) ledger.Outcome {
		if i < total-5000 {
			return ledger.Expired
		}
		return ledger.Hit
	})
}

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
	requireStats(t, st, records+1, base.Add(-time.Hour))
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
	ds := ops("tenant-a", 0, 5)
	record(t, st, ds...)
	n, err := st.Prune(t.Context(), base)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	floor := ds[1].OpTime
	require.NoError(t, st.Close())

	st = s.h.Open(t, dir, opts)
	requireStats(t, st, 3, floor)
	requireOutcomes(t, st, ds, func(i int) ledger.Outcome {
		if i < 2 {
			return ledger.Expired
		}
		return ledger.Hit
	})
	tx := begin(t, st)
	require.ErrorIs(t, tx.Record(t.Context(), ledger.Decision{Scope: "tenant-a", OpID: "late", OpTime: floor}), ledger.ErrExpired)
	require.NoError(t, tx.Rollback())

	// A reopen with a clock far behind still does not lower the floor.
	_, err = st.Prune(t.Context(), base.Add(-365*24*time.Hour))
	require.NoError(t, err)
	require.NoError(t, st.Close())
	st = s.h.Open(t, dir, opts)
	requireStats(t, st, 3, floor)
}
