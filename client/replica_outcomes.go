package client

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/syncproto"
)

// lockedDeadLetters is a queue whose MoveToDeadLettersWith runs a hook
// under the queue's lock, holding its readers until the move
// (offlinequeue.File and Memory).
type lockedDeadLetters interface {
	MoveToDeadLettersWith(ctx context.Context, id offlinequeue.ID, reason string, with func(ctx context.Context) error) error
}

// deadLetter records m's outcome o (decideHook) and moves its queue item
// id to the dead letters with reason, so that whoever reads the outcome
// (Await, Lookup) finds the write in the dead-letter listing: in the
// queue's file both are one commit; with a replica file of its own the
// outcome commits while the queue holds its readers until the move. A
// crash between the two there leaves the outcome and the pending item,
// which replays and is refused again. A queue with neither method commits
// the outcome, then the move, and the listing may lag. m nil (an item
// that does not decode) records no outcome.
func (r *replica) deadLetter(ctx context.Context, id offlinequeue.ID, reason string, m *syncproto.Mutation, o Outcome) error {
	if m == nil {
		return r.queue.MoveToDeadLetters(ctx, id, reason)
	}
	record := r.decideHook([]decision{{mut: m, outcome: o}})
	if r.shared != nil {
		return r.shared.MoveToDeadLettersWith(ctx, id, reason, record)
	}
	if q, ok := r.queue.(lockedDeadLetters); ok {
		return q.MoveToDeadLettersWith(ctx, id, reason, func(ctx context.Context) error {
			return r.write(ctx, record)
		})
	}
	if err := r.write(ctx, record); err != nil {
		return err
	}
	return r.queue.MoveToDeadLetters(ctx, id, reason)
}

// decision is one write and its final outcome.
type decision struct {
	mut     *syncproto.Mutation
	outcome Outcome
	// upcast: the server applied the write in another value shape than
	// sent (Result.Upcast), so the records take the change feed's value,
	// not the sent one.
	upcast bool
	// unkept: the records did not take the write's row (keepsRow), so
	// its echo, if the feed sends one, is no echo.
	unkept bool
}

// decideDone records the decisions ds (decideHook) and marks their
// queue items ids done. In the queue's file that is one commit: a crash
// leaves both or neither. With a replica file of its own, the outcomes
// commit first (one commit for the batch), then the items: a crash between
// the two resends the writes and the ledger answers duplicate.
// The outcomes are handed to the Await calls waiting for them once they
// are committed (handoffs).
//
// relearnable says the server's ledger holds every one of these outcomes
// (the writes were applied, answered duplicate or superseded): then, in
// the queue's file, the commit does not wait for the disk
// (offlinequeue.SQLite.MarkDoneUnsynced); with a file of its own, the
// items' removal does not (below). A power cut before the log is
// synced (at the latest offlinequeue.SQLiteOptions.UnsyncedWindow later)
// rolls back the outcomes and the removal of the items together; the
// writes, pending again, are replayed and the ledger answers each with the
// outcome recorded here, so nothing is applied twice and Await returns
// the same outcome. Never before its write's enqueue: both are in one log,
// recovered as a prefix of whole commits.
func (r *replica) decideDone(ctx context.Context, ds []decision, ids []offlinequeue.ID, relearnable bool) error {
	gen := r.echoes.generation()
	if r.shared != nil {
		markDone := r.shared.MarkDoneWith
		if relearnable {
			markDone = r.shared.MarkDoneUnsynced
		}
		if err := markDone(ctx, r.decideHook(ds), ids...); err != nil {
			return err
		}
		r.recorded(gen, ds)
		return nil
	}
	if err := r.write(ctx, r.decideHook(ds)); err != nil {
		return err
	}
	r.recorded(gen, ds)
	if q, ok := r.queue.(unsyncedDone); ok && relearnable {
		return q.MarkDoneUnsynced(ctx, ids...)
	}
	return r.queue.MarkDone(ctx, ids...)
}

// unsyncedDone is a queue that can mark items done without waiting for
// the disk (offlinequeue.File). With a replica file of its own, the
// outcomes still commit at the replica's level first: the item's removal,
// unsynced, is then never durable before its outcome, and a power cut
// that loses the removal leaves a write that is replayed and answered
// duplicate, its outcome already recorded.
type unsyncedDone interface {
	MarkDoneUnsynced(ctx context.Context, ids ...offlinequeue.ID) error
}

// recorded tells the Await calls waiting for them and the feed's echo
// check (begun at generation gen) of committed decisions.
func (r *replica) recorded(gen uint64, ds []decision) {
	r.echoes.note(gen, ds)
	for _, d := range ds {
		r.handoffs.hand(d.outcome)
	}
}

// decideHook records ds in a transaction: each write's final outcome,
// its removal from the pending overlay, and what the server said folded
// into the records (the applied write, or the winner that stands). The
// queue item of a decided write is removed only with or after this
// commits, so a crash before resends the write and the ledger answers
// duplicate. Applied writes without a winner
// (nearly every decision of a replay) are recorded decideChunk at a time,
// three multi-row statements per chunk instead of three statements per
// write; the others one by one (decideIn). Order does not matter: outcomes
// are keyed by op id and a record keeps its highest version.
func (r *replica) decideHook(ds []decision) offlinequeue.Hook {
	return func(ctx context.Context, tx *sql.Tx) error {
		x := r.inTx(ctx, tx)
		var applied []*decision
		for i := range ds {
			d := &ds[i]
			if d.outcome.Status == StatusApplied && d.outcome.Winner == nil && !d.upcast {
				applied = append(applied, d)
				continue
			}
			if err := decideIn(x, d); err != nil {
				return err
			}
		}
		for len(applied) > 0 {
			n := min(len(applied), decideChunk)
			if err := decideApplied(x, applied[:n]); err != nil {
				return err
			}
			applied = applied[n:]
		}
		return nil
	}
}

// decideChunk is how many applied writes decideApplied records per
// statement: 10 bound values per outcome row, well within SQLite's limit
// of 32,766 per statement.
const decideChunk = 64

// decideApplied records applied writes (no winner) as decideIn does, with
// one multi-row statement for each of its three steps.
func decideApplied(x *txStmts, ds []*decision) error {
	outcomes := make([]any, 0, 10*len(ds))
	ops := make([]any, 0, len(ds))
	records := make([]any, 0, 8*len(ds))
	for _, d := range ds {
		m, o := d.mut, d.outcome
		outcomes = append(outcomes, o.OpID, m.Model, m.Key, string(o.Status), int64(o.Version), int64(o.Seq), o.Reason, nil, o.RebasedAs, o.DecidedAt.UnixMilli())
		ops = append(ops, o.OpID)
		keep, err := x.keepsRow(m.Model, m.Value, o.Seq)
		if err != nil {
			return err
		}
		d.unkept = !keep
		if keep {
			records = append(records, upsertArgs(m.Model, m.Key, m.Value, o.Version, o.HLC, m.Op == syncproto.OpDelete, x.scopeOf(m.Model, m.Value))...)
		}
	}
	if err := x.exec(insertOutcomes+rowsOf(10, len(ds))+keepFirstOutcome, outcomes...); err != nil {
		return fmt.Errorf("record outcome: %w", err)
	}
	if err := x.exec(`DELETE FROM pending WHERE op_id IN (?`+strings.Repeat(", ?", len(ds)-1)+`)`, ops...); err != nil {
		return err
	}
	if len(records) == 0 {
		return nil
	}
	return x.exec(insertRecords+rowsOf(8, len(records)/8)+keepNewest, records...)
}

// rowsOf is the VALUES list of n rows of width placeholders.
func rowsOf(width, n int) string {
	row := "(?" + strings.Repeat(", ?", width-1) + ")"
	return row + strings.Repeat(", "+row, n-1)
}

// Statements of decideIn (insertOutcomes and keepFirstOutcome also make
// decideApplied's multi-row form).
const (
	insertOutcomes   = `INSERT INTO outcomes (op_id, model, key, status, version, seq, reason, winner, rebased_as, decided_at) VALUES `
	keepFirstOutcome = ` ON CONFLICT (op_id) DO NOTHING`

	sqlInsertOutcome = insertOutcomes + `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)` + keepFirstOutcome
	sqlDeletePending = `DELETE FROM pending WHERE op_id = ?`
)

func decideIn(x *txStmts, d *decision) error {
	m, o := d.mut, d.outcome
	var winner []byte
	if o.Winner != nil {
		var err error
		if winner, err = json.Marshal(o.Winner); err != nil {
			return err
		}
	}
	if err := x.exec(sqlInsertOutcome, o.OpID, m.Model, m.Key, string(o.Status), int64(o.Version), int64(o.Seq), o.Reason, winner, o.RebasedAs, o.DecidedAt.UnixMilli()); err != nil {
		return fmt.Errorf("record outcome: %w", err)
	}
	if err := x.exec(sqlDeletePending, o.OpID); err != nil {
		return err
	}
	switch {
	case o.Status == StatusApplied && d.upcast:
		return nil // the record's value, in the server's shape, comes by the feed
	case o.Status == StatusApplied:
		keep, err := x.keepsRow(m.Model, m.Value, o.Seq)
		if err != nil || !keep {
			d.unkept = true
			return err
		}
		return x.exec(upsertRecord, upsertArgs(m.Model, m.Key, m.Value, o.Version, o.HLC, m.Op == syncproto.OpDelete, x.scopeOf(m.Model, m.Value))...)
	case o.Winner != nil && o.Winner.Version > 0 && !o.Winner.ValueOmitted && !o.Winner.ValueWithheld:
		// A winner without its value (PROTOCOL.md 5.4) reaches the
		// replica through the change feed instead; one withheld (19.2)
		// is of a scope value this device does not hold, and never does.
		w := o.Winner
		if keep, err := x.keepsRow(m.Model, w.Value, 0); err != nil || !keep {
			return err
		}
		return x.exec(upsertRecord, upsertArgs(m.Model, m.Key, w.Value, w.Version, w.HLC, w.Deleted, x.scopeOf(m.Model, w.Value))...)
	}
	return nil
}

// outcome returns a decided write's outcome.
func (r *replica) outcome(ctx context.Context, opID string) (Outcome, bool, error) {
	o, found, _, err := r.outcomeOrPending(ctx, opID)
	return o, found, err
}

// outcomeOrPending returns a write's outcome if it was decided, else
// whether it is still in the pending overlay, read in one statement (one
// snapshot: a decision removes the pending row and records the outcome in
// one transaction, so a write neither decided nor pending is unknown).
func (r *replica) outcomeOrPending(ctx context.Context, opID string) (o Outcome, found, pending bool, err error) {
	var status, reason, rebasedAs sql.Null[string]
	var version, seq, decided sql.Null[int64]
	var winner []byte
	err = r.queryRow(ctx, `SELECT o.status, o.version, o.seq, o.reason, o.winner, o.rebased_as, o.decided_at,
			EXISTS (SELECT 1 FROM pending WHERE op_id = ?1)
		FROM (SELECT ?1 AS op_id) k LEFT JOIN outcomes o ON o.op_id = k.op_id`,
		opID).Scan(&status, &version, &seq, &reason, &winner, &rebasedAs, &decided, &pending)
	if err != nil || !status.Valid {
		return Outcome{}, false, pending, err
	}
	o = Outcome{OpID: opID, Status: OutcomeStatus(status.V), Version: uint64(version.V), Seq: uint64(seq.V),
		Reason: reason.V, RebasedAs: rebasedAs.V, DecidedAt: time.UnixMilli(decided.V)}
	if len(winner) > 0 {
		o.Winner = new(syncproto.Winner)
		if err := json.Unmarshal(winner, o.Winner); err != nil {
			return Outcome{}, false, false, err
		}
	}
	return o, true, pending, nil
}

// pruneOutcomes forgets outcomes decided before cutoff and returns how
// many.
func (r *replica) pruneOutcomes(ctx context.Context, cutoff time.Time) (int64, error) {
	var n int64
	err := r.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM outcomes WHERE decided_at < ?`, cutoff.UnixMilli())
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	return n, err
}

// forgetDeadLettered removes the dead-letter outcomes of ops, so the
// requeued writes' next decisions are recorded.
func (r *replica) forgetDeadLettered(ctx context.Context, ops []string) error {
	return r.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for _, op := range ops {
			if _, err := tx.ExecContext(ctx, `DELETE FROM outcomes WHERE op_id = ? AND status = ?`, op, string(StatusDeadLettered)); err != nil {
				return fmt.Errorf("forget dead-letter outcome: %w", err)
			}
		}
		return nil
	})
}

// trimOutcomes forgets the oldest decided outcomes beyond keep and
// returns how many.
func (r *replica) trimOutcomes(ctx context.Context, keep int) (int64, error) {
	var n int64
	err := r.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM outcomes WHERE op_id IN
			(SELECT op_id FROM outcomes ORDER BY decided_at DESC LIMIT -1 OFFSET ?)`, keep)
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	return n, err
}
