package auth

import (
	"os"
	"time"
)

// fileWatch notices when a file changed on disk, by modification time and
// size, so the token file and the deny list are re-read only when they
// changed. Its owner serialises calls.
type fileWatch struct {
	path    string
	seen    bool
	modTime time.Time
	size    int64
}

// changed stats the file and reports whether it differs from what was
// last accepted (always true before the first accept). A missing file is
// an error wrapping os.ErrNotExist.
func (w *fileWatch) changed() (os.FileInfo, bool, error) {
	st, err := os.Stat(w.path)
	if err != nil {
		return nil, false, err
	}
	return st, !w.seen || !st.ModTime().Equal(w.modTime) || st.Size() != w.size, nil
}

// accept records st as the version now in force.
func (w *fileWatch) accept(st os.FileInfo) {
	w.seen, w.modTime, w.size = true, st.ModTime(), st.Size()
}
