package offlinequeue

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ErrNotRegularFile matches every *PathError (errors.Is).
var ErrNotRegularFile = errors.New("offlinequeue: not a regular file")

// PathError refuses a queue path, or a file the queue keeps beside it, that
// exists and is not a regular file: a symbolic link, a FIFO, a device, a
// socket or a directory. Nothing was opened, created or changed.
//
// Symbolic links are refused, not resolved: the SQLite queue keeps its
// write-ahead log beside the path it was given, not beside a link's target,
// and the file queue replaces its file by renaming over the path, which
// would replace the link itself. A link in a parent directory is followed
// as usual; only the final component is checked. The check guards against
// mistakes and hostile file names, not against a process that can rename
// files in the queue's directory between the check and the open: such a
// process can rewrite the queue anyway.
type PathError struct {
	Path string
	Mode fs.FileMode // the type bits Lstat reported
}

func (e *PathError) Error() string {
	return fmt.Sprintf("offlinequeue: %s is a %s, not a regular file: refused before opening", e.Path, fileKind(e.Mode))
}

// Is makes every *PathError match ErrNotRegularFile.
func (e *PathError) Is(target error) bool { return target == ErrNotRegularFile }

// fileKind names a file type for PathError.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m.IsDir():
		return "directory"
	}
	return "non-regular file"
}

// FileMode is the permission every queue file is created with: the queue
// holds the user's unsent data, readable by its owner alone.
const FileMode fs.FileMode = 0o600

// CheckPath applies the open rule to path alone: nil if path is absent or a
// regular file, *PathError otherwise. OpenSQLite and OpenFile apply it
// themselves (to their companion files too); a tool that reads a queue file
// before opening it, to detect its format or copy it, calls CheckPath first
// so that it never follows a link or blocks on a FIFO.
func CheckPath(path string) error { return checkRegular(path) }

// checkRegular refuses, with *PathError, any of names that exists and is not
// a regular file. It never follows the final component of a name and never
// opens anything, so a FIFO cannot block it.
func checkRegular(names ...string) error {
	for _, name := range names {
		fi, err := os.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return &PathError{Path: name, Mode: fi.Mode().Type()}
		}
	}
	return nil
}

// restrict sets FileMode on each of names that exists, for the files of a
// SQLite queue that OpenSQLite has just created: SQLite creates files with
// its own default permissions, and gives a write-ahead log created later the
// permissions of the database file. It runs before OpenSQLite returns, so
// no item is ever written into a file others can read; an existing queue's
// permissions are left as its owner set them.
func restrict(names ...string) error {
	for _, name := range names {
		if err := os.Chmod(name, FileMode); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}
