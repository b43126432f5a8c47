package ledger

import (
	"context"
	"fmt"
	"math"
	"time"
)

// evictor is what Prune needs from an implementation: one atomic eviction
// step and a count.
type evictor interface {
	// evictOldest removes, in one atomic step that no reader sees half
	// done, up to limit decisions whose op time is at or before cutoff,
	// oldest op time first, and raises the floor to the newest op time it
	// removed or to raise, whichever is later (raise is noFloor when the
	// step sets no floor of its own). It returns how many it removed.
	evictOldest(ctx context.Context, cutoff int64, limit int, raise int64) (int, error)
	// count returns the number of committed decisions.
	count(ctx context.Context) (int, error)
}

// prune runs retention over e: first by age, then by count, each in chunks
// of at most o.PruneChunk decisions, every chunk its own atomic step. It
// stops between chunks when ctx is done and returns what it evicted so far;
// the evicted chunks stay evicted and the floor covers them.
//
// Both loops are bounded. The age loop ends because its first step raises
// the floor to cutoff, after which Record refuses any op at or before cutoff,
// so every later step finds fewer candidates. The count loop removes at most
// the excess it measured up front, so records arriving meanwhile are never
// over-evicted on their account (they are left to the next Prune).
func prune(ctx context.Context, e evictor, o Options, now time.Time) (int, error) {
	evicted := 0
	step := func(cutoff int64, limit int, raise int64) (int, error) {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		n, err := e.evictOldest(ctx, cutoff, limit, raise)
		if err != nil {
			return 0, err
		}
		evicted += n
		if n > 0 && o.OnPruneChunk != nil {
			o.OnPruneChunk(n)
		}
		return n, nil
	}

	cutoff := now.Add(-o.MaxAge).UnixMilli()
	for {
		n, err := step(cutoff, o.PruneChunk, cutoff)
		if err != nil {
			return evicted, fmt.Errorf("ledger: prune by age: %w", err)
		}
		if n < o.PruneChunk {
			break
		}
	}

	entries, err := e.count(ctx)
	if err != nil {
		return evicted, fmt.Errorf("ledger: prune by count: %w", err)
	}
	for excess := entries - o.MaxEntries; excess > 0; {
		n, err := step(math.MaxInt64, min(o.PruneChunk, excess), noFloor)
		if err != nil {
			return evicted, fmt.Errorf("ledger: prune by count: %w", err)
		}
		if n == 0 {
			break
		}
		excess -= n
	}
	return evicted, nil
}
