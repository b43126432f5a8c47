package datalock_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/datalock"
)

func TestOneHolderAtATime(t *testing.T) {
	data := filepath.Join(t.TempDir(), "syncd.db")
	require.NoError(t, datalock.Check(data), "no lock file: nobody holds it")

	l, err := datalock.Acquire(data)
	require.NoError(t, err)
	fi, err := os.Stat(datalock.Path(data))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	body, err := os.ReadFile(datalock.Path(data))
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(os.Getpid())+"\n", string(body))

	// flock locks belong to open file descriptions: a second Acquire in
	// this process is refused as another process's would be.
	_, err = datalock.Acquire(data)
	var held *datalock.ErrHeld
	require.ErrorAs(t, err, &held)
	require.Equal(t, os.Getpid(), held.PID)
	require.ErrorAs(t, datalock.Check(data), &held)

	require.NoError(t, l.Release())
	require.NoError(t, datalock.Check(data), "a released lock holds nothing; its file stays")
	l, err = datalock.Acquire(data)
	require.NoError(t, err)
	require.NoError(t, l.Release())
}

// A process killed while holding the lock leaves its file, not its lock.
func TestAKilledHolderHoldsNothing(t *testing.T) {
	data := filepath.Join(t.TempDir(), "syncd.db")
	require.NoError(t, os.WriteFile(datalock.Path(data), nil, 0o600))
	// util-linux's flock(1), on every machine this project runs on; the
	// sleep it runs inherits the lock, so the whole group is killed.
	cmd := exec.Command("flock", "--exclusive", datalock.Path(data), "sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	var held *datalock.ErrHeld
	require.Eventually(t, func() bool { return errors.As(datalock.Check(data), &held) }, 10*time.Second, 10*time.Millisecond, "the other process never held the lock")
	require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL))
	cmd.Wait()
	// The kernel releases the lock once the group's last member is gone.
	require.Eventually(t, func() bool { return datalock.Check(data) == nil }, 10*time.Second, 10*time.Millisecond, "the lock outlived its killed holder")
	l, err := datalock.Acquire(data)
	require.NoError(t, err)
	require.NoError(t, l.Release())
}
