package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
)

func TestFlagsFallBackToEnvironment(t *testing.T) {
	env := map[string]string{"SYNCD_LISTEN": "127.0.0.1:9999", "SYNCD_LOG_FORMAT": "json", "SYNCD_DATA": "/env/db"}
	o, err := parseFlags([]string{"--data", "/flag/db"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9999", o.listen, "env fills an unset flag")
	require.Equal(t, "json", o.logFormat)
	require.Equal(t, "/flag/db", o.data, "a flag on the command line wins over the environment")
}

func TestFlagsRejectBadInput(t *testing.T) {
	noEnv := func(string) string { return "" }
	for _, args := range [][]string{{"--log-format", "xml"}, {"--nope"}, {"stray"}, {"--log-level", "loud"}} {
		_, err := parseFlags(args, noEnv, io.Discard)
		require.Error(t, err, "args %q", args)
	}
	_, err := parseFlags(nil, func(k string) string {
		if k == "SYNCD_SHUTDOWN_TIMEOUT" {
			return "soon"
		}
		return ""
	}, io.Discard)
	require.ErrorContains(t, err, "SYNCD_SHUTDOWN_TIMEOUT")
}

// syncWriter lets the test read the log while syncd writes it.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func TestRunServesHealthAndStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncWriter{}
	data := filepath.Join(t.TempDir(), "nested", "syncd.db")
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--data", data, "--tokens", filepath.Join(t.TempDir(), "tokens.json")}, func(string) string { return "" }, logs)
	}()

	addrRE := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`)
	var addr string
	require.Eventually(t, func() bool {
		m := addrRE.FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, 30*time.Second, 10*time.Millisecond, "syncd never logged its address: %s", logs)

	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200} {
		resp, err := http.Get("http://" + addr + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, path)
	}
	require.FileExists(t, data, "the database is created with its directory")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("syncd did not stop after cancellation")
	}
	require.Contains(t, logs.String(), "syncd stopped")
}

func TestDefaultPolicyFlag(t *testing.T) {
	noEnv := func(string) string { return "" }
	o, err := parseFlags([]string{"--model", "notes=lww", "--default-policy", "none"}, noEnv, io.Discard)
	require.NoError(t, err)
	require.Equal(t, replication.PolicyNone, o.models.For("todos"))
	require.Equal(t, replication.PolicyLWW, o.models.For("notes"))
	for _, bad := range []string{"crdt", ""} {
		_, err := parseFlags([]string{"--default-policy", bad}, noEnv, io.Discard)
		require.Error(t, err, "%q", bad)
	}
}

func TestRetentionFlags(t *testing.T) {
	o, err := parseFlags([]string{"--oplog-max-entries", "10", "--oplog-max-age", "1h", "--ledger-max-age", "48h",
		"--ledger-max-entries", "5000", "--conflicts-max-entries", "-1", "--retention-interval", "5s"}, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, int64(10), o.retention.Oplog.MaxEntries)
	require.Equal(t, time.Hour, o.retention.Oplog.MaxAge)
	require.Equal(t, 48*time.Hour, o.retention.LedgerMaxAge)
	require.Equal(t, 5000, o.retention.LedgerMaxEntries)
	require.Equal(t, int64(-1), o.retention.Conflicts.MaxEntries)
	require.Equal(t, 5*time.Second, o.retentionEvery)
}
