package offlinequeue

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Operations of the FS seam that faultFS can fail.
const (
	fsOpen     = "open"
	fsRead     = "read"
	fsWrite    = "write"
	fsSync     = "sync"
	fsTruncate = "truncate"
	fsRename   = "rename"
	fsSyncDir  = "syncdir"
)

// fsFault is one injected failure. For a write, keep bytes of the buffer are
// really written before err is returned (err nil makes it a silent short
// write; a negative keep counts from the end, so -1 is all but the newline);
// every other operation fails with err without doing anything, or, when err
// is nil, goes through (a way to target a later call).
type fsFault struct {
	err  error
	keep int
}

// faultFS wraps the OS file system, counts calls, and fails the next calls of
// an operation with armed faults, one fault per call.
type faultFS struct {
	FS
	mu      sync.Mutex
	armed   map[string][]fsFault
	calls   map[string]int
	gate    chan struct{} // when set, the next Sync announces itself on entered and waits for gate
	entered chan struct{}
}

func newFaultFS() *faultFS {
	return &faultFS{FS: osFS{}, armed: map[string][]fsFault{}, calls: map[string]int{}}
}

func (f *faultFS) arm(op string, ft fsFault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed[op] = append(f.armed[op], ft)
}

func (f *faultFS) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// holdNextSync makes the next file Sync block until the returned release is
// called; entered is closed when that Sync has begun.
func (f *faultFS) holdNextSync() (entered <-chan struct{}, release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gate, f.entered = make(chan struct{}), make(chan struct{})
	gate := f.gate
	return f.entered, sync.OnceFunc(func() { close(gate) })
}

// take counts a call of op and returns its armed fault, if any.
func (f *faultFS) take(op string) (fsFault, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[op]++
	q := f.armed[op]
	if len(q) == 0 {
		return fsFault{}, false
	}
	f.armed[op] = q[1:]
	return q[0], true
}

func (f *faultFS) OpenFile(name string, flag int, perm fs.FileMode) (FSFile, error) {
	if ft, ok := f.take(fsOpen); ok && ft.err != nil {
		return nil, ft.err
	}
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{FSFile: file, fs: f}, nil
}

func (f *faultFS) Rename(oldpath, newpath string) error {
	if ft, ok := f.take(fsRename); ok && ft.err != nil {
		return ft.err
	}
	return f.FS.Rename(oldpath, newpath)
}

func (f *faultFS) SyncDir(dir string) error {
	if ft, ok := f.take(fsSyncDir); ok && ft.err != nil {
		return ft.err
	}
	return f.FS.SyncDir(dir)
}

type faultFile struct {
	FSFile
	fs *faultFS
}

func (f *faultFile) Read(p []byte) (int, error) {
	if ft, ok := f.fs.take(fsRead); ok && ft.err != nil {
		return 0, ft.err
	}
	return f.FSFile.Read(p)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	ft, ok := f.fs.take(fsWrite)
	if !ok {
		return f.FSFile.WriteAt(p, off)
	}
	keep := ft.keep
	if keep < 0 {
		keep += len(p)
	}
	n, err := f.FSFile.WriteAt(p[:min(max(keep, 0), len(p))], off)
	if err != nil {
		return n, err
	}
	return n, ft.err
}

func (f *faultFile) Sync() error {
	ft, ok := f.fs.take(fsSync)
	f.fs.mu.Lock()
	gate, entered := f.fs.gate, f.fs.entered
	f.fs.gate = nil
	f.fs.mu.Unlock()
	if gate != nil {
		close(entered)
		<-gate
	}
	if ok && ft.err != nil {
		return ft.err
	}
	return f.FSFile.Sync()
}

func (f *faultFile) Truncate(size int64) error {
	if ft, ok := f.fs.take(fsTruncate); ok && ft.err != nil {
		return ft.err
	}
	return f.FSFile.Truncate(size)
}

// openFaultFile opens a queue on a fresh path through a faultFS.
func openFaultFile(t *testing.T, opts Options) (*File, *faultFS, string) {
	t.Helper()
	fsys := newFaultFS()
	path := filepath.Join(t.TempDir(), "q")
	q, err := OpenFile(path, FileOptions{Options: opts, FS: fsys})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	return q, fsys, path
}

// fileStateOf is the queue's whole state (items, dead letters, high-water mark)
// in compacted form, so two states compare as bytes.
func fileStateOf(t *testing.T, q *File) []byte {
	t.Helper()
	q.mu.Lock()
	defer q.mu.Unlock()
	b, err := q.st.snapshot()
	require.NoError(t, err)
	return b
}

// reopenCleanFile closes q, opens path again without faults, requires that the
// file had no torn tail left afterwards, and returns the reopened state.
func reopenCleanFile(t *testing.T, q *File, path string) []byte {
	t.Helper()
	require.NoError(t, q.Close())
	r, err := OpenFile(path, FileOptions{})
	require.NoError(t, err)
	state := fileStateOf(t, r)
	require.NoError(t, r.Close())
	requireCleanFile(t, path, state)
	return state
}

// requireCleanFile requires path to load with no torn tail into want.
func requireCleanFile(t *testing.T, path string, want []byte) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	st, torn, err := loadState(raw)
	require.NoError(t, err)
	require.False(t, torn, "the file still has a torn tail after a reopen")
	got, err := st.snapshot()
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
}

// fileMutation is one kind of write, against a queue prepared by seedFileQueue.
type fileMutation struct {
	name string
	do   func(t *testing.T, q *File) error
}

// seedFileQueue gives q pending items 1..4 (key "k1" on 1) and dead letters 5, 6.
func seedFileQueue(t *testing.T, q *File) {
	t.Helper()
	for i := range 6 {
		key := ""
		if i == 0 {
			key = "k1"
		}
		_, err := q.Enqueue(t.Context(), []byte(fmt.Sprintf("item %d", i+1)), key)
		require.NoError(t, err)
	}
	require.NoError(t, q.MoveToDeadLetters(t.Context(), 5, "five"))
	require.NoError(t, q.MoveToDeadLetters(t.Context(), 6, "six"))
}

var fileMutations = []fileMutation{
	{"Enqueue", func(t *testing.T, q *File) error {
		_, err := q.Enqueue(t.Context(), []byte("phantom"), "phantom-key")
		return err
	}},
	{"MarkDone", func(t *testing.T, q *File) error { return q.MarkDone(t.Context(), 1, 3) }},
	{"SetAttempts", func(t *testing.T, q *File) error { return q.SetAttempts(t.Context(), 2, 7) }},
	{"MoveToDeadLetters", func(t *testing.T, q *File) error { return q.MoveToDeadLetters(t.Context(), 1, "gone") }},
	{"Requeue", func(t *testing.T, q *File) error { return q.Requeue(t.Context(), 5, 6) }},
	{"Purge", func(t *testing.T, q *File) error { return q.Purge(t.Context(), 5) }},
}

func TestFileEveryMutationIsOneWriteAndOneFsyncBeforeItReturns(t *testing.T) {
	for _, m := range fileMutations {
		t.Run(m.name, func(t *testing.T) {
			q, fsys, path := openFaultFile(t, Options{})
			seedFileQueue(t, q)
			writes, syncs := fsys.count(fsWrite), fsys.count(fsSync)
			require.NoError(t, m.do(t, q))
			require.Equal(t, writes+1, fsys.count(fsWrite), "writes")
			require.Equal(t, syncs+1, fsys.count(fsSync), "fsyncs")
			// What the call returned with is in the file, as a reopen sees it.
			require.Equal(t, string(fileStateOf(t, q)), string(reopenCleanFile(t, q, path)))
		})
	}
}

// fileWriteFaults are the ways an append fails, each with the error it returns.
var fileWriteFaults = []struct {
	name   string
	arm    func(f *faultFS)
	target error
}{
	{"short write", func(f *faultFS) { f.arm(fsWrite, fsFault{keep: 9}) }, io.ErrShortWrite},
	{"short write with EIO", func(f *faultFS) { f.arm(fsWrite, fsFault{keep: 9, err: syscall.EIO}) }, syscall.EIO},
	{"ENOSPC with nothing written", func(f *faultFS) { f.arm(fsWrite, fsFault{err: syscall.ENOSPC}) }, syscall.ENOSPC},
	{"all but the newline written", func(f *faultFS) { f.arm(fsWrite, fsFault{keep: -1, err: syscall.ENOSPC}) }, syscall.ENOSPC},
	{"fsync fails", func(f *faultFS) { f.arm(fsSync, fsFault{err: syscall.EIO}) }, syscall.EIO},
}

func TestFileFailedWriteIsRolledBackAndTheHandleKeepsWorking(t *testing.T) {
	for _, wf := range fileWriteFaults {
		for _, m := range fileMutations {
			t.Run(wf.name+"/"+m.name, func(t *testing.T) {
				q, fsys, path := openFaultFile(t, Options{})
				seedFileQueue(t, q)
				before := fileStateOf(t, q)
				fileBefore, err := os.ReadFile(path)
				require.NoError(t, err)

				wf.arm(fsys)
				err = m.do(t, q)
				require.ErrorIs(t, err, wf.target)
				require.NotErrorIs(t, err, ErrPoisoned)
				require.Equal(t, string(before), string(fileStateOf(t, q)), "memory changed by a failed write")
				fileAfter, err := os.ReadFile(path)
				require.NoError(t, err)
				require.Equal(t, fileBefore, fileAfter, "the rollback left bytes behind")

				// The handle keeps working, and a retry succeeds.
				require.NoError(t, m.do(t, q))
				want := fileStateOf(t, q)
				require.Equal(t, string(want), string(reopenCleanFile(t, q, path)))
			})
		}
	}
}

func TestFileFailedRollbackPoisonsTheHandleAndReopenHeals(t *testing.T) {
	cases := []struct {
		name  string
		arm   func(f *faultFS)
		cause error // what the failing call's error matches besides ErrPoisoned
		// present says whether the failed call's record survives the
		// reopen: only a record written whole can, and ErrPoisoned said
		// its outcome was unknown.
		present bool
	}{
		{"short write, truncate fails", func(f *faultFS) {
			f.arm(fsWrite, fsFault{keep: 9, err: syscall.EIO})
			f.arm(fsTruncate, fsFault{err: syscall.EROFS})
		}, syscall.EIO, false},
		{"all but the newline, truncate fails", func(f *faultFS) {
			f.arm(fsWrite, fsFault{keep: -1, err: syscall.ENOSPC})
			f.arm(fsTruncate, fsFault{err: syscall.EIO})
		}, syscall.ENOSPC, false},
		{"short write, fsync after truncate fails", func(f *faultFS) {
			f.arm(fsWrite, fsFault{keep: 9})
			f.arm(fsSync, fsFault{err: syscall.EIO})
		}, io.ErrShortWrite, false},
		{"fsync fails, truncate fails", func(f *faultFS) {
			f.arm(fsSync, fsFault{err: syscall.EIO})
			f.arm(fsTruncate, fsFault{err: syscall.EROFS})
		}, syscall.EIO, true},
	}
	for _, c := range cases {
		for _, m := range fileMutations {
			t.Run(c.name+"/"+m.name, func(t *testing.T) {
				q, fsys, path := openFaultFile(t, Options{})
				seedFileQueue(t, q)
				before := fileStateOf(t, q)
				beforePending, err := q.Peek(t.Context(), 0, 100)
				require.NoError(t, err)

				c.arm(fsys)
				err = m.do(t, q)
				require.ErrorIs(t, err, ErrPoisoned)
				require.ErrorIs(t, err, c.cause)
				require.Equal(t, string(before), string(fileStateOf(t, q)), "memory changed by a failed write")

				// Every later write is refused; reads go on.
				_, err = q.Enqueue(t.Context(), []byte("later"), "")
				require.ErrorIs(t, err, ErrPoisoned)
				require.ErrorIs(t, q.MarkDone(t.Context(), 1), ErrPoisoned)
				require.ErrorIs(t, q.Requeue(t.Context(), 5), ErrPoisoned)
				got, err := q.Peek(t.Context(), 0, 100)
				require.NoError(t, err)
				require.Equal(t, beforePending, got)

				after := reopenCleanFile(t, q, path)
				if c.present {
					require.NotEqual(t, string(before), string(after), "the record was written whole, so the reopen holds it")
				} else {
					require.Equal(t, string(before), string(after), "a phantom of the failed call after reopen")
				}
			})
		}
	}
}

// TestFileTornTailAtEveryOffsetHeals cuts the file at every byte of its last
// record, for every kind of record: the open succeeds with the state before
// that record, and the next open finds a clean file.
func TestFileTornTailAtEveryOffsetHeals(t *testing.T) {
	for _, m := range fileMutations {
		t.Run(m.name, func(t *testing.T) {
			q, _, path := openFaultFile(t, Options{})
			seedFileQueue(t, q)
			want := fileStateOf(t, q)
			prefix, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, m.do(t, q))
			require.NoError(t, q.Close())
			full, err := os.ReadFile(path)
			require.NoError(t, err)
			require.True(t, bytes.HasPrefix(full, prefix))
			require.Greater(t, len(full), len(prefix)+1)

			// Syncs are the slow part and no part of what is tested here.
			fsys := noSyncFS{osFS{}}
			cut := filepath.Join(t.TempDir(), "cut")
			for n := len(prefix); n < len(full); n++ {
				require.NoError(t, os.WriteFile(cut, full[:n], 0o600))
				r, err := OpenFile(cut, FileOptions{FS: fsys})
				require.NoError(t, err, "cut at byte %d of %d", n, len(full))
				require.Equal(t, string(want), string(fileStateOf(t, r)), "cut at byte %d of %d", n, len(full))
				require.NoError(t, r.Close())
				requireCleanFile(t, cut, want)
			}
		})
	}
}

// noSyncFS skips every fsync.
type noSyncFS struct{ FS }

func (n noSyncFS) OpenFile(name string, flag int, perm fs.FileMode) (FSFile, error) {
	f, err := n.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

func (noSyncFS) SyncDir(string) error { return nil }

type noSyncFile struct{ FSFile }

func (noSyncFile) Sync() error { return nil }

// TestFileFailedOpenLeavesTheFileByteIdentical fails each step of reading
// and compacting a file whose compaction would change it (a torn tail, done
// items): the open returns the error and the file is exactly as it was.
func TestFileFailedOpenLeavesTheFileByteIdentical(t *testing.T) {
	steps := []struct {
		name   string
		arm    func(f *faultFS)
		target error
	}{
		{"open for reading", func(f *faultFS) { f.arm(fsOpen, fsFault{err: syscall.EACCES}) }, syscall.EACCES},
		{"read", func(f *faultFS) { f.arm(fsRead, fsFault{err: syscall.EIO}) }, syscall.EIO},
		{"create temp file", func(f *faultFS) {
			f.arm(fsOpen, fsFault{err: nil})
			f.arm(fsOpen, fsFault{err: syscall.EROFS})
		}, syscall.EROFS},
		{"temp write ENOSPC", func(f *faultFS) { f.arm(fsWrite, fsFault{err: syscall.ENOSPC}) }, syscall.ENOSPC},
		{"temp short write", func(f *faultFS) { f.arm(fsWrite, fsFault{keep: 20}) }, io.ErrShortWrite},
		{"temp fsync", func(f *faultFS) { f.arm(fsSync, fsFault{err: syscall.EIO}) }, syscall.EIO},
		{"directory fsync", func(f *faultFS) { f.arm(fsSyncDir, fsFault{err: syscall.EIO}) }, syscall.EIO},
		{"rename", func(f *faultFS) { f.arm(fsRename, fsFault{err: syscall.EXDEV}) }, syscall.EXDEV},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			path, want := fileNeedingCompaction(t)
			before, err := os.ReadFile(path)
			require.NoError(t, err)

			fsys := newFaultFS()
			s.arm(fsys)
			q, err := OpenFile(path, FileOptions{FS: fsys})
			require.ErrorIs(t, err, s.target)
			require.Nil(t, q)
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, before, after, "a failed open changed the file")
			require.NoFileExists(t, path+".compact")

			// The lock was released and nothing was lost.
			q, err = OpenFile(path, FileOptions{})
			require.NoError(t, err)
			require.Equal(t, string(want), string(fileStateOf(t, q)))
			require.NoError(t, q.Close())
		})
	}
}

// fileNeedingCompaction writes a queue file with done items and a torn tail
// and returns its path and the state it holds.
func fileNeedingCompaction(t *testing.T) (string, []byte) {
	t.Helper()
	q, _, path := openFaultFile(t, Options{})
	seedFileQueue(t, q)
	require.NoError(t, q.MarkDone(t.Context(), 2))
	want := fileStateOf(t, q)
	require.NoError(t, q.Close())
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"op":"done","ids":[1,`)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return path, want
}

// TestFileDirectorySyncFailingAfterTheRenameFailsTheOpen covers the one step
// after which the file cannot be byte-identical any more: the compacted file
// is in place but its directory entry is not known to be durable. The open
// fails, and what the file holds is the same state.
func TestFileDirectorySyncFailingAfterTheRenameFailsTheOpen(t *testing.T) {
	path, want := fileNeedingCompaction(t)
	fsys := newFaultFS()
	fsys.arm(fsSyncDir, fsFault{})
	fsys.arm(fsSyncDir, fsFault{err: syscall.EIO})
	q, err := OpenFile(path, FileOptions{FS: fsys})
	require.ErrorIs(t, err, syscall.EIO)
	require.Nil(t, q)
	require.Equal(t, 2, fsys.count(fsSyncDir))
	requireCleanFile(t, path, want)
}

// startFileEnqueue runs Enqueue in a goroutine and returns where its result arrives.
func startFileEnqueue(t *testing.T, q *File, payload, key string) <-chan fileEnqueueResult {
	t.Helper()
	ch := make(chan fileEnqueueResult, 1)
	go func() {
		id, err := q.Enqueue(t.Context(), []byte(payload), key)
		ch <- fileEnqueueResult{id, err}
	}()
	return ch
}

type fileEnqueueResult struct {
	id  ID
	err error
}

// fileBatchAfterInFlightWrite starts one Enqueue, holds its fsync, starts the
// followers, and waits until all of them have joined the next batch. It
// returns the leader's result channel, the followers' and the release.
func fileBatchAfterInFlightWrite(t *testing.T, q *File, fsys *faultFS, keys []string) (<-chan fileEnqueueResult, []<-chan fileEnqueueResult, func()) {
	t.Helper()
	entered, release := fsys.holdNextSync()
	t.Cleanup(release)
	first := startFileEnqueue(t, q, "first", "")
	<-entered
	var followers []<-chan fileEnqueueResult
	for i, key := range keys {
		followers = append(followers, startFileEnqueue(t, q, fmt.Sprintf("follower %d", i), key))
	}
	require.Eventually(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.batch != nil && len(q.batch.reqs) == len(keys)
	}, fileWait, filePoll, "followers never joined the next batch")
	return first, followers, release
}

func TestFileGroupCommitSharesOneWriteAndOneFsync(t *testing.T) {
	const capacity = 5
	q, fsys, path := openFaultFile(t, Options{MaxDepth: capacity})
	keys := []string{"a", "a", "b", "c", "d", "e", "f", "", ""}
	first, followers, release := fileBatchAfterInFlightWrite(t, q, fsys, keys)
	writes, syncs := fsys.count(fsWrite), fsys.count(fsSync)
	release()

	lead := <-first
	require.NoError(t, lead.err)
	accepted := map[ID]bool{lead.id: true}
	byKey := map[string][]fileEnqueueResult{}
	for i, ch := range followers {
		r := <-ch
		byKey[keys[i]] = append(byKey[keys[i]], r)
		if r.err == nil {
			accepted[r.id] = true
			continue
		}
		full, ok := errors.AsType[*FullError](r.err)
		require.True(t, ok, "follower %d: %v", i, r.err)
		require.Equal(t, FullError{Depth: capacity, Capacity: capacity}, *full)
	}
	require.Len(t, accepted, capacity, "depth is exact within a batch")
	require.Equal(t, byKey["a"][0], byKey["a"][1], "one key in one batch is one item")
	require.Equal(t, writes+1, fsys.count(fsWrite), "the batch took one write")
	require.Equal(t, syncs+1, fsys.count(fsSync), "the batch took one fsync")
	require.Equal(t, string(fileStateOf(t, q)), string(reopenCleanFile(t, q, path)))
}

func TestFileGroupCommitFailureFailsTheWholeBatch(t *testing.T) {
	q, fsys, path := openFaultFile(t, Options{})
	keys := []string{"a", "b", "", "a"}
	first, followers, release := fileBatchAfterInFlightWrite(t, q, fsys, keys)
	fsys.arm(fsWrite, fsFault{keep: 30, err: syscall.ENOSPC})
	release()

	require.NoError(t, (<-first).err)
	for i, ch := range followers {
		r := <-ch
		require.ErrorIs(t, r.err, syscall.ENOSPC, "follower %d", i)
		require.Zero(t, r.id)
	}
	n, err := q.Len(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, n, "a failed batch left items in memory")
	id, err := q.Enqueue(t.Context(), []byte("after"), "a")
	require.NoError(t, err)
	require.Equal(t, ID(2), id)
	require.Equal(t, string(fileStateOf(t, q)), string(reopenCleanFile(t, q, path)))
}

func TestFileCloseDuringGroupCommitFailsTheWaitingBatch(t *testing.T) {
	q, fsys, path := openFaultFile(t, Options{})
	first, followers, release := fileBatchAfterInFlightWrite(t, q, fsys, []string{"", "k"})
	closed := make(chan error, 1)
	go func() { closed <- q.Close() }()
	require.Eventually(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.closed
	}, fileWait, filePoll)
	release()

	require.NoError(t, (<-first).err, "the write in flight completes")
	for _, ch := range followers {
		require.ErrorIs(t, (<-ch).err, ErrClosed)
	}
	require.NoError(t, <-closed)
	r, err := OpenFile(path, FileOptions{})
	require.NoError(t, err)
	defer r.Close()
	n, err := r.Len(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// Bounds of require.Eventually: generous, since the race detector and a
// shared machine slow goroutines down; polling ends as soon as it holds.
const (
	fileWait = 10 * time.Second
	filePoll = time.Millisecond
)
