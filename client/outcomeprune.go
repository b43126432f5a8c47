package client

import (
	"context"
	"time"
)

// Bounds of the outcomes a replica keeps (Await and Lookup answer from
// them; an outcome forgotten is ErrUnknownOp).
const (
	// MaxOutcomes bounds how many outcomes the replica keeps: beyond it
	// the oldest decided go first, whatever OutcomeRetention says, so a
	// device writing fast does not grow its replica without end.
	MaxOutcomes = 1_000_000
	// MaxOutcomePruneInterval is the longest wait between two prunes of a
	// running client; the wait is OutcomeRetention/2 when that is shorter.
	// An outcome is therefore forgotten at most that much after
	// OutcomeRetention ended (Open prunes too).
	MaxOutcomePruneInterval = time.Hour
	// minOutcomePruneInterval keeps a tiny retention from spinning the
	// loop.
	minOutcomePruneInterval = 10 * time.Millisecond
)

// outcomePruneInterval is the wait between two prunes for retention.
func outcomePruneInterval(retention time.Duration) time.Duration {
	return max(min(retention/2, MaxOutcomePruneInterval), minOutcomePruneInterval)
}

// pruneOutcomes forgets the outcomes older than OutcomeRetention and the
// oldest beyond MaxOutcomes, and counts them.
func (c *Client) pruneOutcomes(ctx context.Context) error {
	aged, err := c.replica.pruneOutcomes(ctx, c.now().Add(-c.cfg.OutcomeRetention))
	if err != nil {
		return err
	}
	trimmed, err := c.replica.trimOutcomes(ctx, MaxOutcomes)
	if err != nil {
		return err
	}
	c.metrics.outcomesPruned.Add(float64(aged + trimmed))
	return nil
}

// runOutcomePruning prunes outcomes every outcomePruneInterval until the
// client closes. It is started by Open and owned by c.wg.
func (c *Client) runOutcomePruning() {
	t := time.NewTicker(outcomePruneInterval(c.cfg.OutcomeRetention))
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			if err := c.pruneOutcomes(c.ctx); err != nil && c.ctx.Err() == nil {
				c.log.Warn("pruning outcomes", "err", err)
			}
		}
	}
}
