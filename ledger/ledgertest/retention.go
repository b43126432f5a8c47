package ledgertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/ledger"
)

// at is a decision of scope with its own op time and decision time.
func at(scope, opID string, opTime, decided time.Time) ledger.Decision {
	return ledger.Decision{
		Scope: scope, OpID: opID, OpTime: opTime, DecidedAt: decided,
		Digest: []byte("digest " + opID), Result: []byte("result " + scope + "/" + opID),
	}
}

func (s suite) retentionByCount(t *testing.T) {
	st := s.open(t, ledger.Options{MaxEntries: 10})
	ctx := t.Context()
	a, b := ops("tenant-a", 0, 25), ops("tenant-b", 0, 5)
	record(t, st, append(a, b...)...)

	// MaxAge is the default week, so only the count evicts, and only in
	// the scope over it.
	prune(t, st, base.Add(time.Hour), 15)
	floor := a[14].OpTime // the newest op time evicted
	requireFloor(t, st, "tenant-a", floor)
	requireFloor(t, st, "tenant-b", time.Time{})
	requireStats(t, st, ledger.Stats{Entries: 15, Scopes: 2, MaxFloor: floor})
	requireOutcomes(t, st, a, func(i int) ledger.Outcome {
		if i < 15 {
			return ledger.Expired
		}
		return ledger.Hit
	})
	requireOutcomes(t, st, b, func(int) ledger.Outcome { return ledger.Hit })

	atFloor := ledger.Decision{Scope: "tenant-a", OpID: "new", OpTime: floor}
	_, o := lookup(t, st, atFloor)
	require.Equal(t, ledger.Expired, o, "an unknown op at its scope's floor")
	tx := begin(t, st)
	require.ErrorIs(t, tx.Record(ctx, atFloor), ledger.ErrExpired)
	require.NoError(t, tx.Rollback())
	otherScope := atFloor
	otherScope.Scope = "tenant-b"
	record(t, st, otherScope) // another scope's floor is not tenant-b's

	// A newcomer decided last stays; the oldest decided goes, though its op
	// time is below the newcomer's.
	above := atFloor
	above.OpTime, above.DecidedAt = floor.Add(time.Millisecond), base.Add(time.Hour)
	record(t, st, above)
	prune(t, st, base.Add(time.Hour), 1)
	requireFloor(t, st, "tenant-a", a[15].OpTime)
	_, o = lookup(t, st, a[15])
	require.Equal(t, ledger.Expired, o)
	_, o = lookup(t, st, above)
	require.Equal(t, ledger.Hit, o)
}

func (s suite) retentionByAge(t *testing.T) {
	st := s.open(t, ledger.Options{MaxAge: time.Hour})
	// Decided 10 minutes apart, stamped in the reverse order: retention
	// goes by decision time, the floor by op time.
	ds := make([]ledger.Decision, 12)
	for i := range ds {
		ds[i] = at("tenant-a", fmt.Sprintf("op-%02d", i), base.Add(time.Duration(11-i)*time.Second), base.Add(time.Duration(i)*10*time.Minute))
	}
	record(t, st, ds...)

	prune(t, st, base.Add(2*time.Hour), 7) // decided base+0..base+60m
	floor := ds[0].OpTime                  // the newest op time among them
	requireFloor(t, st, "tenant-a", floor)
	requireStats(t, st, ledger.Stats{Entries: 5, Scopes: 1, MaxFloor: floor})
	requireOutcomes(t, st, ds, func(i int) ledger.Outcome {
		if i <= 6 {
			return ledger.Expired
		}
		return ledger.Hit // at or below the floor, and still held
	})
	_, o := lookup(t, st, ledger.Decision{Scope: "tenant-a", OpID: "never-seen", OpTime: floor})
	require.Equal(t, ledger.Expired, o)
	_, o = lookup(t, st, ledger.Decision{Scope: "tenant-a", OpID: "never-seen", OpTime: floor.Add(time.Millisecond)})
	require.Equal(t, ledger.Miss, o)
}

// Op times are the clients' clocks; only the server's decision time orders
// eviction, so a client stamping ahead or behind changes nothing of what is
// evicted when.
func (s suite) evictionByDecisionTime(t *testing.T) {
	st := s.open(t, ledger.Options{MaxAge: time.Hour, MaxEntries: 2})
	year := 365 * 24 * time.Hour
	ahead := at("tenant-a", "ahead", base.Add(year), base)
	behind := at("tenant-a", "behind", base.Add(-30*24*time.Hour), base.Add(time.Minute))
	onTime := at("tenant-a", "on-time", base.Add(2*time.Minute), base.Add(2*time.Minute))
	record(t, st, ahead, behind, onTime)

	// By count: the first decided goes, however far ahead it was stamped,
	// and takes its scope's floor with it.
	prune(t, st, base.Add(30*time.Minute), 1)
	requireFloor(t, st, "tenant-a", ahead.OpTime)
	requireOutcomes(t, st, []ledger.Decision{ahead, behind, onTime}, func(i int) ledger.Outcome {
		return []ledger.Outcome{ledger.Expired, ledger.Hit, ledger.Hit}[i]
	})

	// By age: decided a minute after base, stamped a month before it, it
	// is kept until an hour after its decision.
	prune(t, st, behind.DecidedAt.Add(time.Hour-time.Millisecond), 0)
	prune(t, st, behind.DecidedAt.Add(time.Hour), 1)
	_, o := lookup(t, st, behind)
	require.Equal(t, ledger.Expired, o)
	requireFloor(t, st, "tenant-a", ahead.OpTime)
	requireStats(t, st, ledger.Stats{Entries: 1, Scopes: 1, MaxFloor: ahead.OpTime})
}

// Expiry means "the ledger may have forgotten this op": nothing was
// evicted, so nothing is expired, however old its op time.
func (s suite) noExpiryWithoutEviction(t *testing.T) {
	st := s.open(t, ledger.Options{MaxAge: time.Hour})
	prune(t, st, base, 0)
	recent := at("tenant-a", "recent", base, base)
	record(t, st, recent)
	prune(t, st, base.Add(30*time.Minute), 0)
	requireFloor(t, st, "tenant-a", time.Time{})
	requireStats(t, st, held(1, 1))

	old := []ledger.Decision{
		at("tenant-a", "eight-days-old", base.Add(-8*24*time.Hour), base.Add(30*time.Minute)),
		at("tenant-a", "wall-time-zero", time.UnixMilli(0), base.Add(30*time.Minute)),
		at("tenant-b", "wall-time-zero", time.UnixMilli(0), base.Add(30*time.Minute)),
	}
	record(t, st, old...) // each looked up as a Miss first
	requireOutcomes(t, st, append(old, recent), func(int) ledger.Outcome { return ledger.Hit })
}

func (s suite) evictedNeverMiss(t *testing.T) {
	st := s.open(t, ledger.Options{MaxEntries: 2})
	// Three decided in the same millisecond, recorded out of op-id order:
	// ties are broken by op id, never by how they were stored.
	tie := []ledger.Decision{
		at("tenant-a", "op-3", base.Add(10*time.Second), base.Add(time.Second)),
		at("tenant-a", "op-1", base.Add(30*time.Second), base.Add(time.Second)),
		at("tenant-a", "op-2", base.Add(20*time.Second), base.Add(time.Second)),
	}
	newest := at("tenant-a", "op-0", base.Add(40*time.Second), base.Add(2*time.Second))
	record(t, st, append(tie, newest)...)

	prune(t, st, base, 2)
	floor := tie[1].OpTime
	requireStats(t, st, ledger.Stats{Entries: 2, Scopes: 1, MaxFloor: floor})
	requireOutcomes(t, st, append(tie, newest), func(i int) ledger.Outcome {
		return []ledger.Outcome{ledger.Hit, ledger.Expired, ledger.Expired, ledger.Hit}[i]
	})
}

func (s suite) floorMonotonic(t *testing.T) {
	st := s.open(t, ledger.Options{MaxEntries: 1})
	ctx := t.Context()
	high := at("tenant-a", "high", base.Add(time.Hour), base)
	low := at("tenant-a", "low", base.Add(time.Minute), base.Add(time.Second))
	record(t, st, high, low)
	prune(t, st, base, 1)
	requireFloor(t, st, "tenant-a", high.OpTime)

	// Evicting a lower op time later leaves the floor where it is.
	later := at("tenant-a", "later", base.Add(2*time.Hour), base.Add(2*time.Second))
	record(t, st, later)
	prune(t, st, base, 1)
	requireFloor(t, st, "tenant-a", high.OpTime)
	_, o := lookup(t, st, low)
	require.Equal(t, ledger.Expired, o)

	// A clock that went back evicts nothing and lowers nothing.
	prune(t, st, base.Add(-365*24*time.Hour), 0)
	requireFloor(t, st, "tenant-a", high.OpTime)
	requireStats(t, st, ledger.Stats{Entries: 1, Scopes: 1, MaxFloor: high.OpTime})
	tx := begin(t, st)
	require.ErrorIs(t, tx.Record(ctx, at("tenant-a", "late", high.OpTime, base)), ledger.ErrExpired)
	require.NoError(t, tx.Rollback())
}

// One scope's volume and far-ahead op times never move another scope's
// floor or evict its decisions: a tenant flooding the ledger with writes
// stamped a minute ahead leaves another tenant's queued offline writes
// decidable.
func (s suite) scopesIsolatedUnderVolume(t *testing.T) {
	st := s.open(t, ledger.Options{MaxAge: time.Hour, MaxEntries: 100})
	quiet := make([]ledger.Decision, 5)
	for i := range quiet {
		quiet[i] = at("quiet", fmt.Sprintf("q-%d", i), base.Add(-time.Duration(30-i)*time.Minute), base.Add(time.Duration(i)*time.Millisecond))
	}
	noisy := make([]ledger.Decision, 1000)
	for i := range noisy {
		noisy[i] = at("noisy", fmt.Sprintf("n-%04d", i), base.Add(59*time.Second+time.Duration(i)*time.Millisecond), base.Add(time.Duration(i)*time.Millisecond))
	}
	record(t, st, append(quiet, noisy...)...)

	prune(t, st, base.Add(10*time.Minute), 900)
	noisyFloor := noisy[899].OpTime
	requireFloor(t, st, "noisy", noisyFloor)
	requireFloor(t, st, "quiet", time.Time{})
	requireOutcomes(t, st, quiet, func(int) ledger.Outcome { return ledger.Hit })
	requireStats(t, st, ledger.Stats{Entries: 105, Scopes: 2, MaxFloor: noisyFloor})

	// The quiet tenant's writes queued offline, stamped before the noisy
	// tenant's floor, are still decided as new.
	queued := []ledger.Decision{
		at("quiet", "queued-30m", base.Add(-30*time.Minute), base.Add(10*time.Minute)),
		at("quiet", "queued-5m", base.Add(-5*time.Minute), base.Add(10*time.Minute)),
		at("quiet", "at-noisy-floor", noisyFloor, base.Add(10*time.Minute)),
	}
	record(t, st, queued...)

	// Age eviction gives each scope a floor of its own op times.
	prune(t, st, base.Add(10*time.Minute+time.Hour), 108)
	requireFloor(t, st, "quiet", queued[2].OpTime) // the newest of its own op times
	requireFloor(t, st, "noisy", noisy[999].OpTime)
	requireStats(t, st, ledger.Stats{Entries: 0, Scopes: 2, MaxFloor: noisy[999].OpTime})
}

// txPrune runs Tx.Prune in tx and requires its answer.
func txPrune(t *testing.T, tx Txn, now time.Time, limit, wantEvicted int, wantMore bool) {
	t.Helper()
	n, more, err := tx.Prune(t.Context(), now, limit)
	require.NoError(t, err)
	require.Equal(t, wantEvicted, n, "evicted")
	require.Equal(t, wantMore, more, "more")
}

func (s suite) pruneInTransaction(t *testing.T) {
	st := s.open(t, ledger.Options{MaxEntries: 3})
	ctx := t.Context()
	a, b, c := ops("tenant-a", 0, 6), ops("tenant-b", 0, 5), ops("tenant-c", 0, 2)
	record(t, st, append(append(a, b...), c...)...)

	// Recorded in the pruning transaction, decided before the rest of
	// tenant-c: pruning sees them, and evicts them first.
	early := []ledger.Decision{
		at("tenant-c", "early-1", base.Add(-2*time.Minute), base.Add(-2*time.Minute)),
		at("tenant-c", "early-2", base.Add(-time.Minute), base.Add(-time.Minute)),
	}
	late := at("tenant-c", "late", base.Add(time.Hour), base.Add(time.Hour))
	tx := begin(t, st)
	for _, d := range append(early, late) {
		require.NoError(t, tx.Record(ctx, d))
	}

	// Scopes in byte order, each one's oldest decided first: a0..a2, b0,
	// then b1, early-1, early-2.
	txPrune(t, tx, base, 4, 4, true)
	_, o, err := tx.Lookup(ctx, a[0].Scope, a[0].OpID, a[0].OpTime)
	require.NoError(t, err)
	require.Equal(t, ledger.Expired, o, "the transaction sees its own evictions")
	require.ErrorIs(t, tx.Record(ctx, at("tenant-a", "new", a[2].OpTime, base)), ledger.ErrExpired,
		"and the floors they raised")
	_, ok, err := st.Get(ctx, a[0].Scope, a[0].OpID)
	require.NoError(t, err)
	require.True(t, ok, "evictions are invisible outside the transaction before it commits")
	txPrune(t, tx, base, 4, 3, false)
	txPrune(t, tx, base, 4, 0, false)
	require.NoError(t, tx.Commit())

	requireFloor(t, st, "tenant-a", a[2].OpTime)
	requireFloor(t, st, "tenant-b", b[1].OpTime)
	requireFloor(t, st, "tenant-c", early[1].OpTime)
	requireStats(t, st, ledger.Stats{Entries: 9, Scopes: 3, MaxFloor: a[2].OpTime})
	requireOutcomes(t, st, append(append(a, b...), append(c, append(early, late)...)...), func(i int) ledger.Outcome {
		switch {
		case i < 3, i >= 6 && i < 8, i >= 13 && i < 15:
			return ledger.Expired
		default:
			return ledger.Hit
		}
	})
}

func (s suite) pruneInTransactionRollsBack(t *testing.T) {
	st := s.open(t, ledger.Options{MaxEntries: 1})
	a := ops("tenant-a", 0, 3)
	record(t, st, a...)
	tx := begin(t, st)
	txPrune(t, tx, base, 10, 2, false)
	require.NoError(t, tx.Rollback())

	requireFloor(t, st, "tenant-a", time.Time{})
	requireStats(t, st, held(3, 1))
	requireOutcomes(t, st, a, func(int) ledger.Outcome { return ledger.Hit })
	record(t, st, at("tenant-a", "below-a1", a[1].OpTime, base)) // no floor was left behind
}

func (s suite) pruneInTransactionRefusesBadArguments(t *testing.T) {
	st := s.open(t, ledger.Options{MaxEntries: 1})
	record(t, st, ops("tenant-a", 0, 3)...)
	tx := begin(t, st)
	for _, c := range []struct {
		now   time.Time
		limit int
	}{{base, 0}, {base, -1}, {time.Time{}, 10}} {
		_, _, err := tx.Prune(t.Context(), c.now, c.limit)
		require.ErrorIs(t, err, ledger.ErrInvalidPrune, "now %s, limit %d", c.now, c.limit)
	}
	txPrune(t, tx, base, 10, 2, false) // nothing was evicted, and the transaction is usable
	require.NoError(t, tx.Commit())
	requireStats(t, st, ledger.Stats{Entries: 1, Scopes: 1, MaxFloor: op("", 1).OpTime})
}

func (s suite) pruneInChunks(t *testing.T) {
	const total, chunk = 20_000, 1000
	var (
		chunks []int
		stop   func()
	)
	// Op i is decided at base+i s+1ms: now-MaxAge lands on op 11,999, and
	// the count keeps the newest 5,000, so ops 0..14,999 go.
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
	now := ds[11_999].DecidedAt.Add(time.Hour)

	// Stopped after its first chunk, Prune has evicted exactly that chunk,
	// the oldest decided, and raised the floor to the newest op time in it.
	ctx, cancel := context.WithCancel(t.Context())
	stop = cancel
	n, err := st.Prune(ctx, now)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, chunk, n)
	require.Equal(t, []int{chunk}, chunks)
	requireStats(t, st, ledger.Stats{Entries: total - chunk, Scopes: 1, MaxFloor: ds[chunk-1].OpTime})
	requireOutcomes(t, st, ds[:2*chunk], func(i int) ledger.Outcome {
		if i < chunk {
			return ledger.Expired
		}
		return ledger.Hit
	})

	stop, chunks = nil, nil
	prune(t, st, now, total-chunk-5000)
	require.Len(t, chunks, 14)
	for _, c := range chunks {
		require.Equal(t, chunk, c)
	}
	requireStats(t, st, ledger.Stats{Entries: 5000, Scopes: 1, MaxFloor: ds[total-5000-1].OpTime})
	requireOutcomes(t, st, ds, func(i int) ledger.Outcome {
		if i < total-5000 {
			return ledger.Expired
		}
		return ledger.Hit
	})
}

// A scope recording faster than Prune evicts cannot keep Prune running:
// it stops once it evicted more than the ledger held when it began.
func (s suite) pruneOutpacedByRecords(t *testing.T) {
	var st Store
	next := 100
	st = s.open(t, ledger.Options{MaxEntries: 1, PruneChunk: 1, OnPruneChunk: func(int) {
		record(t, st, op("tenant-a", next), op("tenant-a", next+1))
		next += 2
	}})
	record(t, st, ops("tenant-a", 0, 3)...)
	prune(t, st, base, 4)
	requireStats(t, st, ledger.Stats{Entries: 3 + 4*2 - 4, Scopes: 1, MaxFloor: op("", 100).OpTime})
}
