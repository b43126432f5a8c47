// Package datalock says which process serves a database file: syncd holds
// an exclusive lock on the file's lock file (PATH.lock, holding its pid for
// people) for as long as it runs, so a second syncd on the same database,
// or `syncctl restore` while syncd runs, is refused instead of corrupting
// what the first one serves. The lock is the operating system's (flock),
// so it is released when the process ends however it ends; a lock file
// left behind by a killed process holds nothing.
package datalock

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ErrHeld says another process holds the lock: PID names it when the lock
// file says (0 when it does not).
type ErrHeld struct {
	Path string
	PID  int
}

func (e *ErrHeld) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("another process holds %s", e.Path)
	}
	return fmt.Sprintf("another process (pid %d) holds %s", e.PID, e.Path)
}

// Path is the lock file of the database at data.
func Path(data string) string { return data + ".lock" }

// Lock is a held lock; Release gives it up.
type Lock struct{ f *os.File }

// Acquire takes the lock of the database at data, creating its lock file
// (mode 0600) when missing, and writes this process's pid into it. It
// fails with *ErrHeld when another process holds it.
func Acquire(data string) (*Lock, error) {
	path := Path(data)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		held := &ErrHeld{Path: path, PID: readPID(f)}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, held
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := writePID(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Check reports, without taking it for longer than the check, whether a
// process holds the lock of the database at data: nil when none does (or
// no lock file exists), *ErrHeld when one does.
func Check(data string) error {
	path := Path(data)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return &ErrHeld{Path: path, PID: readPID(f)}
		}
		return fmt.Errorf("lock %s: %w", path, err)
	}
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

// Release gives the lock up and removes the lock file's pid. It is safe to
// call once; the lock is released at exit in any case.
func (l *Lock) Release() error {
	l.f.Truncate(0)
	return l.f.Close()
}

func writePID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}

func readPID(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	return pid
}
