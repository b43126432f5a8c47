// Package atomicfile writes small files atomically and durably: the data
// goes to a temporary file in the same directory, which is fsynced, then
// put in place by rename (Write) or link (Create), then the directory is
// fsynced (internal/dirsync). A reader sees the old file or the new one,
// never a part, and a write that returned survives a power cut. It imports
// only the dirsync leaf of the module.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/syncd-dev/syncd/internal/dirsync"
)

// ErrExists: Create found a file at the path; nothing was changed.
var ErrExists = fmt.Errorf("atomicfile: %w", os.ErrExist)

// Write replaces the file at path with data, mode perm, creating its
// directory with dirPerm when missing.
func Write(path string, data []byte, perm, dirPerm os.FileMode) error {
	return write(path, data, perm, dirPerm, os.Rename)
}

// Create writes data to a new file at path, mode perm, creating its
// directory with dirPerm when missing. It never replaces a file, not even
// one created meanwhile by another writer: then it returns ErrExists.
func Create(path string, data []byte, perm, dirPerm os.FileMode) error {
	if _, err := os.Lstat(path); err == nil {
		return ErrExists
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return write(path, data, perm, dirPerm, func(tmp, path string) error {
		if err := os.Link(tmp, path); err != nil {
			if errors.Is(err, os.ErrExist) {
				return ErrExists
			}
			return err
		}
		return nil
	})
}

func write(path string, data []byte, perm, dirPerm os.FileMode, place func(tmp, path string) error) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := place(tmp.Name(), path); err != nil {
		return err
	}
	return dirsync.Sync(dir)
}
