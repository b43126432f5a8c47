package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/syncdtest"
)

// getStatus GETs url and returns its status code and body's "status".
func getStatus(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body struct{ Status string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return resp.StatusCode, body.Status
}

// TestBootProbeAnswersStartingUntilClosed: while syncd boots, its public
// address answers /startupz (and everything else) 503 "starting"; close
// hands the resolved address over.
func TestBootProbeAnswersStartingUntilClosed(t *testing.T) {
	p, err := startBootProbe("127.0.0.1:0", "", "")
	require.NoError(t, err)
	for _, path := range []string{"/startupz", "/readyz", "/v1/sync"} {
		code, status := getStatus(t, "http://"+p.addr+path)
		require.Equal(t, http.StatusServiceUnavailable, code, path)
		require.Equal(t, "starting", status, path)
	}
	addr := p.close()
	require.Equal(t, p.addr, addr)
	_, err = http.Get("http://" + addr + "/startupz")
	require.Error(t, err, "the probe no longer holds the address")
}

// TestStartupzIsServingOnceBooted: once run has booted, /startupz answers
// 200 "serving" on both listeners.
func TestStartupzIsServingOnceBooted(t *testing.T) {
	dir := t.TempDir()
	admin := syncdtest.FreeAddr(t)
	addr, stop := startRun(t, []string{"--listen", "127.0.0.1:0", "--admin-listen", admin, "--data", filepath.Join(dir, "syncd.db"),
		"--tokens", filepath.Join(dir, "tokens.json"), "--dev-tokens"}, &syncdtest.Buffer{})
	for _, base := range []string{"http://" + addr, "http://" + admin} {
		code, status := getStatus(t, base+"/startupz")
		require.Equal(t, http.StatusOK, code, base)
		require.Equal(t, "serving", status, base)
	}
	stop()
}

// TestBootOverItsBudgetExitsNonZero: a boot that takes longer than
// --startup-timeout fails run (syncd exits 1) with the budget named.
func TestBootOverItsBudgetExitsNonZero(t *testing.T) {
	dir := t.TempDir()
	err := run(t.Context(), []string{"--listen", "127.0.0.1:0", "--admin-listen", "", "--data", filepath.Join(dir, "syncd.db"),
		"--tokens", filepath.Join(dir, "tokens.json"), "--dev-tokens", "--startup-timeout", "1ns"}, func(string) string { return "" }, io.Discard)
	require.ErrorContains(t, err, "boot took longer than its budget (--startup-timeout 1ns)")
}

func TestBootBudgetDefaults(t *testing.T) {
	var o options
	require.Equal(t, "1m0s", bootBudget(o).String())
	o.cluster.enabled, o.cluster.startTimeout = true, 2*60e9
	require.Equal(t, "3m0s", bootBudget(o).String(), "a cluster's quorum wait is added")
	o.startupTimeout = 10e9
	require.Equal(t, "10s", bootBudget(o).String(), "the flag wins")
}
