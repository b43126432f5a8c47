package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// benchClients issues n client tokens in s's token file through syncctl
// token issue --count and writes them to a clients file.
func benchClients(t testing.TB, s *syncdtest.Server, n int) string {
	t.Helper()
	out := newCLI(t, nil).ok("token", "issue", "--tokens", s.TokenPath, "--count", strconv.Itoa(n),
		"--tenant", "bench", "--client-id", "dev", "--read", "*", "--write", "*")
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), n)
	path := filepath.Join(t.TempDir(), "clients.txt")
	require.NoError(t, os.WriteFile(path, []byte(out), 0o600))
	return path
}

func TestBenchRunsBoundedAndCountsEveryDelivery(t *testing.T) {
	s := syncdtest.Start(t, server.Config{})
	clients := benchClients(t, s, 12)
	c := newCLI(t, map[string]string{"SYNCCTL_SYNC_URL": s.URL})

	var rep benchReport
	decodeStrict(t, c.ok("bench", "--clients", clients, "--connections", "12", "--push-share", "0.25", "--read-buffer", "65536",
		"--batch", "5", "--keys", "20", "--preload", "40", "--snapshot-storm", "3",
		"--duration", "500ms", "--drain", "10s", "--json"), &rep)

	require.Equal(t, 12, rep.Connections.Requested)
	require.Equal(t, 12, rep.Connections.Open, "errors: %v", rep.Errors)
	require.Equal(t, 12, rep.Connections.Subscribers)
	require.Equal(t, 3, rep.Connections.Pushers)
	require.Equal(t, int64(12), rep.Connections.Connect.Count)
	require.Positive(t, rep.Pushes)
	require.Equal(t, rep.Pushes, rep.Ack.Count)
	require.Equal(t, rep.Pushes*5, rep.Statuses["applied"]+rep.Statuses["superseded"], "every mutation answered: %v", rep.Statuses)
	require.Equal(t, rep.Statuses["applied"], rep.Mutations)
	require.Equal(t, rep.Mutations, rep.Delivery.Writes)
	require.Equal(t, rep.Mutations*12, rep.Delivery.Delivered, "every acknowledged write reached every subscriber")
	require.Zero(t, rep.Delivery.Missing)
	require.Equal(t, rep.Delivery.Delivered, rep.Delivery.Count)
	require.Equal(t, int64(3), rep.Snapshots.Fetched)
	require.Equal(t, int64(3), rep.Snapshots.Complete)
	require.GreaterOrEqual(t, rep.Snapshots.Records, int64(3*40), "each snapshot holds the preloaded records")
	require.Empty(t, rep.Errors)
	require.Len(t, rep.Servers, 1)
	require.Equal(t, s.URL, rep.Servers[0].URL)
	require.LessOrEqual(t, rep.Ack.P50, rep.Ack.P99)
	require.LessOrEqual(t, rep.Ack.P99, rep.Ack.Max)

	out := c.ok("bench", "--clients", clients, "--connections", "4", "--duration", "200ms", "--push-share", "0.5", "--drain", "10s")
	// The table's shape; the counts are asserted strictly on the JSON run
	// above.
	for _, want := range []string{"connections  4 requested, 4 open", "2 pushing", "throughput", "errors       no errors",
		"LATENCY (ms)", "push ack", "feed delivery", "snapshot", "SERVER", s.URL} {
		require.Contains(t, out, want)
	}
}

func TestBenchRefusesBadInputAndLeavesNothingRunning(t *testing.T) {
	s := syncdtest.Start(t, server.Config{})
	clients := benchClients(t, s, 3)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.txt")
	require.NoError(t, os.WriteFile(garbage, []byte("not a clients file\n"), 0o600))
	refused := filepath.Join(dir, "refused.txt")
	require.NoError(t, os.WriteFile(refused, []byte("dev-1 sdk_000000000000_notasecret\n"), 0o600))
	notSyncd := httptest.NewServer(http.NotFoundHandler())
	defer notSyncd.Close()

	c := newCLI(t, nil)
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no clients file", []string{"--url", s.URL}, exitUsage, "--clients is required"},
		{"zero connections", []string{"--url", s.URL, "--clients", clients, "--connections", "0"}, exitUsage, "--connections 0 outside 1..50000"},
		{"absurd connections", []string{"--url", s.URL, "--clients", clients, "--connections", "1000000"}, exitUsage, "--connections 1000000 outside"},
		{"more connections than clients", []string{"--url", s.URL, "--clients", clients, "--connections", "4"}, exitUsage, "holds only 3 clients"},
		{"zero duration", []string{"--url", s.URL, "--clients", clients, "--duration", "0s"}, exitUsage, "--duration 0s outside"},
		{"batch too large", []string{"--url", s.URL, "--clients", clients, "--batch", "501"}, exitUsage, "--batch 501 outside 1..500"},
		{"bad share", []string{"--url", s.URL, "--clients", clients, "--push-share", "1.5"}, exitUsage, "--push-share 1.5 outside 0..1"},
		{"read buffer too small", []string{"--url", s.URL, "--clients", clients, "--read-buffer", "100"}, exitUsage, "--read-buffer 100 outside"},
		{"bad url", []string{"--url", "ftp://x", "--clients", clients}, exitUsage, "want syncd's public base URL"},
		{"missing clients file", []string{"--url", s.URL, "--clients", filepath.Join(dir, "none")}, exitNotFound, "--clients"},
		{"not a clients file", []string{"--url", s.URL, "--clients", garbage, "--connections", "1"}, exitBadFile, "line 1: want \"CLIENT_ID TOKEN\""},
		{"refused token", []string{"--url", s.URL, "--clients", refused, "--connections", "1"}, exitUnauthorized, "refused the client token"},
		{"not syncd", []string{"--url", notSyncd.URL, "--clients", clients, "--connections", "1"}, exitFailure, "refused the connection: 404"},
		{"unreachable", []string{"--url", "http://" + syncdtest.FreeAddr(t), "--clients", clients, "--connections", "1", "--connect-timeout", "2s"}, exitUnreachable, "unreachable"},
		{"unwritable cpu profile", []string{"--url", s.URL, "--clients", clients, "--connections", "1", "--cpuprofile", filepath.Join(dir, "none", "cpu.pprof")}, exitUsage, "--cpuprofile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.run(append([]string{"bench"}, tc.args...)...)
			require.Equal(t, tc.code, r.code, "stderr: %s", r.stderr)
			require.Contains(t, r.stderr, tc.msg)
			require.Empty(t, r.stdout)
			require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line of error: %q", r.stderr)
		})
	}
	// Nothing of the bench is left: no goroutine runs its code. (Idle
	// keep-alive connections of the shared HTTP client may remain.)
	require.Eventually(t, func() bool { return !strings.Contains(stacks(), "syncctl.(*bench") }, syncdtest.Timeout, 10*time.Millisecond,
		"bench left goroutines running:\n%s", stacks())
}

// --cpuprofile writes the generator's own CPU profile over the run, in
// the format go tool pprof reads (gzipped protocol buffers).
func TestBenchWritesTheGeneratorsCPUProfile(t *testing.T) {
	s := syncdtest.Start(t, server.Config{})
	clients := benchClients(t, s, 2)
	path := filepath.Join(t.TempDir(), "bench.pprof")
	newCLI(t, map[string]string{"SYNCCTL_SYNC_URL": s.URL}).ok("bench", "--clients", clients, "--connections", "2",
		"--push-share", "0.5", "--duration", "300ms", "--drain", "10s", "--cpuprofile", path)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	z, err := gzip.NewReader(f)
	require.NoError(t, err, "a gzipped profile")
	body, err := io.ReadAll(z)
	require.NoError(t, err)
	require.NotEmpty(t, body)
}

// stacks returns every goroutine's stack.
func stacks() string {
	b := make([]byte, 1<<20)
	return string(b[:runtime.Stack(b, true)])
}

// A snapshot the server refuses busy (503 with Retry-After) is fetched
// again after Retry-After, as a device does, and the retries are counted.
// A proxy in front of a real syncd refuses each token's first snapshot.
func TestBenchRetriesASnapshotRefusedBusy(t *testing.T) {
	s := syncdtest.Start(t, server.Config{})
	clients := benchClients(t, s, 3)
	front := spoilFirstSnapshots(t, s, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, `{"type":"error","code":"server_busy","message":"busy"}`, http.StatusServiceUnavailable)
	})

	var rep benchReport
	decodeStrict(t, newCLI(t, nil).ok("bench", "--url", front, "--clients", clients, "--connections", "3",
		"--push-share", "0", "--preload", "20", "--snapshot-storm", "3", "--duration", "200ms", "--drain", "20s", "--json"), &rep)
	require.Equal(t, int64(3), rep.Snapshots.Retries, "each token's first snapshot was refused once")
	require.Equal(t, int64(3), rep.Snapshots.Fetched)
	require.Equal(t, int64(3), rep.Snapshots.Complete)
	require.GreaterOrEqual(t, rep.Snapshots.Records, int64(3*20))
	require.Empty(t, rep.Errors)
}

// A preload faster than the token's mutation quota is refused
// rate_limited; the refused pushes are sent again after the wait the
// server asked for, and every preloaded record is written: each snapshot
// carries all of them.
func TestBenchPreloadSendsRefusedPushesAgain(t *testing.T) {
	// The burst holds one push of 500; the preload sends its first pushes
	// back to back, so the second is refused whatever the machine's speed.
	s := syncdtest.Start(t, server.Config{Quotas: server.Quotas{TokenMutationsPerSecond: 1000, TokenMutationBurst: 500}})
	clients := benchClients(t, s, 2)
	var rep benchReport
	decodeStrict(t, newCLI(t, nil).ok("bench", "--url", s.URL, "--clients", clients, "--connections", "2",
		"--push-share", "0", "--preload", "1500", "--snapshot-storm", "2", "--duration", "100ms", "--drain", "20s", "--json"), &rep)
	require.Positive(t, rep.PreloadRetries, "the quota refused some preload pushes")
	require.Empty(t, rep.Errors)
	require.Equal(t, int64(2), rep.Snapshots.Complete)
	require.Equal(t, int64(2*1500), rep.Snapshots.Records, "every preloaded record was written")
}

// A snapshot cut short (its body ends before the trailer) is fetched
// again, as a device does, and the retries are counted. A proxy in front
// of a real syncd cuts each token's first snapshot in the middle.
func TestBenchRetriesASnapshotCutShort(t *testing.T) {
	s := syncdtest.Start(t, server.Config{})
	clients := benchClients(t, s, 3)
	front := spoilFirstSnapshots(t, s, func(w http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, s.URL+r.URL.Path, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(body[:len(body)/2])
	})

	var rep benchReport
	decodeStrict(t, newCLI(t, nil).ok("bench", "--url", front, "--clients", clients, "--connections", "3",
		"--push-share", "0", "--preload", "50", "--snapshot-storm", "3", "--duration", "200ms", "--drain", "20s", "--json"), &rep)
	require.Equal(t, int64(3), rep.Snapshots.Failed, "each token's first snapshot was cut once")
	require.Equal(t, int64(3), rep.Snapshots.Complete)
	require.Equal(t, int64(3*50), rep.Snapshots.Records)
	require.Empty(t, rep.Errors)
}

// spoilFirstSnapshots starts a proxy in front of s that answers each
// token's first snapshot request with spoil and passes everything else
// through; it returns the proxy's URL.
func spoilFirstSnapshots(t *testing.T, s *syncdtest.Server, spoil http.HandlerFunc) string {
	t.Helper()
	target, err := url.Parse(s.URL)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	spoiled := map[string]bool{}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		first := r.URL.Path == syncproto.SnapshotPath && !spoiled[r.Header.Get("Authorization")]
		if first {
			spoiled[r.Header.Get("Authorization")] = true
		}
		mu.Unlock()
		if first {
			spoil(w, r)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	return front.URL
}

func TestCheckSnapshotKnowsAWholeBody(t *testing.T) {
	var buf bytes.Buffer
	w, err := syncproto.NewSnapshotWriter(&buf, 42)
	require.NoError(t, err)
	long := json.RawMessage(`"` + strings.Repeat("x", 100<<10) + `"`) // longer than the reader's buffer
	for i := range 5 {
		v := json.RawMessage(`{"n":1}`)
		if i == 2 {
			v = long
		}
		require.NoError(t, w.Write(syncproto.SnapshotRecord{Model: "m", Key: strconv.Itoa(i), Value: v, Version: 1, HLC: syncproto.Timestamp{Wall: 1, Origin: "c"}}))
	}
	require.NoError(t, w.Close())
	body := buf.Bytes()

	n, err := checkSnapshot(bytes.NewReader(body))
	require.NoError(t, err)
	require.Equal(t, int64(5), n)
	for cut := 0; cut < len(body); cut += 997 {
		_, err := checkSnapshot(bytes.NewReader(body[:cut]))
		require.Error(t, err, "cut at byte %d", cut)
	}
	_, err = checkSnapshot(bytes.NewReader(body[:len(body)-1]))
	require.ErrorIs(t, err, errSnapshotTruncated, "the trailer's newline missing")
	lines := strings.SplitAfter(string(body), "\n")
	for name, bad := range map[string]string{
		"a trailer that miscounts": strings.Join(lines[:3], "") + `{"end":true,"records":5}` + "\n",
		"bytes after the trailer":  string(body) + "{}\n",
		"no header":                strings.Join(lines[1:], ""),
		"a line that is no record": lines[0] + "[]\n" + lines[len(lines)-2],
	} {
		_, err := checkSnapshot(strings.NewReader(bad))
		require.ErrorIs(t, err, errSnapshotMalformed, name)
	}
}
