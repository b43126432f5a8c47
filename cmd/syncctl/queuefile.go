package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

// queueFormat is how a device's queue file is stored.
type queueFormat string

const (
	formatNDJSON queueFormat = "ndjson"
	formatSQLite queueFormat = "sqlite"
)

// sqliteMagic starts every SQLite database file.
const sqliteMagic = "SQLite format 3\x00"

// ndjsonHeaderLimit bounds how much of a file is read to find the NDJSON
// queue's header line.
const ndjsonHeaderLimit = 4096

// detectQueue says whether path holds an NDJSON queue or a SQLite database,
// from its first bytes, without changing anything. A missing file is a
// not-found error; anything else that is not a queue is a bad-file error.
func detectQueue(path string) (queueFormat, error) {
	// Before anything opens it: a FIFO would block the open, and a link
	// would have requeue replace the link with a regular file.
	if err := offlinequeue.CheckPath(path); err != nil {
		if errors.Is(err, offlinequeue.ErrNotRegularFile) {
			return "", failf(exitBadFile, "%v", err)
		}
		return "", failf(exitFailure, "check queue file: %v", err)
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", failf(exitNotFound, "queue file %s does not exist", path)
	}
	if err != nil {
		return "", failf(exitFailure, "open queue file: %v", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return "", failf(exitBadFile, "%s is a directory, not a queue file", path)
	}
	head, err := bufio.NewReaderSize(f, ndjsonHeaderLimit).Peek(ndjsonHeaderLimit)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", failf(exitFailure, "read queue file %s: %v", path, err)
	}
	if bytes.HasPrefix(head, []byte(sqliteMagic)) {
		return formatSQLite, nil
	}
	line, _, _ := bytes.Cut(head, []byte{'\n'})
	var header struct {
		Op     string `json:"op"`
		Format string `json:"format"`
	}
	if json.Unmarshal(line, &header) == nil && header.Op == "header" && header.Format == "syncd-offlinequeue" {
		return formatNDJSON, nil
	}
	return "", failf(exitBadFile, "%s is not a syncd queue: neither an NDJSON queue file (first line {\"op\":\"header\",\"format\":\"syncd-offlinequeue\",...}) nor a SQLite database", path)
}

// deviceQueue is a device's queue opened by syncctl. Close it.
type deviceQueue struct {
	offlinequeue.Queue
	path   string
	format queueFormat
	// scratch is the private copy's directory, removed by Close.
	scratch string
}

// Close closes the queue and removes a private copy.
func (q *deviceQueue) Close() error {
	err := q.Queue.Close()
	if q.scratch != "" {
		err = errors.Join(err, os.RemoveAll(q.scratch))
	}
	return err
}

// openQueue opens the device queue at path for syncctl, without a running
// client, and never creates one.
//
// An NDJSON queue opened for reading is a private copy: the original is not
// compacted, not locked and not changed in any way, and a client may keep
// running. Opened for writing, the copy is loaded first, so a corrupt file
// is refused before anything is touched; then the original is opened (which
// takes its lock, refused while a client holds it, and compacts it).
//
// A SQLite queue is opened in place either way. Opening refuses a database
// that is not a queue without changing it. SQLite queues have no lock: stop
// the app before requeue or purge.
func (a *app) openQueue(path string, writable bool) (*deviceQueue, error) {
	format, err := detectQueue(path)
	if err != nil {
		return nil, err
	}
	opts := offlinequeue.Options{Now: a.now}
	if format == formatSQLite {
		q, err := offlinequeue.OpenSQLite(path, offlinequeue.SQLiteOptions{Options: opts})
		if err != nil {
			return nil, failf(exitBadFile, "%s is a SQLite database but not a usable syncd queue: %v", path, unwrapAll(err))
		}
		return &deviceQueue{Queue: q, path: path, format: format}, nil
	}
	scratch, err := os.MkdirTemp("", "syncctl-queue-")
	if err != nil {
		return nil, failf(exitFailure, "make a scratch directory: %v", err)
	}
	snapshot, err := copyFile(path, filepath.Join(scratch, filepath.Base(path)))
	var q *offlinequeue.File
	if err == nil {
		q, err = offlinequeue.OpenFile(snapshot, offlinequeue.FileOptions{Options: opts})
	}
	if err != nil {
		os.RemoveAll(scratch)
		return nil, ndjsonError(path, snapshot, err)
	}
	if !writable {
		return &deviceQueue{Queue: q, path: path, format: format, scratch: scratch}, nil
	}
	err = errors.Join(q.Close(), os.RemoveAll(scratch))
	var orig *offlinequeue.File
	if err == nil {
		orig, err = offlinequeue.OpenFile(path, offlinequeue.FileOptions{Options: opts})
	}
	if err != nil {
		return nil, ndjsonError(path, path, err)
	}
	return &deviceQueue{Queue: orig, path: path, format: format}, nil
}

// ndjsonError turns a failure to open an NDJSON queue (at opened, maybe a
// private copy of path) into a one-line error about path.
func ndjsonError(path, opened string, err error) error {
	if ce, ok := errors.AsType[*offlinequeue.CorruptError](err); ok {
		return failf(exitBadFile, "%s is a corrupt queue file: line %d: %v (the file was not changed; restore it or inspect that line)", path, ce.Line, ce.Err)
	}
	switch {
	case errors.Is(err, offlinequeue.ErrUnsupportedVersion):
		return failf(exitBadFile, "%s was written by a newer queue format than this syncctl reads: use a newer syncctl", path)
	case errors.Is(err, offlinequeue.ErrLocked):
		return failf(exitBadFile, "%s is in use: a running client holds its lock; stop it before changing the queue", path)
	}
	msg := strings.ReplaceAll(err.Error(), opened, path)
	return failf(exitFailure, "open queue %s: %s", path, msg)
}

// unwrapAll strips the "open ... path:" prefixes that wrapping added, down
// to the innermost error that says what is wrong.
func unwrapAll(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// copyFile copies src to dst (a new file) and returns dst.
func copyFile(src, dst string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return dst, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return dst, err
	}
	_, err = io.Copy(out, in)
	return dst, errors.Join(err, out.Close())
}

// fileSize returns path's size, or -1 when it cannot be read.
func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return st.Size()
}
