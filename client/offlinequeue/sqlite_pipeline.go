package offlinequeue

import (
	"fmt"
	"sync"
)

// Pipelined group commit. A group of enqueues that has company (more than
// one member, none with an EnqueueWith hook, room for all) commits on the
// queue's synchronous=NORMAL connection, so its commit writes the group's
// frames to the write-ahead log without waiting for the disk; the
// committer then hands the group to the groupSyncer and releases the
// writer at once. The groupSyncer fsyncs the log file on a goroutine of
// its own and only then releases the group's callers, so an enqueue still
// returns only once durable (a sync of the log covers every frame written
// to it before the sync began, from any connection). Meanwhile the
// committer writes the next group, whose frames the next sync covers: the
// rows and commit of one group are written while the previous group's
// sync runs, instead of after it. A commit at synchronous=FULL is exactly
// this write followed by this sync, so nothing about what survives a crash
// or a power cut changes; order does not either, as the log is recovered
// as a prefix (an acknowledged group's frames follow every earlier
// commit's).
//
// A group's rows are visible to readers from its commit, before its
// callers return: as with EnqueueCommitting, a reader (the client's
// driver) may send an item whose enqueue has not returned yet, and a power
// cut before the sync can lose it from the queue (never in part, never a
// write acknowledged before it).
//
// A failed sync leaves what it covered unknown: every group waiting for it
// or for a later sync gets ErrPoisoned (a later sync cannot vouch for pages
// the kernel may have dropped) and the queue refuses later writes, as after
// a failed commit.

// groupSyncer syncs the log for pipelined groups and releases their
// callers. The committer hands it groups (hand); its goroutine is stopped
// by close, which Close calls after the committer exited.
type groupSyncer struct {
	q *SQLite

	mu       sync.Mutex
	queued   []*writeRequest // committed, not yet synced, in commit order
	unsynced int             // requests handed over and not yet released
	failed   error           // a sync's failure: every later group gets it

	kick    chan struct{} // a group was queued (buffered, 1)
	stop    chan struct{}
	stopped chan struct{}
}

// startGroupSyncer starts q's groupSyncer.
func startGroupSyncer(q *SQLite) *groupSyncer {
	g := &groupSyncer{q: q, kick: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	go g.run()
	return g
}

// hand queues rs for the next sync, which releases their callers: rs is
// a group committed without a sync or, if onlyIfWaiting, enqueues that
// wrote nothing (releaseAfterSync), queued only if a handed-over request
// is not released yet; it says whether it queued rs. It never blocks.
func (g *groupSyncer) hand(rs []*writeRequest, onlyIfWaiting bool) bool {
	g.mu.Lock()
	if onlyIfWaiting && g.unsynced == 0 {
		g.mu.Unlock()
		return false
	}
	g.queued = append(g.queued, rs...)
	g.unsynced += len(rs)
	g.mu.Unlock()
	select {
	case g.kick <- struct{}{}:
	default:
	}
	return true
}

func (g *groupSyncer) run() {
	defer close(g.stopped)
	var batch []*writeRequest // reused: the groups one sync releases
	for {
		select {
		case <-g.kick:
		case <-g.stop:
			// The committer has exited: nothing more is handed over.
			for g.syncQueued(&batch) {
			}
			return
		}
		g.syncQueued(&batch)
	}
}

// syncQueued syncs the log for every group queued so far and releases
// their callers; it says whether there were any.
func (g *groupSyncer) syncQueued(batch *[]*writeRequest) bool {
	g.mu.Lock()
	*batch, g.queued = g.queued, (*batch)[:0]
	failed := g.failed
	g.mu.Unlock()
	rs := *batch
	if len(rs) == 0 {
		return false
	}
	q := g.q
	if failed == nil {
		sync := syncFile
		if q.hooks.syncLog != nil {
			sync = q.hooks.syncLog
		}
		if err := sync(q.path + "-wal"); err != nil {
			failed = g.fail(err)
		} else {
			q.rec.pipelinedSynced()
			q.rec.committed(len(rs))
		}
	}
	for _, r := range rs {
		if failed != nil {
			r.id, r.err = 0, failed
		}
		close(r.done)
	}
	g.mu.Lock()
	g.unsynced -= len(rs)
	g.mu.Unlock()
	clear(rs) // drop the requests: the slice is reused
	return true
}

// fail latches a sync's failure: the queue is poisoned (under the writer,
// whose holder alone reads it) and every group committed before or after
// the failed sync gets the error returned.
func (g *groupSyncer) fail(cause error) error {
	q := g.q
	err := fmt.Errorf("offlinequeue: enqueue into %s: the sync of its commit failed and its outcome is unknown: %w: %w", q.path, ErrPoisoned, cause)
	g.mu.Lock()
	g.failed = err
	g.mu.Unlock()
	q.writer.Lock()
	if q.poisoned == nil {
		q.poisoned = fmt.Errorf("offlinequeue: %s: %w (a sync of the log failed: %v)", q.path, ErrPoisoned, cause)
	}
	q.writer.Unlock()
	return err
}

// close stops the goroutine once it has synced and released every group
// handed over; the caller has stopped the committer. Nil-safe.
func (g *groupSyncer) close() {
	if g == nil {
		return
	}
	close(g.stop)
	<-g.stopped
}
