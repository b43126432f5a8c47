package replication

import (
	"context"
	"database/sql"
	"fmt"
)

// Applier carries out decisions: it is the thin I/O wrapper around the pure
// policies, doing for one proposal, inside the caller's transaction, the
// replication steps of the server's apply path (read the record, resolve,
// append to the log, materialize, log the conflict). It holds no state of
// its own and is safe for concurrent use as far as its parts are.
type Applier struct {
	resolver  *Resolver
	log       Log
	records   *Records
	conflicts *ConflictLog
}

// NewApplier returns an Applier over its parts; none may be nil.
func NewApplier(resolver *Resolver, log Log, records *Records, conflicts *ConflictLog) *Applier {
	return &Applier{resolver: resolver, log: log, records: records, conflicts: conflicts}
}

// Apply decides p against the key's current record as seen by tx and, in
// tx: appends the oplog entry and materializes it when the decision is
// OutcomeApplied, and inserts the conflict-log row when the decision calls
// for one. It returns the decision with Record.Seq set when applied and
// Conflict.ID set when a row was inserted.
//
// The caller then records the decision in the ledger, commits, and, if
// anything was appended, reports the highest Record.Seq of the transaction
// to Log.Committed. On error nothing of p is to be kept: the caller rolls
// tx back (the errors are Resolver.Resolve's, or the store's).
func (a *Applier) Apply(ctx context.Context, tx *sql.Tx, p Proposal) (Decision, error) {
	current, exists, err := a.records.Get(ctx, tx, p.Tenant, p.Model, p.Key)
	if err != nil {
		return Decision{}, fmt.Errorf("apply op %s: %w", p.OpID, err)
	}
	d, err := a.resolver.Resolve(ctx, current, exists, p)
	if err != nil {
		return Decision{}, fmt.Errorf("apply op %s: %w", p.OpID, err)
	}
	if d.Outcome == OutcomeApplied {
		e, err := a.log.Append(ctx, tx, NewEntry(d.Record, p.ClientID))
		if err != nil {
			return Decision{}, fmt.Errorf("apply op %s: %w", p.OpID, err)
		}
		if err := a.records.Put(ctx, tx, e.Record()); err != nil {
			return Decision{}, fmt.Errorf("apply op %s: %w", p.OpID, err)
		}
		d.Record.Seq = e.Seq
	}
	if d.Conflict != nil {
		id, err := a.conflicts.Insert(ctx, tx, *d.Conflict)
		if err != nil {
			return Decision{}, fmt.Errorf("apply op %s: %w", p.OpID, err)
		}
		c := *d.Conflict
		c.ID = id
		d.Conflict = &c
	}
	return d, nil
}
