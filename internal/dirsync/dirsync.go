// Package dirsync makes a directory's entries durable: the one directory
// fsync of the project, used after a file is created, renamed or removed
// in a directory (SQLite files, the NDJSON queue's compaction, a device's
// replica import, a cluster snapshot). It is a leaf: it imports nothing of
// the project, so both sides and every internal leaf may use it.
package dirsync

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Sync fsyncs dir, making the creates, renames and removals in it durable.
// A file system that cannot sync a directory at all (the sync fails with
// EINVAL, ENOTSUP or errors.ErrUnsupported) is not an error: there is
// nothing more to make durable. Every other failure is, wrapped with the
// step that failed: opening the directory, syncing it, or closing it.
func Sync(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory for sync: %w", err)
	}
	err = d.Sync()
	if unsupported(err) {
		err = nil
	}
	if err != nil {
		d.Close()
		return fmt.Errorf("sync directory: %w", err)
	}
	if err := d.Close(); err != nil {
		return fmt.Errorf("close directory after sync: %w", err)
	}
	return nil
}

// unsupported reports whether err is how the OS says a directory cannot be
// synced on this file system.
func unsupported(err error) bool {
	return errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) || errors.Is(err, errors.ErrUnsupported)
}
