package soak_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/race"
	"github.com/syncd-dev/syncd/soak"
	"github.com/syncd-dev/syncd/soak/checker"
)

// buildDir holds the syncd binary the package's tests share.
var buildDir string

func TestMain(m *testing.M) {
	if code, isChild := soak.Child(); isChild {
		os.Exit(code)
	}
	dir, err := os.MkdirTemp("", "soak-syncd-")
	if err != nil {
		panic(err)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	syncdBin  string
	buildErr  error
)

// syncdBinary builds ./cmd/syncd once per test binary (with -race when
// the tests run with it), through the same path a run without --syncd
// takes.
func syncdBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		syncdBin, buildErr = soak.BuildSyncd(ctx, buildDir, race.Enabled)
	})
	require.NoError(t, buildErr)
	return syncdBin
}

// run runs a soak for a test: its directory is the test's, the syncd
// binary the shared one, and the whole run is bounded. On failure the
// report is logged, since the directory goes with the test.
func run(t *testing.T, cfg soak.Config) *soak.Result {
	t.Helper()
	cfg.Dir = t.TempDir()
	cfg.SyncdBinary = syncdBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+cfg.QuiesceTimeout+3*time.Minute)
	defer cancel()
	res, err := soak.Run(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			logReport(t, res)
		}
	})
	return res
}

func logReport(t *testing.T, res *soak.Result) {
	t.Helper()
	md, err := os.ReadFile(res.ReportPath)
	if err != nil {
		t.Logf("no report: %v", err)
		return
	}
	t.Logf("report %s:\n%s", res.ReportPath, md)
	events, err := os.ReadFile(filepath.Join(res.Dir, "events.log"))
	if err == nil {
		lines := strings.Split(string(events), "\n")
		t.Logf("events.log, last lines:\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}

// evidence joins a verdict's evidence for assertion messages.
func evidence(v checker.Verdict) string { return strings.Join(v.Evidence, "\n") }
