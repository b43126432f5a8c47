package client

import (
	"context"
	"fmt"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/syncproto"
)

// DeadLetter is a write the server will never apply as it stands, kept
// with why, until the app requeues or purges it.
type DeadLetter struct {
	// ID names the dead letter for RequeueDeadLetters and PurgeDeadLetters.
	ID       offlinequeue.ID
	Mutation syncproto.Mutation
	// Reason is the server's refusal ("code: message").
	Reason   string
	Attempts int
}

// MaxDeadLetterPage bounds one DeadLetters call.
const MaxDeadLetterPage = 1000

// DeadLetters returns up to limit (at most MaxDeadLetterPage) dead letters
// after the one named after (0: from the first), oldest first.
func (c *Client) DeadLetters(ctx context.Context, after offlinequeue.ID, limit int) ([]DeadLetter, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	ds, err := c.queue.DeadLetters(ctx, after, min(limit, MaxDeadLetterPage))
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, 0, len(ds))
	for _, d := range ds {
		m, err := decodeMutation(d.Payload)
		if err != nil {
			return nil, fmt.Errorf("client: dead letter %d: %w", d.ID, err)
		}
		out = append(out, DeadLetter{ID: d.ID, Mutation: *m, Reason: d.Reason, Attempts: int(d.Attempts)})
	}
	return out, nil
}

// RequeueDeadLetters puts dead letters back in the queue with a fresh
// retry budget (after the app fixed what refused them: a permission, a
// declared model), back in the pending overlay, and wakes the replay. A
// requeued write keeps its op id; its outcome is recorded anew when the
// server decides it.
func (c *Client) RequeueDeadLetters(ctx context.Context, ids ...offlinequeue.ID) error {
	if c.isClosed() {
		return ErrClosed
	}
	ops, err := c.deadLetterOps(ctx, ids)
	if err != nil {
		return err
	}
	if err := c.queue.Requeue(ctx, ids...); err != nil {
		return err
	}
	c.queued.queuedElsewhere() // the requeued items are not in the tail
	// The old outcome goes first: the overlay takes no write that has an
	// outcome. Until the overlay has it, Await may answer ErrUnknownOp.
	if err := c.replica.forgetDeadLettered(ctx, ops); err != nil {
		return err
	}
	if err := c.replica.reconcile(ctx, c.queue); err != nil {
		return fmt.Errorf("client: requeue: pending overlay: %w", err)
	}
	c.statusChanged()
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return nil
}

// PurgeDeadLetters deletes dead letters for good.
func (c *Client) PurgeDeadLetters(ctx context.Context, ids ...offlinequeue.ID) error {
	if c.isClosed() {
		return ErrClosed
	}
	defer c.statusChanged()
	return c.queue.Purge(ctx, ids...)
}

// deadLetterOps returns the op ids of the dead letters named ids.
func (c *Client) deadLetterOps(ctx context.Context, ids []offlinequeue.ID) ([]string, error) {
	want := map[offlinequeue.ID]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var ops []string
	var after offlinequeue.ID
	for len(ops) < len(want) {
		page, err := c.DeadLetters(ctx, after, MaxDeadLetterPage)
		if err != nil || len(page) == 0 {
			return ops, err
		}
		for _, d := range page {
			if want[d.ID] {
				ops = append(ops, d.Mutation.OpID)
			}
		}
		after = page[len(page)-1].ID
	}
	return ops, nil
}
