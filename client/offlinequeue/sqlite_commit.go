package offlinequeue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"

	"github.com/mattn/go-sqlite3"
)

// maxBatch bounds the enqueues that share one transaction.
const maxBatch = 256

// writeRequest is one write handed to the committer. An enqueue has apply
// nil; the committer groups enqueues. Every other write is its own
// transaction, run by apply.
type writeRequest struct {
	payload []byte
	key     string
	with    func(ctx context.Context, tx *sql.Tx, id ID) error // EnqueueWith's hook, or nil
	// committing, if not nil, is told the item's id before the commit
	// (EnqueueCommitting).
	committing func(ID)

	op    string // names the operation in errors
	apply func(ctx context.Context, tx *sql.Tx) (counts, error)
	// unsynced commits apply without a sync (MarkDoneUnsynced).
	unsynced bool

	// Set by the committer before it closes done.
	id   ID
	err  error
	done chan struct{}
}

// counts is a change of the pending and dead-letter counts, and the dead
// letters evicted by it.
type counts struct{ pending, dead, evicted int }

// submit hands r to the committer and waits for its outcome; while writes
// come one at a time (s.solo) and the writer is free with nothing waiting,
// it commits r itself. Once r has been handed over (or its commit begun) it
// runs to completion whatever happens to ctx, so an error never means
// "perhaps".
func (s *SQLite) submit(ctx context.Context, r *writeRequest) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.life.RUnlock()
	if s.solo.Load() && s.waiting.Load() == 0 && s.lockWriter(r) {
		s.commitOne(r)
		s.writer.Unlock()
		return r.err
	}
	s.waiting.Add(1)
	select {
	case s.requests <- r:
	case <-ctx.Done():
		s.waiting.Add(-1)
		return ctx.Err()
	}
	<-r.done
	return r.err
}

// lockWriter takes s.writer for a caller committing r itself: an enqueue
// only if it is free (one that finds it taken joins the committer's next
// group, so concurrent enqueues share commits), any other write waiting for
// it (it is its own transaction whoever runs it, most often the driver
// settling a write whose enqueue is committing, and waiting spares it the
// hand-offs through the committer).
func (s *SQLite) lockWriter(r *writeRequest) bool {
	if r.apply == nil {
		return s.writer.TryLock()
	}
	s.writer.Lock()
	return true
}

// apply runs fn in a transaction of its own. fn returns the change it made to
// the counts; ErrNotFound from fn is returned as is, any other error is
// wrapped as the failure of op.
func (s *SQLite) apply(ctx context.Context, op string, fn func(ctx context.Context, tx *sql.Tx) (counts, error)) error {
	return s.submit(ctx, &writeRequest{op: op, apply: fn, done: make(chan struct{})})
}

// commitLoop is the committer: the goroutine that writes what callers hand
// over (a caller writing one at a time commits its own write, submit). It
// takes a request and s.writer; if it is an enqueue, it also takes every
// enqueue already waiting (up to maxBatch) and commits them in one
// transaction. Enqueues arriving during that commit wait in s.requests and
// form the next group, so a lone enqueue never waits for company and a busy
// queue pays one commit per group. It exits when Close closes s.stop, which
// Close does only after every submitter has returned.
func (s *SQLite) commitLoop() {
	defer close(s.stopped)
	var held *writeRequest // a non-enqueue met while gathering a group
	last := 0              // the size of the previous group of enqueues
	for {
		r := held
		held = nil
		if r == nil {
			select {
			case r = <-s.requests:
			case <-s.stop:
				return
			}
		}
		s.writer.Lock()
		s.waiting.Add(-1)
		if r.apply != nil {
			s.commitOne(r)
			s.writer.Unlock()
			continue
		}
		group := []*writeRequest{r}
		group, held = s.gather(group, last)
		last = len(group)
		s.solo.Store(last == 1 && held == nil)
		s.commitGroup(group)
		s.writer.Unlock()
	}
}

// commitOne commits one write: an enqueue as a group of one, anything else
// in a transaction of its own. The caller holds s.writer.
func (s *SQLite) commitOne(r *writeRequest) {
	if r.apply != nil {
		s.commitApply(r)
		s.checkpoints.Wrote(1)
		return
	}
	s.commitGroup([]*writeRequest{r})
}

// commitGroup commits a group of enqueues and counts it (before the
// commit releases its callers, so a caller that returned is counted). The
// caller holds s.writer.
func (s *SQLite) commitGroup(group []*writeRequest) {
	s.rec.committed(len(group))
	s.commitEnqueues(group)
	s.checkpoints.Wrote(len(group))
}

// maxRejoinYields bounds how many times one gathering yields the processor
// for the producers of the previous group to come back.
const maxRejoinYields = 8

// gather adds to group every enqueue waiting in s.requests, up to maxBatch;
// it stops at a non-enqueue and returns it as held. When the previous
// group had company (last > 1), the producers its commit released are
// likely runnable and about to enqueue again: gather yields the processor
// (runtime.Gosched, no timer) and takes what they sent, again as long as
// a yield brings more (at most maxRejoinYields). Without it concurrent
// producers split into two groups that alternate, one committing while the
// other forms, and each commit carries half of them. A lone producer (last
// 1) never yields.
func (s *SQLite) gather(group []*writeRequest, last int) ([]*writeRequest, *writeRequest) {
	for yields := 0; ; yields++ {
		before := len(group)
	drain:
		for len(group) < maxBatch {
			select {
			case next := <-s.requests:
				if next.apply != nil {
					return group, next // still counted in s.waiting
				}
				s.waiting.Add(-1)
				group = append(group, next)
			default:
				break drain
			}
		}
		if last <= 1 || len(group) >= maxBatch || yields == maxRejoinYields || (yields > 0 && len(group) == before) {
			return group, nil
		}
		runtime.Gosched()
	}
}

// commitApply runs one non-enqueue write.
func (s *SQLite) commitApply(r *writeRequest) {
	var change counts
	var on beginner = s.db
	unsynced := r.unsynced && s.unsynced != nil
	if unsynced {
		on = s.unsynced.conn
	}
	r.err = s.inTxOn(on, r.op, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		change, err = r.apply(ctx, tx)
		return err
	})
	if r.err == nil {
		s.addCounts(change)
		if unsynced {
			s.unsynced.committed()
		}
	}
	close(r.done)
}

// commitEnqueues writes a group of enqueues in one transaction. Each request
// gets its own ID or its own *FullError; if the transaction fails, every
// request of the group gets that error and none of their items exists.
func (s *SQLite) commitEnqueues(group []*writeRequest) {
	if s.hooks.batch != nil {
		s.hooks.batch(len(group))
	}
	if len(group) == 1 && s.poisoned == nil && s.pending < s.opts.MaxDepth {
		if group[0].with == nil && group[0].committing == nil {
			s.commitLone(group[0])
		} else {
			s.commitLoneWith(group[0])
		}
		return
	}
	var added, refused int
	var told []*writeRequest // to tell after the commit
	plain := s.plainGroup(group)
	err := s.inTx("enqueue into", func(ctx context.Context, tx *sql.Tx) error {
		var fresh []*writeRequest // inserted, with committing to call
		var err error
		if plain {
			var rows []*writeRequest
			if rows, err = s.insertGroup(ctx, tx, group); err != nil {
				return err
			}
			added, refused = len(rows), 0
			for _, r := range rows {
				if r.committing != nil {
					fresh = append(fresh, r)
				}
			}
		} else if added, refused, fresh, err = s.insertEach(ctx, tx, group); err != nil {
			return err
		}
		if s.syncsOnCommit() {
			// Every statement of the group is written: only the commit is left.
			tell(fresh)
		} else {
			told = fresh
		}
		return nil
	})
	if err != nil {
		for _, r := range group {
			r.id, r.err = 0, err
		}
	} else {
		s.addCounts(counts{pending: added})
		if added > 0 && s.syncsOnCommit() {
			s.unsynced.synced() // the commit wrote, so it synced the log
		}
		for range refused {
			s.rec.overflowed()
		}
		tell(told)
	}
	for _, r := range group {
		close(r.done)
	}
}

// insertEach writes group in tx one member at a time: the way of a group
// that has an EnqueueWith hook or may meet the depth bound (else
// insertGroup). It returns the items added, the members refused with a
// *FullError, and the members inserted that have committing to call.
func (s *SQLite) insertEach(ctx context.Context, tx *sql.Tx, group []*writeRequest) (added, refused int, fresh []*writeRequest, err error) {
	find := tx.StmtContext(ctx, s.stmts.findKey)
	insert := tx.StmtContext(ctx, s.stmts.insert)
	var insertNew *sql.Stmt // bound on first use
	for _, r := range group {
		r.id, r.err = 0, nil
		if r.with == nil && s.pending+added < s.opts.MaxDepth {
			// Room for it, no hook: the insert looks the key up.
			if insertNew == nil {
				insertNew = tx.StmtContext(ctx, s.stmts.insertNew)
			}
			id, inserted, err := s.insertNew(ctx, insertNew, find, r)
			if err != nil {
				return 0, 0, nil, err
			}
			r.id = id
			if inserted {
				added++
				if r.committing != nil {
					fresh = append(fresh, r)
				}
			}
			continue
		}
		if r.key != "" {
			var id int64
			err := find.QueryRowContext(ctx, blob(r.key)).Scan(&id)
			if err == nil {
				r.id = ID(id) // dedup hit, earlier in this group or committed
				continue
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return 0, 0, nil, err
			}
		}
		// s.pending is written only by the holder of s.writer.
		if depth := s.pending + added; depth >= s.opts.MaxDepth {
			r.err = &FullError{Depth: depth, Capacity: s.opts.MaxDepth}
			refused++
			continue
		}
		if r.with != nil {
			ok, err := s.insertWith(ctx, tx, insert, r)
			if err != nil {
				return 0, 0, nil, err
			}
			if ok {
				added++
				if r.committing != nil {
					fresh = append(fresh, r)
				}
			}
			continue
		}
		id, err := s.insertItem(ctx, insert, r)
		if err != nil {
			return 0, 0, nil, err
		}
		r.id = id
		added++
		if r.committing != nil {
			fresh = append(fresh, r)
		}
	}
	return added, refused, fresh, nil
}

// syncsOnCommit says whether a commit waits for the disk (every level but
// SyncNormal): only then is there a sync for EnqueueCommitting's caller to
// overlap, and committing is called before the commit; at SyncNormal it is
// called just after it.
func (s *SQLite) syncsOnCommit() bool { return s.opts.Synchronous != SyncNormal }

// tell calls the committing of each of rs with its item's id.
func tell(rs []*writeRequest) {
	for _, r := range rs {
		r.committing(r.id)
	}
}

// insertItem inserts r's item with the group's insert statement.
func (s *SQLite) insertItem(ctx context.Context, insert *sql.Stmt, r *writeRequest) (ID, error) {
	res, err := insert.ExecContext(ctx, r.payload, blob(r.key), s.opts.now().UnixNano())
	if err != nil {
		return 0, err
	}
	id, err := res.LastInsertId()
	return ID(id), err
}

// insertWith inserts r's item and runs its hook under a savepoint of the
// group's transaction. A failing hook rolls back to the savepoint, so the
// item and the hook's rows are gone and the rest of the group commits; it
// is r's error (ok false), not the group's. An error of the savepoint
// statements themselves fails the group.
func (s *SQLite) insertWith(ctx context.Context, tx *sql.Tx, insert *sql.Stmt, r *writeRequest) (ok bool, err error) {
	if _, err := tx.ExecContext(ctx, `SAVEPOINT enqueue_with`); err != nil {
		return false, err
	}
	id, err := s.insertItem(ctx, insert, r)
	if err == nil {
		if err = r.with(ctx, tx, id); err != nil {
			err = fmt.Errorf("offlinequeue: enqueue into %s: %w", s.path, err)
		}
	}
	if err != nil {
		if _, rbErr := tx.ExecContext(ctx, `ROLLBACK TO enqueue_with; RELEASE enqueue_with`); rbErr != nil {
			return false, errors.Join(err, rbErr)
		}
		r.err = err
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, `RELEASE enqueue_with`); err != nil {
		return false, err
	}
	r.id = id
	return true, nil
}

// commitLone commits an enqueue that found no other waiting without an
// explicit transaction: one autocommit insert, the same statement and cost
// as a durable one-row SQLite write. If r's key is pending the insert
// fails on the key's unique index, rolled back whole by SQLite (its id is
// not taken), and a lookup finds that item's id. The holder of s.writer is
// the only writer, so nothing can come between the insert and the lookup;
// an insert that fails is rolled back by SQLite and leaves nothing, so its
// error is certain and never poisons the handle. (The caller has checked
// the depth bound.)
func (s *SQLite) commitLone(r *writeRequest) {
	defer close(r.done)
	r.id, r.err = 0, nil
	ctx := context.Background()
	id, err := s.insertItem(ctx, s.stmts.insert, r)
	if keyTaken(err) {
		var hit int64
		if err = s.stmts.findKey.QueryRowContext(ctx, blob(r.key)).Scan(&hit); err == nil {
			r.id = ID(hit) // dedup hit
			return
		}
	}
	if err != nil {
		r.err = fmt.Errorf("offlinequeue: enqueue into %s: %w", s.path, err)
		return
	}
	r.id = id
	s.addCounts(counts{pending: 1})
	s.unsynced.synced() // nil at SyncNormal
}

// keyTaken says whether err is an insert's failure on the unique index of
// pending keys.
func keyTaken(err error) bool {
	se, ok := errors.AsType[sqlite3.Error](err)
	return ok && se.ExtendedCode == sqlite3.ErrConstraintUnique
}

// insertNew inserts r's item with insertNew unless r's key is pending, and
// then returns the pending item's id (found with findKey) and inserted
// false.
func (s *SQLite) insertNew(ctx context.Context, insertNew, findKey *sql.Stmt, r *writeRequest) (id ID, inserted bool, err error) {
	res, err := insertNew.ExecContext(ctx, r.payload, blob(r.key), s.opts.now().UnixNano())
	if err != nil {
		return 0, false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, false, err
	}
	if n == 0 { // dedup hit
		var hit int64
		if err := findKey.QueryRowContext(ctx, blob(r.key)).Scan(&hit); err != nil {
			return 0, false, err
		}
		return ID(hit), false, nil
	}
	newID, err := res.LastInsertId()
	return ID(newID), err == nil, err
}

// commitLoneWith commits an EnqueueWith (or EnqueueCommitting) that found
// no other waiting: the item and the hook in one transaction, without the savepoint a group
// needs to undo one member (here the member is the whole transaction).
// A failing hook rolls it back; its error is r's, certain, and does not
// poison the handle.
func (s *SQLite) commitLoneWith(r *writeRequest) {
	defer close(r.done)
	var inserted bool
	var hookErr error
	r.id, r.err = 0, nil
	err := s.inTx("enqueue into", func(ctx context.Context, tx *sql.Tx) error {
		if r.key != "" {
			var id int64
			err := tx.StmtContext(ctx, s.stmts.findKey).QueryRowContext(ctx, blob(r.key)).Scan(&id)
			if err == nil {
				r.id = ID(id) // dedup hit: its rows were written with it
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		id, err := s.insertItem(ctx, tx.StmtContext(ctx, s.stmts.insert), r)
		if err != nil {
			return err
		}
		if r.with != nil {
			if hookErr = r.with(ctx, tx, id); hookErr != nil {
				return hookErr
			}
		}
		r.id, inserted = id, true
		if r.committing != nil && s.syncsOnCommit() {
			r.committing(id) // only the commit is left
		}
		return nil
	})
	switch {
	case err == nil:
		if inserted {
			s.addCounts(counts{pending: 1})
			s.unsynced.synced() // nil at SyncNormal
			if r.committing != nil && !s.syncsOnCommit() {
				r.committing(r.id)
			}
		}
	case hookErr != nil && !errors.Is(err, ErrPoisoned):
		r.id, r.err = 0, fmt.Errorf("offlinequeue: enqueue into %s: %w", s.path, hookErr)
	default:
		r.id, r.err = 0, err
	}
}

// inTx runs fn in a transaction and commits it. An error from fn rolls the
// transaction back: ErrNotFound is returned as is, anything else wrapped as a
// failure of op. A failed commit, or a failed rollback, leaves the outcome
// unknown and poisons the handle.
func (s *SQLite) inTx(op string, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return s.inTxOn(s.db, op, fn)
}

// beginner begins transactions: the pool, or the connection that commits
// without a sync.
type beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// inTxOn is inTx on a transaction begun by on.
func (s *SQLite) inTxOn(on beginner, op string, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if s.poisoned != nil {
		return s.poisoned
	}
	ctx := context.Background()
	tx, err := on.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("offlinequeue: %s %s: begin: %w", op, s.path, err)
	}
	if err := fn(ctx, tx); err != nil {
		if rbErr := tx.Rollback(); rbErr != nil {
			return s.poison(op, errors.Join(err, rbErr))
		}
		if errors.Is(err, ErrNotFound) {
			return err
		}
		return fmt.Errorf("offlinequeue: %s %s: %w", op, s.path, err)
	}
	if err := tx.Commit(); err != nil {
		return s.poison(op, err)
	}
	return nil
}

// poison latches the handle's refusal of later writes and returns the error
// for the write whose outcome is unknown.
func (s *SQLite) poison(op string, cause error) error {
	s.poisoned = fmt.Errorf("offlinequeue: %s: %w (an earlier commit failed: %v)", s.path, ErrPoisoned, cause)
	return fmt.Errorf("offlinequeue: %s %s: commit failed and its outcome is unknown: %w: %w", op, s.path, ErrPoisoned, cause)
}

// addCounts applies a committed change to the counts and the gauges.
func (s *SQLite) addCounts(c counts) {
	s.countMu.Lock()
	defer s.countMu.Unlock()
	s.pending += c.pending
	s.dead += c.dead
	s.rec.setCounts(s.pending, s.dead)
	s.rec.evicted(c.evicted)
}

// blob returns b's bytes as a non-nil slice: the driver stores a nil slice as
// NULL, an empty non-nil one as a zero-length BLOB.
func blob(b string) []byte { return append(make([]byte, 0, len(b)), b...) }
