package offlinequeue

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrNotRegularFile: a queue path names something other than a regular
// file (a directory, a FIFO, a device, a socket, or a symlink whose target
// is missing or not a regular file). Nothing was opened or created.
var ErrNotRegularFile = errors.New("offlinequeue: queue path is not a regular file")

// resolvePath returns the file a queue at path is opened from: path
// itself, or the regular file a symlink at path leads to. A path that
// does not exist yet is returned as is (the queue creates a regular file
// there); anything but a regular file is refused with ErrNotRegularFile
// before it is opened, since opening a FIFO blocks and a device is not a
// queue.
func resolvePath(path string) (string, error) {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return path, nil
	}
	if err != nil {
		return "", err
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		target, err := filepath.EvalSymlinks(path)
		if err != nil {
			return "", fmt.Errorf("%w: %s is a symlink that does not resolve (%v)", ErrNotRegularFile, path, err)
		}
		if st, err = os.Stat(target); err != nil {
			return "", err
		}
		path = target
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s is a %s", ErrNotRegularFile, path, describeMode(st.Mode()))
	}
	return path, nil
}

func describeMode(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeSocket != 0:
		return "socket"
	}
	return "special file (" + m.Type().String() + ")"
}
