package offlinequeue

import (
	"context"
	"database/sql"
)

// Sharing the queue's database. A caller that keeps its own tables in the
// queue's SQLite file (the client's replica and pending overlay) can make
// its writes part of the queue's transactions, so that one commit, one
// fsync at synchronous=FULL, carries an enqueue and the rows that go with
// it. Every write to the file goes through the queue's one committer, so no
// two transactions ever wait on each other inside SQLite (where a waiter
// sleeps 1, 2, 5, 10 ms... in its busy handler): they queue in Go instead.
//
// The caller's tables must not use PRAGMA user_version (the queue's schema
// version) nor the queue's table names (items, dead_letters,
// sqlite_sequence). Create them through Update after OpenSQLite: a file
// holding other tables but no queue is refused at open.

// Hook writes a caller's rows inside a queue transaction. tx is the queue's
// transaction; the hook must not commit or roll it back, and must not keep
// it after returning. An error from the hook undoes everything the call
// wrote, the hook's rows and the queue's, and is returned (wrapped) by the
// call.
type Hook func(ctx context.Context, tx *sql.Tx) error

// EnqueueWith enqueues like Enqueue and, in the same transaction, after the
// item's row is written, runs with with the new item's ID. It returns once
// both are committed together, or neither exists. A dedup hit writes nothing
// and does not run with: the pending item already carries the operation, and
// its rows were written when it was enqueued. Concurrent EnqueueWith and
// Enqueue calls share one transaction (group commit) as Enqueue calls do; a
// hook's failure undoes only its own item and rows (a savepoint), never its
// neighbours'.
// Errors: those of Enqueue, or the hook's error.
func (s *SQLite) EnqueueWith(ctx context.Context, payload []byte, key string, with func(ctx context.Context, tx *sql.Tx, id ID) error) (ID, error) {
	return s.EnqueueCommitting(ctx, payload, key, with, nil)
}

// EnqueueCommitting is EnqueueWith that also calls committing, when it is
// not nil, with the new item's ID once the item and with's rows are
// written and only the commit is left: the item is not durable yet, and
// the call returns once it is. So a caller can start what follows from the
// write (sending it) while the commit's sync runs. At SyncNormal, where a
// commit does not wait for the disk, committing is called just after the
// commit instead (still before the call returns). If that commit then
// fails, the call's error matches ErrPoisoned: the item's fate is unknown,
// as for any failed commit. committing is not called for a dedup hit, a
// refused or failed item, nor for any item of a group that is rolled back
// (its neighbours' statements are all written first); it runs in the
// queue's writer and must not block or call the queue. Writes that follow
// on the queue (MarkDoneWith of the item) commit after this one.
func (s *SQLite) EnqueueCommitting(ctx context.Context, payload []byte, key string, with func(ctx context.Context, tx *sql.Tx, id ID) error, committing func(ID)) (ID, error) {
	if err := s.opts.validateEnqueue(payload, key); err != nil {
		return 0, err
	}
	r := &writeRequest{payload: payload, key: key, with: with, committing: committing, done: make(chan struct{})}
	if err := s.submit(ctx, r); err != nil {
		return 0, err
	}
	return r.id, nil
}

// MarkDoneWith marks items done like MarkDone and runs with in the same
// transaction, so that what the caller records about the delivered items
// (their outcomes) and their removal from the queue commit together.
func (s *SQLite) MarkDoneWith(ctx context.Context, with Hook, ids ...ID) error {
	return s.apply(ctx, "mark done in", func(ctx context.Context, tx *sql.Tx) (counts, error) {
		if err := with(ctx, tx); err != nil {
			return counts{}, err
		}
		return s.markDone(ctx, tx, ids)
	})
}

// MoveToDeadLettersWith moves an item to the dead letters like
// MoveToDeadLetters and runs with in the same transaction, after the move,
// so that what the caller records about the item (its outcome) becomes
// visible in the same commit as the dead letter: no reader ever sees one
// without the other. An unknown ID is ErrNotFound and does not run with;
// an error from with moves nothing.
func (s *SQLite) MoveToDeadLettersWith(ctx context.Context, id ID, reason string, with Hook) error {
	return s.apply(ctx, "move to dead letters in", func(ctx context.Context, tx *sql.Tx) (counts, error) {
		change, err := s.moveToDead(ctx, tx, id, reason)
		if err != nil {
			return counts{}, err
		}
		return change, with(ctx, tx)
	})
}

// Update runs fn in a transaction of its own, taken by the queue's
// committer in turn with every other write to the file, and commits it.
// It is how a caller writes its own tables in the queue's database.
func (s *SQLite) Update(ctx context.Context, fn Hook) error {
	return s.apply(ctx, "update", func(ctx context.Context, tx *sql.Tx) (counts, error) {
		return counts{}, fn(ctx, tx)
	})
}

// DB returns the queue's database, for reads of the caller's tables (WAL
// lets them run beside the committer). Writes must go through Update,
// EnqueueWith, MarkDoneWith or MoveToDeadLettersWith; the queue closes
// the database on Close.
func (s *SQLite) DB() *sql.DB { return s.db }
