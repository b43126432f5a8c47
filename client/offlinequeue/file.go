package offlinequeue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
)

// FileOptions configure OpenFile. The zero value means the defaults.
type FileOptions struct {
	Options
	// FS is the file system the queue uses; nil means OSFS(). Tests wrap
	// OSFS to inject faults.
	FS FS
}

// File is the NDJSON-file queue: every mutation appends one line to the
// queue file (see the format notes in fileformat.go) and fsyncs it before
// returning. It needs nothing beyond the standard library; for very deep
// queues prefer the SQLite queue, which does not hold the queue in memory.
//
// Open: OpenFile replays the file, drops a torn last line (what a crash during
// an append leaves), and compacts: it writes the live state to path+".compact",
// fsyncs it, renames it over path and fsyncs the directory, then appends to
// the compacted file. Damage a crash cannot cause is a *CorruptError; an
// unreadable file is an error, never an empty queue; either way the file is
// left byte-for-byte as it was.
//
// Writes: a mutation writes its record, fsyncs, and only then changes memory.
// A failed write, short write or fsync is rolled back (truncated to where it
// began, then fsynced) before the error returns, so the call left no trace
// and the handle keeps working. When the rollback fails too, the failing call
// returns an error matching both its cause and ErrPoisoned: its outcome is
// unknown (a fully written record may reappear on reopen; a partial one is
// healed away), and every later mutation returns ErrPoisoned. Reads keep
// working from memory; reopen the queue to write again.
//
// Group commit: concurrent Enqueue calls that arrive while a write is in
// flight are written together, in one write and one fsync, as soon as it
// ends; each returns once the fsync covering its line has. If that write
// fails, every caller in the batch gets the error. An Enqueue that finds the
// file idle writes at once; nothing waits on a timer.
//
// One path has one owner: OpenFile takes an advisory lock on path+".lock"
// (a file left in place on purpose) and fails with ErrLocked while another
// handle, in any process, holds it.
type File struct {
	path string
	opts Options
	rec  recorder

	mu      sync.Mutex
	idle    sync.Cond     // broadcast when writing turns false
	st      *fileState    // changed only by the holder of the writer slot
	writing bool          // the writer slot: one goroutine owns f and size
	batch   *enqueueBatch // enqueues waiting for the next group commit
	// lastBatch is the size of the last batch written; the writer slot's
	// holder sets it.
	lastBatch int
	closed    bool
	poisoned  *poisonError // the failed rollback that ended writing, or nil

	// Owned by the writer slot's holder, and by OpenFile and Close.
	f    FSFile
	size int64 // bytes of f that are records (durable, but for an unsynced tail)
	lock io.Closer
	// dirty says records were written without a sync since the last one
	// (MarkDoneUnsynced); syncErr is the failure of a deferred sync, for
	// Close. Owned by the writer slot's holder.
	dirty   bool
	syncErr error

	later *syncLater // syncs a dirty file within the window
}

// enqueueBatch is one group commit: Enqueue calls that share a write+fsync.
// Its first caller is the leader, which writes it; the others wait for done.
type enqueueBatch struct {
	reqs []*enqueueReq
	done chan struct{}
}

type enqueueReq struct {
	payload []byte
	key     string
	at      int64  // the put's time
	rest    []byte // the put's line but its id (encodePut)
	id      ID     // set by the leader
	err     error  // set by the leader
}

var _ Queue = (*File)(nil)

// OpenFile opens the queue file at path, creating it (and nothing else: the
// directory must exist) if it does not exist. See File for what opening does.
// Before anything is opened, path and the files kept beside it (path.lock,
// path.compact) must each be absent or a regular file: a symbolic link,
// FIFO, device, socket or directory is refused with *PathError. Every file
// it creates gets FileMode (0600).
//
// Errors: *PathError, ErrLocked, *CorruptError, *NewerFormatError (matching ErrUnsupportedVersion), an invalid option,
// or an I/O error. On any of them the file at path is byte-for-byte unchanged,
// with one exception: when the directory cannot be synced after the compacted
// file was renamed into place, path holds the same queue, compacted, and the
// open fails because that rename is not known to be durable.
func OpenFile(path string, opts FileOptions) (*File, error) {
	q, err := openFile(path, opts)
	if err != nil {
		return nil, fmt.Errorf("open queue %s: %w", path, err)
	}
	return q, nil
}

func openFile(path string, opts FileOptions) (*File, error) {
	if err := opts.checkLimits(); err != nil {
		return nil, err
	}
	fsys := opts.FS
	if fsys == nil {
		fsys = osFS{}
	}
	if err := checkRegular(path, path+".lock", path+".compact"); err != nil {
		return nil, err
	}
	lock, err := fsys.Lock(path + ".lock")
	if err != nil {
		return nil, err
	}
	st, err := readState(fsys, path)
	var q *File
	if err == nil {
		q, err = compactAndOpen(fsys, path, st)
	}
	if err != nil {
		return nil, errors.Join(err, lock.Close())
	}
	q.opts, q.rec, q.lock = opts.Options.withDefaults(), opts.Metrics.recorder(path), lock
	q.rec.setCounts(len(st.pending), len(st.dead))
	q.later = startSyncLater(q.opts.UnsyncedWindow, q.syncDirty)
	return q, nil
}

// readState loads the queue file. A missing file is an empty queue; any other
// failure to read it is an error.
func readState(fsys FS, path string) (*fileState, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return newFileState(), nil
	}
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	st, _, err := loadState(data)
	if ce, ok := errors.AsType[*CorruptError](err); ok {
		ce.Path = path
	}
	return st, err
}

// compactAndOpen writes st as a compacted file over path and returns a queue
// appending to it. Until the rename, a failure leaves path untouched: the
// directory is synced once before the rename too, so a directory that cannot
// be synced is found while the original is still in place.
func compactAndOpen(fsys FS, path string, st *fileState) (*File, error) {
	data, err := st.snapshot()
	if err != nil {
		return nil, err
	}
	tmp := path + ".compact"
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("compact: %w", err)
	}
	dir := filepath.Dir(path)
	step, err := "write", writeFull(f, data, 0)
	if err == nil {
		step, err = "sync", f.Sync()
	}
	if err == nil {
		step, err = "sync directory", fsys.SyncDir(dir)
	}
	if err == nil {
		step, err = "rename", fsys.Rename(tmp, path)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("compact: %s %s: %w", step, tmp, err), f.Close(), fsys.Remove(tmp))
	}
	// From here on, path names the compacted file.
	if err := fsys.SyncDir(dir); err != nil {
		return nil, errors.Join(fmt.Errorf("compact: sync directory after rename: %w", err), f.Close())
	}
	q := &File{path: path, st: st, f: f, size: int64(len(data))}
	q.idle.L = &q.mu
	return q, nil
}

// writeFull writes all of p at off; a short write is an error.
func writeFull(f FSFile, p []byte, off int64) error {
	n, err := f.WriteAt(p, off)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	return err
}

// Enqueue implements Queue. Concurrent calls share one write and one fsync.
func (q *File) Enqueue(ctx context.Context, payload []byte, key string) (ID, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := q.opts.validateEnqueue(payload, key); err != nil {
		return 0, err
	}
	// The line is encoded before the lock, so the batch's writer only
	// copies it beside its id.
	r := &enqueueReq{payload: bytes.Clone(payload), key: key, at: q.opts.now().UnixNano()}
	var err error
	if r.rest, err = encodePut(r.payload, key, r.at); err != nil {
		return 0, fmt.Errorf("offlinequeue: enqueue: %w", err)
	}
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return 0, err
	}
	b := q.batch
	if b == nil {
		b = &enqueueBatch{done: make(chan struct{})}
		q.batch = b
	}
	b.reqs = append(b.reqs, r)
	if len(b.reqs) > 1 {
		q.mu.Unlock()
		<-b.done
		return r.id, r.err
	}
	q.commitBatchLocked(b)
	q.mu.Unlock()
	return r.id, r.err
}

// commitBatchLocked is the leader's part: wait for the writer slot while
// followers join b, then plan, write and apply b, and release the followers.
func (q *File) commitBatchLocked(b *enqueueBatch) {
	defer close(b.done)
	err := q.acquireLocked()
	if err == nil {
		q.rejoinLocked(b)
	}
	q.batch = nil // later callers form the next batch
	if err == nil {
		q.lastBatch = len(b.reqs)
		err = q.writeBatchLocked(b)
		q.releaseLocked()
	}
	if err != nil {
		for _, r := range b.reqs {
			r.id, r.err = 0, err
		}
	}
}

// rejoinLocked lets the callers the previous group commit released join b
// before it is written. When that group had company (lastBatch > 1), they
// are likely runnable and about to enqueue again: the leader, holding the
// writer slot, yields the processor with q.mu released (runtime.Gosched, no
// timer), again as long as a yield brings more (at most maxRejoinYields).
// Without it concurrent callers split into two batches that alternate, one
// writing while the other forms, and each fsync carries half of them. A
// lone caller (lastBatch 1) never yields.
func (q *File) rejoinLocked(b *enqueueBatch) {
	if q.lastBatch <= 1 {
		return
	}
	for range maxRejoinYields {
		before := len(b.reqs)
		q.mu.Unlock()
		runtime.Gosched()
		q.mu.Lock()
		if len(b.reqs) == before {
			return
		}
	}
}

// writeBatchLocked decides every request of b against the state plus the
// puts planned before it, so dedup and depth are exact within the batch,
// then writes the puts in one write and one fsync.
func (q *File) writeBatchLocked(b *enqueueBatch) error {
	var (
		buf     []byte
		puts    []*record
		full    int
		depth   = len(q.st.pending)
		next    = q.st.hw
		planned = make(map[string]ID)
	)
	for _, r := range b.reqs {
		if r.key != "" {
			if id, ok := q.st.keys[r.key]; ok {
				r.id = id
				continue
			}
			if id, ok := planned[r.key]; ok {
				r.id = id
				continue
			}
		}
		if depth >= q.opts.MaxDepth {
			r.err = &FullError{Depth: depth, Capacity: q.opts.MaxDepth}
			full++
			continue
		}
		next++
		depth++
		r.id = next
		if r.key != "" {
			planned[r.key] = next
		}
		buf = appendPut(buf, next, r.rest)
		puts = append(puts, &record{Op: opPut, ID: next, Payload: r.payload, Key: []byte(r.key), At: r.at})
	}
	if len(puts) > 0 {
		if err := q.writeLocked(buf); err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		for _, put := range puts {
			q.st.apply(put)
		}
		q.rec.committed(len(b.reqs))
		q.rec.setCounts(len(q.st.pending), len(q.st.dead))
	}
	for range full {
		q.rec.overflowed()
	}
	return nil
}

// mutate runs one mutation other than Enqueue: plan derives its record from
// the state (nil when there is nothing to write); the record is made durable
// before the state changes.
func (q *File) mutate(ctx context.Context, verb string, plan func(st *fileState) (*record, error)) error {
	return q.mutateMany(ctx, verb, func(st *fileState) ([]*record, error) {
		r, err := plan(st)
		if r == nil {
			return nil, err
		}
		return []*record{r}, err
	})
}

// mutateMany is mutate for a plan of several records, written with one
// append and one fsync, applied in order.
func (q *File) mutateMany(ctx context.Context, verb string, plan func(st *fileState) ([]*record, error)) error {
	return q.mutateHolding(ctx, verb, plan, q.writeLocked)
}

// mutateHolding is mutateMany writing with write: writeLocked, or
// writeHeld so that q.mu stays held through the write and no reader sees
// the state between plan and the records' apply, or writeUnsynced.
func (q *File) mutateHolding(ctx context.Context, verb string, plan func(st *fileState) ([]*record, error), write func(buf []byte) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.acquireLocked(); err != nil {
		return err
	}
	defer q.releaseLocked()
	rs, err := plan(q.st)
	if err != nil || len(rs) == 0 {
		return err
	}
	var buf []byte
	for _, r := range rs {
		if buf, err = appendRecord(buf, r); err != nil {
			break
		}
	}
	if err == nil {
		err = write(buf)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", verb, err)
	}
	for _, r := range rs {
		q.st.apply(r)
	}
	q.rec.setCounts(len(q.st.pending), len(q.st.dead))
	return nil
}

// usableLocked says whether the handle accepts a call that writes.
func (q *File) usableLocked() error {
	if q.closed {
		return ErrClosed
	}
	if q.poisoned != nil {
		return fmt.Errorf("%w (since %v; rolling that back failed: %v)", ErrPoisoned, q.poisoned.write, q.poisoned.rollback)
	}
	return nil
}

// acquireLocked waits for the writer slot and takes it.
func (q *File) acquireLocked() error {
	for q.writing {
		q.idle.Wait()
	}
	if err := q.usableLocked(); err != nil {
		return err
	}
	q.writing = true
	return nil
}

func (q *File) releaseLocked() {
	q.writing = false
	q.idle.Broadcast()
}

// writeLocked appends buf durably with q.mu released, so readers and new
// enqueuers are not held up by the fsync. The caller holds the writer slot.
func (q *File) writeLocked(buf []byte) error {
	q.mu.Unlock()
	err := q.appendDurable(buf)
	q.mu.Lock()
	return q.notePoison(err)
}

// writeHeld appends buf durably with q.mu held. The caller holds the
// writer slot.
func (q *File) writeHeld(buf []byte) error {
	return q.notePoison(q.appendDurable(buf))
}

// notePoison latches a write error that could not be rolled back, with
// q.mu held, and returns err.
func (q *File) notePoison(err error) error {
	if pe, ok := errors.AsType[*poisonError](err); ok {
		q.poisoned = pe
	}
	return err
}

// poisonError is the error of a write that could not be rolled back. It
// matches both the write's cause and ErrPoisoned.
type poisonError struct{ write, rollback error }

func (e *poisonError) Error() string {
	return fmt.Sprintf("%v; rolling it back failed (%v): %v", e.write, e.rollback, ErrPoisoned)
}

func (e *poisonError) Unwrap() []error { return []error{e.write, ErrPoisoned} }

// appendDurable writes buf at the end of the records and fsyncs it. On any
// failure it truncates the file back to where the write began and fsyncs
// again (after a failed fsync the kernel may have dropped the dirty pages,
// so the truncation is what makes the outcome certain). If that fails too,
// the error is a *poisonError.
func (q *File) appendDurable(buf []byte) error {
	off := q.size
	err := writeFull(q.f, buf, off)
	if err != nil {
		err = fmt.Errorf("write %s: %w", q.path, err)
	} else if err = q.f.Sync(); err != nil {
		err = fmt.Errorf("sync %s: %w", q.path, err)
	} else {
		q.size += int64(len(buf))
		q.dirty = false // the sync covered an unsynced tail too
		return nil
	}
	rbErr := q.f.Truncate(off)
	if rbErr == nil {
		rbErr = q.f.Sync()
	}
	if rbErr != nil {
		return &poisonError{write: err, rollback: rbErr}
	}
	return err
}

// read runs fn under the lock on an open handle. Reads work on a poisoned
// handle: memory holds exactly the durable state.
func (q *File) read(ctx context.Context, fn func(st *fileState)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	fn(q.st)
	return nil
}

// Peek implements Queue. Finding the page start is a binary search.
func (q *File) Peek(ctx context.Context, after ID, limit int) ([]Item, error) {
	var items []Item
	err := q.read(ctx, func(st *fileState) {
		ids := st.order.after(after, limit)
		items = make([]Item, len(ids))
		for i, id := range ids {
			items[i] = cloneItem(*st.pending[id])
		}
	})
	return items, err
}

// DeadLetters implements Queue.
func (q *File) DeadLetters(ctx context.Context, after ID, limit int) ([]DeadLetter, error) {
	var dls []DeadLetter
	err := q.read(ctx, func(st *fileState) {
		ids := st.deadOrder.after(after, limit)
		dls = make([]DeadLetter, len(ids))
		for i, id := range ids {
			dls[i] = *st.dead[id]
			dls[i].Item = cloneItem(dls[i].Item)
		}
	})
	return dls, err
}

// Len implements Queue.
func (q *File) Len(ctx context.Context) (int, error) {
	var n int
	err := q.read(ctx, func(st *fileState) { n = len(st.pending) })
	return n, err
}

// MaxDepth implements Queue.
func (q *File) MaxDepth() int { return q.opts.MaxDepth }

// Stats implements Queue.
func (q *File) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	err := q.read(ctx, func(st *fileState) {
		s = Stats{Pending: len(st.pending), DeadLetters: len(st.dead), MaxDepth: q.opts.MaxDepth}
	})
	return s, err
}

// MarkDone implements Queue. The IDs that are pending are removed by one
// record, so a crash keeps all of them or none.
func (q *File) MarkDone(ctx context.Context, ids ...ID) error {
	return q.mutate(ctx, "mark done", q.planDone(ids))
}

// MarkDoneUnsynced is MarkDone without waiting for the disk (see
// unsynced.go): its record is written, not synced. When it returns the
// items are gone for every reader and stay gone across a process crash;
// across a power cut once the file is synced, by the next write that
// syncs (an enqueue) or at the latest Options.UnsyncedWindow later. A
// power cut before that keeps all of the items or none (a torn last line
// is healed on open), never a record written before it.
func (q *File) MarkDoneUnsynced(ctx context.Context, ids ...ID) error {
	return q.mutateHolding(ctx, "mark done", func(st *fileState) ([]*record, error) {
		r, err := q.planDone(ids)(st)
		if r == nil {
			return nil, err
		}
		return []*record{r}, err
	}, q.writeUnsynced)
}

// planDone plans the record removing the pending items of ids.
func (q *File) planDone(ids []ID) func(st *fileState) (*record, error) {
	return func(st *fileState) (*record, error) {
		known := distinctIn(ids, st.pending)
		if len(known) == 0 {
			return nil, nil
		}
		return &record{Op: opDone, IDs: known}, nil
	}
}

// writeUnsynced appends buf without a sync, with q.mu held (a write to the
// cache is short), and wakes the deferred sync. A failed write is
// truncated away (nothing of it was synced); if that fails the handle is
// poisoned. The caller holds the writer slot.
func (q *File) writeUnsynced(buf []byte) error {
	off := q.size
	err := writeFull(q.f, buf, off)
	if err == nil {
		q.size += int64(len(buf))
		q.dirty = true
		q.later.wake()
		return nil
	}
	err = fmt.Errorf("write %s: %w", q.path, err)
	if rbErr := q.f.Truncate(off); rbErr != nil {
		return q.notePoison(&poisonError{write: err, rollback: rbErr})
	}
	return err
}

// syncDirty is the deferred sync: it fsyncs the file if records were
// written without a sync since the last one. A failed sync poisons the
// handle: those records may be lost, so no later write may claim
// durability.
func (q *File) syncDirty() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.acquireLocked() != nil {
		return // closed (Close syncs) or poisoned
	}
	defer q.releaseLocked()
	q.syncDirtyHeld()
}

// syncDirtyHeld is syncDirty for the holder of the writer slot (or Close).
func (q *File) syncDirtyHeld() {
	if !q.dirty {
		return
	}
	if err := q.f.Sync(); err != nil {
		q.syncErr = fmt.Errorf("sync %s: %w", q.path, err)
		q.poisoned = &poisonError{write: q.syncErr, rollback: errors.New("records written without a sync may be lost")}
		return
	}
	q.dirty = false
	q.rec.deferredSynced()
}

// SetAttempts implements Queue. Setting the count an item already has
// writes nothing.
func (q *File) SetAttempts(ctx context.Context, id ID, n Attempts) error {
	return q.mutate(ctx, "set attempts", func(st *fileState) (*record, error) {
		it, ok := st.pending[id]
		if !ok {
			return nil, ErrNotFound
		}
		if it.Attempts == n {
			return nil, nil
		}
		return &record{Op: opAttempts, ID: id, Attempts: n}, nil
	})
}

// MoveToDeadLetters implements Queue.
func (q *File) MoveToDeadLetters(ctx context.Context, id ID, reason string) error {
	return q.moveToDead(ctx, id, reason, nil)
}

// MoveToDeadLettersWith moves an item to the dead letters like
// MoveToDeadLetters and runs with just before the move is written, with
// the queue locked from before with runs until the move is applied: every
// call on the queue that begins once with's effects (the caller's record
// of the item, its outcome) can be seen waits for the move and sees the
// item dead. An unknown ID is ErrNotFound and does not run with; an error
// from with moves nothing. with must not call the queue.
//
// The file cannot share a transaction with the caller's storage: if the
// move's write fails after with succeeded, with's effects stay and the
// item stays pending, and a crash between the two leaves the same. A
// caller records about the item only what stays true if it is delivered
// again (an outcome kept by its first write, say). Readers wait through
// the move's fsync; dead-lettering is rare enough that this costs nothing
// of note.
func (q *File) MoveToDeadLettersWith(ctx context.Context, id ID, reason string, with func(ctx context.Context) error) error {
	return q.moveToDead(ctx, id, reason, with)
}

// moveToDead is MoveToDeadLetters, and MoveToDeadLettersWith when with is
// not nil.
func (q *File) moveToDead(ctx context.Context, id ID, reason string, with func(ctx context.Context) error) error {
	var evicted int
	write := q.writeLocked
	if with != nil {
		write = q.writeHeld
	}
	err := q.mutateHolding(ctx, "move to dead letters", func(st *fileState) ([]*record, error) {
		if _, ok := st.pending[id]; !ok {
			return nil, ErrNotFound
		}
		if with != nil {
			if err := with(ctx); err != nil {
				return nil, fmt.Errorf("offlinequeue: move to dead letters in %s: %w", q.path, err)
			}
		}
		dead := &record{Op: opDead, ID: id, Reason: []byte(truncateReason(reason)), At: q.opts.now().UnixNano()}
		over := len(st.dead) + 1 - q.opts.MaxDeadLetters
		if over <= 0 {
			return []*record{dead}, nil
		}
		letters := make([]DeadLetter, 0, len(st.dead))
		for _, d := range st.dead {
			letters = append(letters, *d)
		}
		evict := longestDead(letters, over)
		evicted = len(evict)
		return []*record{dead, {Op: opPurge, IDs: evict}}, nil
	}, write)
	if err == nil {
		q.rec.evicted(evicted)
	}
	return err
}

// Requeue implements Queue. Dead letters are requeued in ID order; of two
// with the same key, the older is requeued and the younger dropped. The whole
// call is one record.
func (q *File) Requeue(ctx context.Context, ids ...ID) error {
	return q.mutate(ctx, "requeue", func(st *fileState) (*record, error) {
		known := distinctIn(ids, st.dead)
		if len(known) == 0 {
			return nil, nil
		}
		slices.Sort(known)
		r := &record{Op: opRequeue, At: q.opts.now().UnixNano()}
		next := st.hw
		moved := make(map[string]bool)
		for _, id := range known {
			if key := st.dead[id].Key; key != "" {
				if _, pending := st.keys[key]; pending || moved[key] {
					r.Drop = append(r.Drop, id)
					continue
				}
				moved[key] = true
			}
			next++
			r.IDs, r.New = append(r.IDs, id), append(r.New, next)
		}
		return r, nil
	})
}

// Purge implements Queue.
func (q *File) Purge(ctx context.Context, ids ...ID) error {
	return q.mutate(ctx, "purge", func(st *fileState) (*record, error) {
		known := distinctIn(ids, st.dead)
		if len(known) == 0 {
			return nil, nil
		}
		return &record{Op: opPurge, IDs: known}, nil
	})
}

// distinctIn returns the distinct ids that are keys of set, in first-seen order.
func distinctIn[V any](ids []ID, set map[ID]V) []ID {
	var out []ID
	seen := make(map[ID]bool, len(ids))
	for _, id := range ids {
		if _, ok := set[id]; ok && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// Close implements Queue. It waits for a write in flight, then releases the
// file and its lock. Enqueues waiting for a group commit get ErrClosed.
func (q *File) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	for q.writing {
		q.idle.Wait()
	}
	q.mu.Unlock()
	q.later.close()
	q.mu.Lock()
	q.syncDirtyHeld() // closed and idle: nothing else writes
	q.mu.Unlock()
	if err := errors.Join(q.syncErr, q.f.Close(), q.lock.Close()); err != nil {
		return fmt.Errorf("close queue %s: %w", q.path, err)
	}
	return nil
}
