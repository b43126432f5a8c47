package offlinequeue

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/syncd-dev/syncd/internal/dirsync"
)

// FS is everything the file queue does to the file system. It exists so tests
// (and soak harnesses) can inject short writes, ENOSPC, failed fsyncs and
// failed renames by wrapping OSFS; a normal caller leaves FileOptions.FS nil.
//
// A wrapper must keep each method's meaning: an error means the operation did
// not complete, and a nil error from Sync or SyncDir means the data or the
// directory entry is durable.
type FS interface {
	// OpenFile opens name like os.OpenFile.
	OpenFile(name string, flag int, perm fs.FileMode) (FSFile, error)
	// Rename atomically replaces newpath with oldpath, like os.Rename.
	Rename(oldpath, newpath string) error
	// Remove deletes name, like os.Remove.
	Remove(name string) error
	// SyncDir makes the directory entries of dir (creations, renames)
	// durable. A file system that cannot sync a directory at all reports
	// nil; only a genuine I/O failure is an error.
	SyncDir(dir string) error
	// Lock takes an exclusive advisory lock on name, creating the file if
	// needed, without waiting. A lock held by another handle, in this
	// process or another one, is an error matching ErrLocked. Closing the
	// returned Closer releases the lock; so does the holder's death.
	Lock(name string) (io.Closer, error)
}

// FSFile is an open file as the file queue uses it: read once from the start
// on open, then written at explicit offsets, synced and truncated.
type FSFile interface {
	io.Reader
	io.WriterAt
	// Sync flushes the file's data to stable storage, like (*os.File).Sync.
	Sync() error
	// Truncate changes the file's size, like (*os.File).Truncate.
	Truncate(size int64) error
	Close() error
}

// ErrLocked says the queue file is already open in another handle, in this
// process or another one. Close that handle first; one path has one owner.
var ErrLocked = errors.New("offlinequeue: queue file is locked by another handle")

// OSFS returns the real file system, the one a nil FileOptions.FS means.
// Wrap it to inject faults.
func OSFS() FS { return osFS{} }

// osFS is FS over the operating system. Locks are flock(2) locks, which the
// kernel drops when the holder exits, so a crashed process never leaves a
// stale lock behind.
type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (FSFile, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (osFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

func (osFS) Remove(name string) error { return os.Remove(name) }

// SyncDir fsyncs dir (dirsync.Sync: a file system that cannot sync a
// directory at all is not a failure of this sync).
func (osFS) SyncDir(dir string) error { return dirsync.Sync(dir) }

func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := flockExclusive(f); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, name)
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	// Closing the descriptor releases the flock.
	return f, nil
}

// flockExclusive takes a non-blocking exclusive flock on f.
func flockExclusive(f *os.File) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var lockErr error
	ctlErr := raw.Control(func(fd uintptr) {
		lockErr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
	})
	if ctlErr != nil {
		return ctlErr
	}
	return lockErr
}
