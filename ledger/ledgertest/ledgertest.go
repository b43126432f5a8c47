// Package ledgertest is the conformance suite every ledger implementation
// passes. An implementation's tests call Run with a Harness that opens it:
//
//	func TestConformance(t *testing.T) { ledgertest.Run(t, harness) }
//
// The suite checks the promises of package ledger: lookup outcomes, response
// replay of the stored decision, op-id scoping, refusal of empty op ids and
// duplicates, transaction visibility, retention per scope by decision time
// with each scope's floor (isolation between scopes, the floor rule, a
// property test against a model over seeded random histories), pruning
// inside a transaction and its determinism, chunked pruning, parallel
// transactions, durability and migration of an older format.
package ledgertest

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
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
	Floor(ctx context.Context, scope string) (time.Time, error)
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
	// Durable says that a reopened store keeps its decisions and floors.
	// The reopen cases run only for durable implementations.
	Durable bool
	// Legacy, when set, writes into dir a ledger in the implementation's
	// previous format holding ds, with floor as its one ledger-wide floor
	// (zero for none), so that Open with dir must migrate it. The migration
	// cases run only when it is set.
	Legacy func(t *testing.T, dir string, ds []ledger.Decision, floor time.Time)
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
	t.Run("OpIDsAreScoped", s.opIDsAreScoped)
	t.Run("EmptyOpIDNeverDecided", s.emptyOpIDNeverDecided)
	t.Run("ZeroOpTimeRefused", s.zeroOpTimeRefused)
	t.Run("DuplicateRecordRefused", s.duplicateRecordRefused)
	t.Run("LookupAllAnswersLikeLookup", s.lookupAllAnswersLikeLookup)
	t.Run("LookupAllInChunks", s.lookupAllInChunks)
	t.Run("RecordAllAllOrNone", s.recordAllAllOrNone)
	t.Run("RollbackDiscards", s.rollbackDiscards)
	t.Run("VisibleOnlyAfterCommit", s.visibleOnlyAfterCommit)
	t.Run("EndedTxRefuses", s.endedTxRefuses)
	t.Run("CanceledContext", s.canceledContext)
	t.Run("RetentionByCount", s.retentionByCount)
	t.Run("RetentionByAge", s.retentionByAge)
	t.Run("EvictionByDecisionTime", s.evictionByDecisionTime)
	t.Run("NoExpiryWithoutEviction", s.noExpiryWithoutEviction)
	t.Run("EvictedNeverMiss", s.evictedNeverMiss)
	t.Run("FloorMonotonic", s.floorMonotonic)
	t.Run("ScopesIsolatedUnderVolume", s.scopesIsolatedUnderVolume)
	t.Run("PruneInTransaction", s.pruneInTransaction)
	t.Run("PruneInTransactionRollsBack", s.pruneInTransactionRollsBack)
	t.Run("PruneInTransactionRefusesBadArguments", s.pruneInTransactionRefusesBadArguments)
	t.Run("PruneIsDeterministic", s.pruneIsDeterministic)
	t.Run("MatchesModel", s.matchesModel)
	t.Run("PruneInChunks", s.pruneInChunks)
	t.Run("PruneOutpacedByRecords", s.pruneOutpacedByRecords)
	t.Run("ParallelTransactions", s.parallelTransactions)
	if h.Durable {
		t.Run("DurableAcrossReopen", s.durableAcrossReopen)
	}
	if h.Legacy != nil {
		t.Run("MigratesLegacyFloor", s.migratesLegacyFloor)
		t.Run("MigratesLegacyWithoutFloor", s.migratesLegacyWithoutFloor)
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
	// LookupAll must agree, scope by scope.
	byScope := map[string][]int{}
	for i, d := range ds {
		byScope[d.Scope] = append(byScope[d.Scope], i)
	}
	for scope, idx := range byScope {
		sds := make([]ledger.Decision, len(idx))
		for j, i := range idx {
			sds[j] = ds[i]
		}
		for j, ans := range lookupAll(t, st, scope, sds) {
			require.Equal(t, want(idx[j]), ans.Outcome, "LookupAll of op %q", sds[j].OpID)
		}
	}
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

// requireStats requires st's Stats to be want.
func requireStats(t *testing.T, st Store, want ledger.Stats) {
	t.Helper()
	got, err := st.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, want.Entries, got.Entries, "entries")
	require.Equal(t, want.Scopes, got.Scopes, "scopes")
	require.True(t, want.MaxFloor.Equal(got.MaxFloor), "max floor: want %s, got %s", want.MaxFloor, got.MaxFloor)
}

// held is Stats without a floor: entries decisions held over scopes scopes.
func held(entries, scopes int) ledger.Stats { return ledger.Stats{Entries: entries, Scopes: scopes} }

// requireFloor requires scope's floor in st to be want (zero: none).
func requireFloor(t *testing.T, st Store, scope string, want time.Time) {
	t.Helper()
	got, err := st.Floor(t.Context(), scope)
	require.NoError(t, err)
	require.True(t, want.Equal(got), "floor of scope %q: want %s, got %s", scope, want, got)
	if !got.IsZero() {
		require.Equal(t, time.UTC, got.Location())
	}
}

// prune runs st.Prune as of now and requires it to evict want decisions.
func prune(t *testing.T, st Store, now time.Time, want int) {
	t.Helper()
	n, err := st.Prune(t.Context(), now)
	require.NoError(t, err)
	require.Equal(t, want, n, "evicted as of %s", now)
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
	requireStats(t, st, held(0, 0))
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
	requireStats(t, st, held(1, 1))
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

func (s suite) opIDsAreScoped(t *testing.T) {
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
	requireStats(t, st, held(3, 3))
}

func (s suite) emptyOpIDNeverDecided(t *testing.T) {
	// A floor exists, so "never decided" must also mean "never expired".
	st := s.open(t, ledger.Options{MaxEntries: 1})
	ctx := t.Context()
	old, kept := op("tenant-a", 10), op("tenant-a", 20)
	record(t, st, old, kept)
	prune(t, st, base, 1)
	requireFloor(t, st, "tenant-a", old.OpTime)

	tx := begin(t, st)
	for _, at := range []time.Time{base, old.OpTime, base.Add(3 * time.Hour), {}} {
		got, o, err := tx.Lookup(ctx, "tenant-a", "", at)
		require.NoError(t, err)
		require.Equal(t, ledger.Miss, o, "empty op id at %s", at)
		require.Equal(t, ledger.Decision{}, got)
	}
	d := op("tenant-a", 3*3600)
	d.OpID = ""
	require.ErrorIs(t, tx.Record(ctx, d), ledger.ErrEmptyOpID)
	require.NoError(t, tx.Commit())
	requireStats(t, st, ledger.Stats{Entries: 1, Scopes: 1, MaxFloor: old.OpTime})
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
	requireStats(t, st, held(0, 0))
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
	requireStats(t, st, held(1, 1))
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
	requireStats(t, st, held(0, 0))
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
	requireStats(t, st, held(0, 0))

	require.NoError(t, tx.Commit())
	got, ok, err := st.Get(ctx, d.Scope, d.OpID)
	require.NoError(t, err)
	require.True(t, ok)
	requireSame(t, d, got)
	requireStats(t, st, held(1, 1))
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
	_, _, err = tx.Prune(ctx, base, 10)
	require.Error(t, err, "prune after commit")
	require.ErrorIs(t, tx.Commit(), sql.ErrTxDone)
	require.ErrorIs(t, tx.Rollback(), sql.ErrTxDone)
	requireStats(t, st, held(0, 0))
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

	// Due by age a year later, the decision stays: pruning gives up with
	// ctx.
	late := base.Add(365 * 24 * time.Hour)
	tx = begin(t, st)
	_, _, err = tx.Prune(canceled, late, 10)
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, tx.Rollback())
	_, err = st.Prune(canceled, late)
	require.ErrorIs(t, err, context.Canceled)
	requireStats(t, st, held(1, 1))
}
