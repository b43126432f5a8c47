package ledger

import (
	"context"
	"fmt"
	"time"
)

// scopeEvictor is what one bounded eviction pass needs from a transaction
// of an implementation. Both methods see the transaction's own records and
// evictions.
type scopeEvictor interface {
	// nextCandidate returns the first scope, in byte order, at or after
	// from (strictly after it unless inclusive) that holds a decision
	// decided at or before cutoff or more than maxEntries decisions. ok is
	// false when there is none.
	nextCandidate(ctx context.Context, from string, inclusive bool, cutoff int64, maxEntries int) (scope string, ok bool, err error)
	// evictScope evicts, of scope's decisions in eviction order, the
	// longest prefix made of decisions decided at or before cutoff or
	// beyond the newest maxEntries, but at most limit of them, and raises
	// scope's floor to the highest op time it evicted. It returns how many
	// it evicted.
	evictScope(ctx context.Context, scope string, cutoff int64, maxEntries, limit int) (int, error)
}

// pruneTx is Tx.Prune over e: it visits the scopes that have something to
// evict in byte order and evicts each one's evictable prefix until limit
// decisions are gone. Visiting scopes in a fixed order and each scope's
// decisions in (decided at, op id) order makes the evicted set a function
// of the state, now and limit alone.
func pruneTx(ctx context.Context, e scopeEvictor, o Options, now time.Time, limit int) (evicted int, more bool, err error) {
	if err := checkPrune(now, limit); err != nil {
		return 0, false, err
	}
	cutoff := now.Add(-o.MaxAge).UnixMilli()
	from, inclusive := "", true
	for {
		if err := ctx.Err(); err != nil {
			return evicted, false, fmt.Errorf("ledger: prune: %w", err)
		}
		scope, ok, err := e.nextCandidate(ctx, from, inclusive, cutoff, o.MaxEntries)
		if err != nil {
			return evicted, false, fmt.Errorf("ledger: prune: %w", err)
		}
		if !ok {
			return evicted, false, nil
		}
		if evicted == limit {
			return evicted, true, nil
		}
		n, err := e.evictScope(ctx, scope, cutoff, o.MaxEntries, limit-evicted)
		if err != nil {
			return evicted, false, fmt.Errorf("ledger: prune scope %q: %w", scope, err)
		}
		evicted += n
		// A scope left with budget to spare has nothing evictable left; one
		// that used up the budget is looked at again to answer more.
		from, inclusive = scope, evicted == limit
	}
}

// chunkTx is a transaction the ledger's own Prune opens for one chunk.
type chunkTx interface {
	Tx
	Commit() error
	Rollback() error
}

// pruneChunks is the ledgers' own Prune: it runs Tx.Prune with
// o.PruneChunk in transactions of its own, committed one by one, until
// nothing evictable remains. It stops between chunks when ctx is done and
// returns what it evicted so far, which stays evicted with its floors
// raised. So that a scope recording faster than Prune evicts cannot keep it
// running, it also stops once it has evicted more decisions than the ledger
// held when it began (entries), leaving the rest to the next call.
func pruneChunks(ctx context.Context, begin func(context.Context) (chunkTx, error), entries int, o Options, now time.Time) (int, error) {
	evicted := 0
	for {
		if err := ctx.Err(); err != nil {
			return evicted, fmt.Errorf("ledger: prune: %w", err)
		}
		n, more, err := pruneChunk(ctx, begin, o, now)
		if err != nil {
			return evicted, err
		}
		evicted += n
		if n > 0 && o.OnPruneChunk != nil {
			o.OnPruneChunk(n)
		}
		if !more || evicted > entries {
			return evicted, nil
		}
	}
}

func pruneChunk(ctx context.Context, begin func(context.Context) (chunkTx, error), o Options, now time.Time) (int, bool, error) {
	tx, err := begin(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("ledger: prune: %w", err)
	}
	defer tx.Rollback() // a no-op after Commit
	n, more, err := tx.Prune(ctx, now, o.PruneChunk)
	if err != nil {
		return 0, false, err
	}
	if err := tx.Commit(); err != nil {
		return 0, false, fmt.Errorf("ledger: prune: %w", err)
	}
	return n, more, nil
}
