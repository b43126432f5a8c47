package sqlitedb

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
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
// Wrote after each write transaction, with the write's weight, and the
// copying happens beside the writer, in a goroutine of the Checkpointer's
// own, while the writer keeps appending to the log. Wrote reads where the
// log stands (its size and how much of it is copied, from SQLite's shared
// log index: PRAGMA wal_checkpoint(NOOP), no lock, no I/O) every
// CheckpointerOptions.Every units of weight, and at every call once the
// log has reached MaxLogPages, and asks the goroutine for a checkpoint
// whenever frames are left to copy. The goroutine's checkpoints are
// PASSIVE: they copy what no reader still needs and never block a reader
// or the writer; a pass that a commit overtook is followed by another,
// which copies only what that commit appended (up to maxPasses), so the
// database file is synced by the pass that catches up and what is left to
// the writer stays small.
//
// The log is reused from its start only by a write that begins when all of
// it is copied, which a checkpoint running beside a stream of writes never
// leaves behind. So once the log has reached MaxLogPages, Wrote copies the
// rest in its caller, between two writes, as SQLite would have: only when
// at most InlineFrames frames are left to copy and no goroutine checkpoint
// is running. The writer never waits for the goroutine, and its own step
// copies a bounded number of frames (the log's few newest commits); the
// next write starts the log over. The step is PASSIVE, or RESTART when
// WaitForReaders is set: RESTART also waits (within the busy timeout) for
// readers of older snapshots, so the log surely starts over: right where
// every read is short (the client's queue and replica), wrong where a read
// may last seconds (syncd's snapshot streams), where the writer would wait
// for it.
//
// The goroutine yields to the writer's step (ends its passes early) only
// after a pass that copied at most InlineFrames: a pass that a commit
// overtook leaves what it copied unsynced, and the step's sync would
// flush all of it.
//
// The bound: should the log reach LimitLogPages before Wrote found a
// moment for its step (a goroutine starved on a loaded machine, a reader
// pinning old frames, commits larger than InlineFrames), Wrote waits for
// the goroutine's pass, if one runs, and copies all that is left in its
// caller, as SQLite's checkpoint on commit would: a stall, counted apart
// (CheckpointerStats.WriterAtLimit, syncd_wal_checkpoints_total{by=
// "writer_at_limit"}), so the log never grows past LimitLogPages plus one
// write.
//
// Durability is unchanged: a commit is durable in the log at the
// database's synchronous level, the database file is synced by every
// checkpoint that copies the whole log before the log restarts, and the
// log is read back on open whatever was copied.
//
// Every writer of the database must call Wrote, or be one whose writes
// are few enough that the main writer's checkpoints cover them: with
// automatic checkpoints off, nothing else copies the log back.

// DefaultCheckpointEvery is CheckpointerOptions.Every's default. A unit
// of weight is a small write, some 3 to 10 pages (one item of the client's
// queue, one small push on syncd), so the log is looked at every few
// hundred pages.
const DefaultCheckpointEvery = 128

// DefaultMaxLogPages is CheckpointerOptions.MaxLogPages's default: 16 MiB
// of 4 KiB pages.
const DefaultMaxLogPages = 4000

// DefaultInlineFrames is CheckpointerOptions.InlineFrames's default: 2 MiB
// of 4 KiB pages, about what one large group commit of syncd's appends.
const DefaultInlineFrames = 512

// maxPasses bounds the goroutine's passes for one request: a pass that a
// commit overtook is followed by another, which copies only what that
// commit appended.
const maxPasses = 4

// CheckpointerOptions configure StartCheckpointer. The zero value means
// the defaults and PASSIVE steps in the writer.
type CheckpointerOptions struct {
	// A negative value in any field means its default, and a
	// LimitLogPages below MaxLogPages means MaxLogPages.

	// Every is how much weight (the sum of Wrote's) goes between two
	// looks at the log while it is below MaxLogPages; 0 means
	// DefaultCheckpointEvery, or an eighth of MaxLogPages when that is
	// fewer, so that what the writes between two looks append stays
	// small beside the bound however low it is set.
	Every int
	// MaxLogPages is the log's size, in pages, from which Wrote copies
	// what the goroutine left (at most InlineFrames) in its caller so that
	// the log starts over; 0 means DefaultMaxLogPages.
	MaxLogPages int64
	// InlineFrames bounds the frames Wrote's own step copies; 0 means
	// DefaultInlineFrames. Above it, Wrote leaves the copying to the
	// goroutine until LimitLogPages.
	InlineFrames int64
	// LimitLogPages is the log's size, in pages, at which Wrote waits for
	// the goroutine and copies all that is left, however much; 0 means
	// twice MaxLogPages. It must not be below MaxLogPages.
	LimitLogPages int64
	// WaitForReaders makes Wrote's own step RESTART rather than PASSIVE:
	// it waits for readers of older snapshots so that the log surely
	// starts over. Set it only where every read is short.
	WaitForReaders bool
}

// CheckpointerStats count what a Checkpointer did since it started. A
// frame is one page written to the log; frames are counted from the log
// index as read just before each checkpoint.
type CheckpointerStats struct {
	// Background and BackgroundFrames: the goroutine's checkpoints that
	// ran, and the frames they copied.
	Background, BackgroundFrames int64
	// Writer and WriterFrames: Wrote's bounded steps (at most
	// InlineFrames each), and the frames they copied; WriterMaxFrames is
	// the most one of them copied.
	Writer, WriterFrames, WriterMaxFrames int64
	// WriterAtLimit and WriterAtLimitFrames: Wrote's steps at
	// LimitLogPages, which waited for the goroutine and copied all that
	// was left.
	WriterAtLimit, WriterAtLimitFrames int64
	// Deferred: looks at which the log was at MaxLogPages but Wrote left
	// it to the goroutine, because more than InlineFrames were left or
	// the goroutine was checkpointing.
	Deferred int64
	// LogFrames is the log's size in frames at the last look.
	LogFrames int64
}

// Checkpointer runs the WAL checkpoints of a database opened with
// Options.NoAutoCheckpoint beside its writer (see Checkpoints above).
type Checkpointer struct {
	db           *sql.DB
	every        int
	maxPages     int64
	limitPages   int64
	inlineFrames int64
	mode         string // the mode of Wrote's own steps

	requests chan struct{} // to the goroutine; holds one request
	stop     chan struct{} // closed by Close, once
	stopOnce sync.Once
	stopped  chan struct{} // closed by the goroutine when it exits

	mu    sync.Mutex // guards since and full
	since int        // weight since the last look
	full  bool       // the last look found the log at MaxLogPages

	// running is held by a checkpoint as it runs (the goroutine's passes,
	// Wrote's step): two at once would find SQLite's checkpoint lock
	// taken and copy nothing. Wrote only tries it, except at LimitLogPages.
	running sync.Mutex
	// yield asks the goroutine to stop after its pass: the writer will
	// copy what is left itself.
	yield atomic.Bool
	// longPass: the goroutine's last pass copied more than InlineFrames
	// (guarded by running).
	longPass bool

	// The counters of CheckpointerStats, field by field.
	background, backgroundFrames          atomic.Int64
	writer, writerFrames, writerMaxFrames atomic.Int64
	writerAtLimit, writerAtLimitFrames    atomic.Int64
	deferred, logFrames                   atomic.Int64

	// beforePass, if set (tests), runs in the goroutine before each pass,
	// with running held.
	beforePass func()
}

// StartCheckpointer starts the checkpoint goroutine for db. Close stops
// it; call Close before closing db. The Checkpointer is a
// prometheus.Collector of its Stats (docs/metrics.md, syncd_wal_*) that
// one registry may register.
func StartCheckpointer(db *sql.DB, o CheckpointerOptions) *Checkpointer {
	return startCheckpointer(db, o, nil)
}

// startCheckpointer is StartCheckpointer with the goroutine's beforePass
// hook (tests).
func startCheckpointer(db *sql.DB, o CheckpointerOptions, beforePass func()) *Checkpointer {
	c := &Checkpointer{
		beforePass: beforePass,
		db:         db, every: o.Every, maxPages: o.MaxLogPages, limitPages: o.LimitLogPages, inlineFrames: o.InlineFrames,
		mode:     "PASSIVE",
		requests: make(chan struct{}, 1),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	if c.maxPages <= 0 {
		c.maxPages = DefaultMaxLogPages
	}
	if c.every <= 0 {
		c.every = int(max(1, min(DefaultCheckpointEvery, c.maxPages/8)))
	}
	if c.inlineFrames <= 0 {
		c.inlineFrames = DefaultInlineFrames
	}
	if c.limitPages <= 0 {
		c.limitPages = 2 * c.maxPages
	}
	c.limitPages = max(c.limitPages, c.maxPages)
	if o.WaitForReaders {
		c.mode = "RESTART"
	}
	go c.loop()
	return c
}

// Wrote counts a write transaction that committed (or failed: it may have
// appended to the log all the same) as weight units of about 3 to 10
// pages each (below 1 counts as 1). Every Every units, and at every call
// once the log has reached MaxLogPages, it looks at the log and asks the
// goroutine for a checkpoint without waiting for it, or copies in the
// caller what is left when the log has reached MaxLogPages and at most
// InlineFrames are left and no checkpoint is running, or (at
// LimitLogPages only) waits for the goroutine's checkpoint and copies
// what is left. Call it after the transaction ended, outside it. It is
// safe from several goroutines, but meant for the one writer and the
// occasional other. Wrote of a nil Checkpointer does nothing (the database
// checkpoints on commit); after Close it copies only in the caller, and
// one that finds the database closed does nothing.
func (c *Checkpointer) Wrote(weight int) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.since += max(1, weight)
	look := c.full || c.since >= c.every
	if look {
		c.since = 0
	}
	c.mu.Unlock()
	if !look {
		return
	}
	log, copied, ok := c.look()
	c.mu.Lock()
	c.full = ok && log >= c.maxPages
	c.mu.Unlock()
	switch left := log - copied; {
	case !ok || left == 0:
		// Nothing to copy: the next write starts the log over.
	case log >= c.limitPages:
		waited := !c.running.TryLock()
		if waited {
			c.yield.Store(true) // the goroutine stops after its pass
			c.running.Lock()
		}
		c.yield.Store(false)
		c.step(waited || left > c.inlineFrames)
		c.running.Unlock()
	case log >= c.maxPages && left <= c.inlineFrames:
		if c.running.TryLock() {
			c.yield.Store(false)
			c.step(false)
			c.running.Unlock()
			return
		}
		// The goroutine is copying: it stops after this pass, and the
		// next write's look finds it idle.
		c.yield.Store(true)
		c.deferred.Add(1)
	default:
		if log >= c.maxPages {
			c.deferred.Add(1)
		}
		c.yield.Store(false)
		select {
		case c.requests <- struct{}{}:
		default: // one is pending already
		}
	}
}

// step is Wrote's own checkpoint, with running held: it copies what is
// left of the log, as a look just before it counts it (the goroutine may
// have copied some since Wrote's look, and cannot while running is held).
func (c *Checkpointer) step(atLimit bool) {
	_, copied, ok := c.look()
	if !ok {
		return
	}
	_, _, after, ok := c.checkpoint(c.mode)
	if !ok {
		return
	}
	frames := max(0, after-copied)
	if atLimit {
		c.writerAtLimit.Add(1)
		c.writerAtLimitFrames.Add(frames)
		return
	}
	c.writer.Add(1)
	c.writerFrames.Add(frames)
	if frames > c.writerMaxFrames.Load() {
		c.writerMaxFrames.Store(frames) // only under running
	}
}

// Stats returns what the Checkpointer did since it started, without
// waiting for a checkpoint that is running.
func (c *Checkpointer) Stats() CheckpointerStats {
	return CheckpointerStats{
		Background: c.background.Load(), BackgroundFrames: c.backgroundFrames.Load(),
		Writer: c.writer.Load(), WriterFrames: c.writerFrames.Load(), WriterMaxFrames: c.writerMaxFrames.Load(),
		WriterAtLimit: c.writerAtLimit.Load(), WriterAtLimitFrames: c.writerAtLimitFrames.Load(),
		Deferred: c.deferred.Load(), LogFrames: c.logFrames.Load(),
	}
}

// Close stops the goroutine, waiting for a checkpoint it is running. It
// does not checkpoint: closing the database's last connection does.
func (c *Checkpointer) Close() {
	c.stopOnce.Do(func() { close(c.stop) })
	<-c.stopped
}

// look reads the log's size and how much of it is copied, in frames, from
// SQLite's shared log index (a NOOP checkpoint takes no lock and does no
// I/O). ok is false if it could not (the database is closed, or not in WAL
// mode).
func (c *Checkpointer) look() (log, copied int64, ok bool) {
	busy, log, copied, ok := c.checkpoint("NOOP")
	if ok && busy == 0 {
		c.logFrames.Store(log)
	}
	return log, copied, ok && busy == 0
}

// checkpoint runs PRAGMA wal_checkpoint in mode on the main database and
// returns its three numbers: busy (1 if it could not finish), the log's
// size and the frames of it copied. ok is false if it failed (then the log
// only grows until a later one; everything in it is committed).
func (c *Checkpointer) checkpoint(mode string) (busy, log, copied int64, ok bool) {
	err := c.db.QueryRowContext(context.Background(), "PRAGMA main.wal_checkpoint("+mode+")").Scan(&busy, &log, &copied)
	return busy, log, copied, err == nil && log >= 0 && copied >= 0
}

// catchUp is the goroutine's answer to a request: PASSIVE passes, each
// after a look, until one leaves nothing to copy (no commit overtook it;
// that one synced the database file) or maxPasses ran. It yields to the
// writer (Wrote's step) only after a short pass (at most InlineFrames): a
// pass that a commit overtook leaves the database file unsynced, and the
// writer's step would sync all it copied.
func (c *Checkpointer) catchUp() {
	c.running.Lock()
	defer c.running.Unlock()
	for range maxPasses {
		if c.beforePass != nil {
			c.beforePass()
		}
		if !c.longPass && c.yield.Load() {
			return
		}
		log, copied, ok := c.look()
		if !ok || log == copied {
			return
		}
		_, _, after, ok := c.checkpoint("PASSIVE")
		if !ok {
			return
		}
		c.background.Add(1)
		c.backgroundFrames.Add(max(0, after-copied))
		c.longPass = after-copied > c.inlineFrames
		select {
		case <-c.stop:
			return
		default:
		}
	}
}

func (c *Checkpointer) loop() {
	defer close(c.stopped)
	for {
		select {
		case <-c.requests:
			c.catchUp()
		case <-c.stop:
			return
		}
	}
}

var (
	checkpointsDesc = prometheus.NewDesc("syncd_wal_checkpoints_total",
		"WAL checkpoints that ran, by who ran them: background (beside the writer), writer (in the writer, at most InlineFrames frames), writer_at_limit (in the writer, waiting, at LimitLogPages).",
		[]string{"by"}, nil)
	checkpointFramesDesc = prometheus.NewDesc("syncd_wal_checkpoint_frames_total",
		"WAL frames (pages) copied into the database by checkpoints, by who ran them (as syncd_wal_checkpoints_total).",
		[]string{"by"}, nil)
	checkpointDeferredDesc = prometheus.NewDesc("syncd_wal_checkpoints_deferred_total",
		"Looks at a WAL beyond MaxLogPages at which the writer left the copying to the background checkpoint (too many frames left, or one running).",
		nil, nil)
	walFramesDesc = prometheus.NewDesc("syncd_wal_frames",
		"The WAL's size in frames (pages) at the writer's last look.",
		nil, nil)
)

// Describe implements prometheus.Collector.
func (c *Checkpointer) Describe(ch chan<- *prometheus.Desc) {
	ch <- checkpointsDesc
	ch <- checkpointFramesDesc
	ch <- checkpointDeferredDesc
	ch <- walFramesDesc
}

// Collect implements prometheus.Collector: the Stats as
// syncd_wal_checkpoints_total{by}, syncd_wal_checkpoint_frames_total{by},
// syncd_wal_checkpoints_deferred_total and syncd_wal_frames.
func (c *Checkpointer) Collect(ch chan<- prometheus.Metric) {
	s := c.Stats()
	for _, by := range []struct {
		name          string
		count, frames int64
	}{
		{"background", s.Background, s.BackgroundFrames},
		{"writer", s.Writer, s.WriterFrames},
		{"writer_at_limit", s.WriterAtLimit, s.WriterAtLimitFrames},
	} {
		ch <- prometheus.MustNewConstMetric(checkpointsDesc, prometheus.CounterValue, float64(by.count), by.name)
		ch <- prometheus.MustNewConstMetric(checkpointFramesDesc, prometheus.CounterValue, float64(by.frames), by.name)
	}
	ch <- prometheus.MustNewConstMetric(checkpointDeferredDesc, prometheus.CounterValue, float64(s.Deferred))
	ch <- prometheus.MustNewConstMetric(walFramesDesc, prometheus.GaugeValue, float64(s.LogFrames))
}
