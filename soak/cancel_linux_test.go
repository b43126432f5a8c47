package soak_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/soak"
)

// processesMentioning lists the pids whose command line or environment
// mentions s.
func processesMentioning(t *testing.T, s string) []string {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*")
	require.NoError(t, err)
	var out []string
	for _, p := range procs {
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile(filepath.Join(p, f))
			if err == nil && strings.Contains(string(b), s) {
				out = append(out, filepath.Base(p))
				break
			}
		}
	}
	return out
}

// Cancelling a run stops it, and every process it started is gone when
// Run returns.
func TestRunStopsOnCancel(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := soak.Run(ctx, soak.Config{Duration: 5 * time.Minute, Clients: 2, Seed: seed(t), Dir: dir, SyncdBinary: syncdBinary(t)})
		done <- err
	}()
	require.Eventually(t, func() bool {
		logs, _ := filepath.Glob(filepath.Join(dir, "*", "clients", "c01", "client.log"))
		if len(logs) == 0 {
			return false
		}
		b, _ := os.ReadFile(logs[0])
		return strings.Contains(string(b), "soak client started")
	}, time.Minute, 50*time.Millisecond, "the clients start")
	require.NotEmpty(t, processesMentioning(t, dir), "syncd and the clients run")
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute of its cancellation")
	}
	require.Empty(t, processesMentioning(t, dir), "no process outlives the run")
}
