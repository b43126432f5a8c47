package offlinequeue

import (
	"context"

	"github.com/mattn/go-sqlite3"
)

// Checkpoints. SQLite's default is that the commit which grows the
// write-ahead log past 1,000 pages copies the log into the database and
// syncs the database file (even at synchronous=NORMAL) before it returns:
// one write in some tens waits several milliseconds for work that is not
// its own. Those are much of the slow tail of an app that awaits each
// write (docs/benchmarks.md). The queue turns that off on every connection
// and has a goroutine of its own run a passive checkpoint after every
// checkpointEvery writes of the committer, beside the committer, which
// keeps appending to the log meanwhile. A passive checkpoint copies what
// no reader still needs and never blocks a reader or the writer.
//
// The log is reused from its start only by a write that finds all of it
// copied, which a checkpoint running beside a stream of writes never
// leaves behind. So when the checkpointer finds the log beyond
// maxLogFrames (or has completed no checkpoint for maxQuietRounds rounds),
// the committer checkpoints itself, between two writes, as
// SQLite would have, in RESTART mode: it waits (within the busy timeout)
// for a checkpointer still running and for readers of older snapshots,
// which the queue's and the replica's short reads release within
// milliseconds, so the log is all copied and the next write starts it
// over. That wait, once per maxLogFrames pages or so, is the one a stream
// of writes still pays (SQLite's own came every 1,000 pages); an app that
// writes in bursts or awaits its writes leaves the checkpointer gaps
// enough that the log restarts without it.
//
// Durability is unchanged: a commit is durable in the log at the queue's
// synchronous level, and the log is read back on open whatever was copied.

// checkpointEvery is how many committer writes (transactions or lone
// inserts) go between two checkpoints. A write of the client adds some 3
// to 10 pages, so the log stays near SQLite's default of 1,000 pages.
const checkpointEvery = 128

// maxLogFrames bounds the log (in pages; 16 MiB of 4 KiB pages) before
// the committer checkpoints itself.
const maxLogFrames = 4000

// maxQuietRounds is how many rounds of checkpointEvery writes the
// committer lets pass without a checkpoint completing (a checkpointer
// starved on a loaded machine, or stuck behind a long one) before it
// checkpoints itself, so the log stays bounded whatever the checkpointer
// manages.
const maxQuietRounds = 8

// noAutoCheckpoint is run on every connection: no commit checkpoints.
func noAutoCheckpoint(c *sqlite3.SQLiteConn) error {
	_, err := c.Exec("PRAGMA wal_autocheckpoint = 0", nil)
	return err
}

// wrote counts a write of the committer and, every checkpointEvery, asks
// the checkpointer for a checkpoint without waiting for it, or checkpoints
// itself when the log is beyond maxLogFrames or no checkpoint completed
// for maxQuietRounds rounds. Called only by the committer.
func (s *SQLite) wrote() {
	s.sinceCheckpoint++
	if s.sinceCheckpoint < checkpointEvery {
		return
	}
	s.sinceCheckpoint = 0
	if done := s.checkpointsDone.Load(); done != s.checkpointsSeen {
		s.checkpointsSeen, s.quietRounds = done, 0
	} else {
		s.quietRounds++
	}
	if s.logFrames.Load() > maxLogFrames || s.quietRounds >= maxQuietRounds {
		s.quietRounds = 0
		s.checkpoint("RESTART")
		return
	}
	select {
	case s.checkpoints <- struct{}{}:
	default: // one is pending already
	}
}

// checkpoint runs a checkpoint in mode (PASSIVE or RESTART) and records
// the log's size it found. One that could not run (busy) or failed records
// nothing and is tried again later; until then the log only grows, and
// everything in it is committed.
func (s *SQLite) checkpoint(mode string) {
	var busy, frames, copied int64
	err := s.db.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &frames, &copied)
	if err == nil && busy == 0 {
		s.logFrames.Store(frames)
		s.checkpointsDone.Add(1)
	}
}

// checkpointLoop is the checkpointer. It exits when Close closes s.stop.
func (s *SQLite) checkpointLoop() {
	defer close(s.checkpointed)
	for {
		select {
		case <-s.checkpoints:
			s.checkpoint("PASSIVE")
		case <-s.stop:
			return
		}
	}
}
