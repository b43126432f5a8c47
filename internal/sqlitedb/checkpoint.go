package sqlitedb

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
)

// Checkpoints. SQLite's default is that the commit which grows the
// write-ahead log past 1,000 pages copies the log into the database and
// syncs the database file (even at synchronous=NORMAL) before it returns:
// one write in some tens waits several milliseconds for work that is not
// its own. In a loop of awaited writes (client Put + Await against syncd)
// those are much of the slow tail, on the device and on syncd
// (docs/benchmarks.md).
//
// A database opened with Options.NoAutoCheckpoint never checkpoints on
// commit; a Checkpointer started for it takes that over. Its writer calls
// Wrote after each write transaction, with the write's weight; every
// CheckpointerOptions.Every units of weight, a goroutine of the Checkpointer's own runs a passive checkpoint
// beside the writer, which keeps appending to the log meanwhile. A passive
// checkpoint copies what no reader still needs and never blocks a reader
// or the writer.
//
// The log is reused from its start only by a write that finds all of it
// copied, which a checkpoint running beside a stream of writes never leaves
// behind. So when the log was beyond MaxLogPages at the last checkpoint (or
// no checkpoint completed for maxQuietRounds rounds), Wrote checkpoints in
// its caller, between two writes, as SQLite would have, after the
// goroutine's checkpoint if one is running: PASSIVE, or RESTART when
// WaitForReaders is set. With the writer waiting, a PASSIVE checkpoint
// copies all the log that no reader of an older snapshot still needs, and
// the next write starts the log over if that was all of it. RESTART also
// waits (within the busy timeout) for those readers, so the log is surely
// all copied and starts over: right where every read is short (the
// client's queue and replica), wrong where a read may last seconds
// (syncd's snapshot streams), where the writer would wait for it. A PASSIVE checkpoint in the writer is exactly
// SQLite's automatic one, only rarer. An app that writes in bursts or
// awaits its writes leaves the background checkpoint gaps enough that the
// log restarts without either.
//
// Durability is unchanged: a commit is durable in the log at the
// database's synchronous level, and the log is read back on open whatever
// was copied.
//
// Every writer of the database must call Wrote, or be one whose writes
// are few enough that the main writer's checkpoints cover them: with
// automatic checkpoints off, nothing else copies the log back.

// DefaultCheckpointEvery is CheckpointerOptions.Every's default. A unit
// of weight is a small write, some 3 to 10 pages (one item of the client's
// queue, one small push on syncd), so the log stays near SQLite's default
// of 1,000 pages.
const DefaultCheckpointEvery = 128

// DefaultMaxLogPages is CheckpointerOptions.MaxLogPages's default: 16 MiB
// of 4 KiB pages.
const DefaultMaxLogPages = 4000

// maxQuietRounds is how many rounds of Every writes Wrote lets pass
// without a checkpoint completing (a checkpointer starved on a loaded
// machine, or stuck behind a long one) before it checkpoints in its
// caller, so the log stays bounded whatever the goroutine manages.
const maxQuietRounds = 8

// CheckpointerOptions configure StartCheckpointer. The zero value means
// the defaults and PASSIVE fallbacks.
type CheckpointerOptions struct {
	// Every is how much weight (the sum of Wrote's) goes between two
	// background checkpoints; 0 means DefaultCheckpointEvery.
	Every int
	// MaxLogPages bounds the log, in pages, as the last checkpoint found
	// it, before Wrote checkpoints in its caller; 0 means
	// DefaultMaxLogPages. The log can exceed it by what a few rounds of
	// Every units of weight add.
	MaxLogPages int64
	// WaitForReaders makes Wrote's own checkpoint RESTART rather than
	// PASSIVE: it waits for readers of older snapshots so that the log
	// surely starts over. Set it only where every read is short.
	WaitForReaders bool
}

// Checkpointer runs the WAL checkpoints of a database opened with
// Options.NoAutoCheckpoint beside its writer (see Checkpoints above).
type Checkpointer struct {
	db       *sql.DB
	every    int
	maxPages int64
	fallback string // the mode of Wrote's own checkpoint

	requests chan struct{} // to the goroutine; holds one request
	stop     chan struct{} // closed by Close, once
	stopOnce sync.Once
	stopped  chan struct{} // closed by the goroutine when it exits

	mu    sync.Mutex // guards the writer's counters below
	since int        // weight since the last request
	seen  uint64     // done as Wrote last read it
	quiet int        // rounds since done last moved

	// running is held by a checkpoint as it runs: Wrote's own waits for
	// the goroutine's rather than find it busy and copy nothing.
	running sync.Mutex

	pages atomic.Int64  // the log's size in pages at the last checkpoint
	done  atomic.Uint64 // checkpoints completed
}

// StartCheckpointer starts the checkpoint goroutine for db. Close stops
// it; call Close before closing db.
func StartCheckpointer(db *sql.DB, o CheckpointerOptions) *Checkpointer {
	c := &Checkpointer{
		db: db, every: o.Every, maxPages: o.MaxLogPages, fallback: "PASSIVE",
		requests: make(chan struct{}, 1),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	if c.every <= 0 {
		c.every = DefaultCheckpointEvery
	}
	if c.maxPages <= 0 {
		c.maxPages = DefaultMaxLogPages
	}
	if o.WaitForReaders {
		c.fallback = "RESTART"
	}
	go c.loop()
	return c
}

// Wrote counts a write transaction that committed (or failed: it may have
// appended to the log all the same) as weight units of about 3 to 10
// pages each (below 1 counts as 1), so that a large write brings the next
// checkpoint nearer as its pages would; every Every units it asks the
// goroutine for a checkpoint without waiting for it, or checkpoints in the
// caller when the log was beyond MaxLogPages or no checkpoint completed
// for maxQuietRounds rounds. Call it after the transaction ended, outside
// it. It is safe from several goroutines, but meant for the one writer
// and the occasional other. Wrote of a nil Checkpointer does nothing (the
// database checkpoints on commit); after Close it checkpoints only in the
// caller, and one that finds the database closed does nothing.
func (c *Checkpointer) Wrote(weight int) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.since += max(1, weight)
	if c.since < c.every {
		c.mu.Unlock()
		return
	}
	c.since = 0
	if done := c.done.Load(); done != c.seen {
		c.seen, c.quiet = done, 0
	} else {
		c.quiet++
	}
	inCaller := c.pages.Load() > c.maxPages || c.quiet >= maxQuietRounds
	if inCaller {
		c.quiet = 0
	}
	c.mu.Unlock()
	if inCaller {
		c.checkpoint(c.fallback)
		return
	}
	select {
	case c.requests <- struct{}{}:
	default: // one is pending already
	}
}

// Close stops the goroutine, waiting for a checkpoint it is running. It
// does not checkpoint: closing the database's last connection does.
func (c *Checkpointer) Close() {
	c.stopOnce.Do(func() { close(c.stop) })
	<-c.stopped
}

// checkpoint runs a checkpoint in mode (PASSIVE or RESTART) and records
// the log's size it found. One that could not run (busy) or failed records
// nothing and is tried again later; until then the log only grows, and
// everything in it is committed.
func (c *Checkpointer) checkpoint(mode string) {
	c.running.Lock()
	defer c.running.Unlock()
	var busy, pages, copied int64
	err := c.db.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &pages, &copied)
	if err == nil && busy == 0 {
		c.pages.Store(pages)
		c.done.Add(1)
	}
}

func (c *Checkpointer) loop() {
	defer close(c.stopped)
	for {
		select {
		case <-c.requests:
			c.checkpoint("PASSIVE")
		case <-c.stop:
			return
		}
	}
}
