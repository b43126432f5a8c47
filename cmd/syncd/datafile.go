package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// dataCheckInterval is how often syncd checks that its database file is
// still the one it opened.
const dataCheckInterval = 2 * time.Second

// errDataReplaced: the database file syncd serves was removed, moved away
// or replaced while it ran. syncd keeps writing to the file it opened, which
// is no longer at --data: whatever it acknowledged from then on would be
// lost at its next start. It stops instead, loudly.
var errDataReplaced = errors.New("database file replaced or removed while syncd runs")

// fileID identifies a file (device and inode), whatever its name.
type fileID struct{ dev, ino uint64 }

func idOf(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, fmt.Errorf("%s: no inode to check", path)
	}
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}, nil
}

// watchDataFile returns errDataReplaced (wrapped, naming what changed) once
// the file at path is no longer the one it was when watching began, or nil
// when ctx ends first.
func watchDataFile(ctx context.Context, path string, every time.Duration) error {
	opened, err := idOf(path)
	if err != nil {
		return fmt.Errorf("%w: %v", errDataReplaced, err)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		now, err := idOf(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("%w: %s is gone (moved or removed); put it back or restore with syncctl restore, then start syncd again", errDataReplaced, path)
		case err != nil:
			return fmt.Errorf("%w: %v", errDataReplaced, err)
		case now != opened:
			return fmt.Errorf("%w: %s is another file than the one syncd opened (replaced, or restored by hand while syncd ran); start syncd again to serve it", errDataReplaced, path)
		}
	}
}
