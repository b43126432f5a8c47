package client

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/syncproto"
)

// addPending copies a queued mutation into the pending overlay, so reads see
// it at once. It is idempotent by queue id.
func (r *replica) addPending(ctx context.Context, queueID offlinequeue.ID, m *syncproto.Mutation) error {
	return r.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		x := r.inTx(ctx, tx)
		if err := insertPending(x, queueID, m); err != nil {
			return err
		}
		return raisePendingHW(x, queueID)
	})
}

// pendingHWEvery is how often, in queue ids, an offline Put in the
// queue's file also raises the overlay's high-water mark (metaPendingHW).
// There the item and its overlay row commit together, so the mark is only
// where reconcile starts reading: left behind by fewer than about this
// many items, it makes reconcile re-read them (their rows exist; nothing
// is written), and spares every other Put a statement and a page.
const pendingHWEvery = 256

// enqueue makes m (payload, its JSON) durable in the queue under its op id
// and adds it to the pending overlay. In the queue's file both are one
// commit: they exist together or not at all, and fresh is the id of the
// item this call inserted (0 for a dedup hit). With a replica file of its
// own the queue commits first; then overlayErr non-nil says the write is
// queued (it replays) but the overlay missed it, and reconcile must repair
// it; fresh is 0. In the queue's file, committing (if not nil) gets the
// fresh id once only the commit is left (offlinequeue's
// EnqueueCommitting); elsewhere it is not called.
func (r *replica) enqueue(ctx context.Context, payload []byte, m *syncproto.Mutation, committing func(offlinequeue.ID)) (fresh offlinequeue.ID, overlayErr, err error) {
	if r.shared != nil {
		_, err := r.shared.EnqueueCommitting(ctx, payload, m.OpID, func(ctx context.Context, tx *sql.Tx, id offlinequeue.ID) error {
			x := r.inTx(ctx, tx)
			if err := insertPending(x, id, m); err != nil {
				return err
			}
			fresh = id // the hook runs for an inserted item only
			if id%pendingHWEvery != 0 {
				return nil
			}
			return raisePendingHW(x, id)
		}, committing)
		if err != nil {
			return 0, nil, err
		}
		return fresh, nil, nil
	}
	id, err := r.queue.Enqueue(ctx, payload, m.OpID)
	if err != nil {
		return 0, nil, err
	}
	return 0, r.addPending(ctx, id, m), nil
}

// Statements of insertPending and raisePendingHW.
const (
	sqlInsertPending = `INSERT INTO pending (queue_id, op_id, model, key, op, value, base_version, wall)
		SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8 WHERE NOT EXISTS (SELECT 1 FROM outcomes WHERE op_id = ?2)
		ON CONFLICT DO NOTHING`
	sqlRaisePendingHW = `INSERT INTO meta (name, value) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET value = max(value, excluded.value)`
)

func insertPending(x *txStmts, queueID offlinequeue.ID, m *syncproto.Mutation) error {
	var base any
	if m.BaseVersion != nil {
		base = int64(*m.BaseVersion)
	}
	// A write already decided is not pending: the driver can replay
	// and decide a queued write before its Put gets here.
	if err := x.exec(sqlInsertPending, int64(queueID), m.OpID, m.Model, m.Key, string(m.Op), []byte(m.Value), base, m.HLC.Wall); err != nil {
		return fmt.Errorf("add pending: %w", err)
	}
	return nil
}

// raisePendingHW records that every queued write up to queueID is in the
// overlay (or decided), so reconcile need not read them again.
func raisePendingHW(x *txStmts, queueID offlinequeue.ID) error {
	return x.exec(sqlRaisePendingHW, metaPendingHW, int64(queueID))
}

// reconcile copies into the overlay the queued items a crash kept from
// reaching it (the queue is written first), and drops overlay rows whose
// item is no longer pending nor decided (a dead letter requeued elsewhere
// gets a new id). Only the queue's tail past the overlay's high-water mark
// is read, one page at a time.
func (r *replica) reconcile(ctx context.Context, q offlinequeue.Queue) error {
	hw, err := r.meta(ctx, r.db, metaPendingHW)
	if err != nil {
		return err
	}
	after := offlinequeue.ID(hw)
	for {
		items, err := q.Peek(ctx, after, syncproto.MaxBatch)
		if err != nil {
			return err
		}
		if len(items) == 0 {
			return nil
		}
		if err := r.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
			x := r.inTx(ctx, tx)
			for _, it := range items {
				m, err := decodeMutation(it.Payload)
				if err != nil {
					continue // the driver dead-letters it with the reason
				}
				if err := insertPending(x, it.ID, m); err != nil {
					return err
				}
			}
			return raisePendingHW(x, items[len(items)-1].ID)
		}); err != nil {
			return err
		}
		after = items[len(items)-1].ID
	}
}
