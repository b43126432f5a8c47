package server_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// seedLarge writes about 8 MiB of records in tenant acme, more than
// loopback socket buffers hold, so a snapshot reader that stops reading
// holds its turn.
func seedLarge(t *testing.T, ts *testServer) int {
	t.Helper()
	writer, clock := session(t, ts, ts.Member(t, "acme", "seeder"), "seeder")
	big := `"` + strings.Repeat("x", 8<<10) + `"`
	const pushes, per = 20, 50
	for i := range pushes {
		muts := make([]syncproto.Mutation, per)
		for j := range muts {
			muts[j] = put(t, clock, "notes", fmt.Sprintf("k%d-%d", i, j), big)
		}
		requireApplied(t, writer.push(fmt.Sprintf("s%d", i), muts...))
	}
	return pushes * per
}

// refusedBusy requires resp to be 503 server_busy with a Retry-After of
// at least a second, in the header and the body.
func refusedBusy(t *testing.T, resp *http.Response) {
	t.Helper()
	defer resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, secs, 1)
	e := httpErrorBody(t, resp)
	require.Equal(t, syncproto.CodeServerBusy, e.Code)
	require.Positive(t, e.RetryAfterMS)
}

// Devices beyond the snapshot concurrency limit wait their turn in a
// bounded queue, first come first served, and each gets its whole
// snapshot (the two waiting, of one scope, from one read); beyond the
// queue they are refused with a Retry-After, and one token never holds two
// places.
func TestSnapshotsBeyondTheLimitWaitTheirTurn(t *testing.T) {
	ts := startServer(t, server.Config{MaxConcurrentSnapshots: 1, MaxQueuedSnapshots: 2})
	n := seedLarge(t, ts)

	// The first device takes the only turn and stops reading.
	stalled := syncdtest.Get(t, ts.url+syncproto.SnapshotPath, ts.Member(t, "acme", "stalled"))
	require.Equal(t, http.StatusOK, stalled.StatusCode)

	// Two more wait in the queue.
	type fetched struct {
		records int
		err     error
	}
	results := make(chan fetched, 2)
	tokens := []string{ts.Member(t, "acme", "second"), ts.Member(t, "acme", "third")}
	for _, token := range tokens {
		go func() {
			recs, err := fetchSnapshotRecords(ts.url, token)
			results <- fetched{len(recs), err}
		}()
	}
	require.Eventually(t, func() bool { return ts.Metric(t, "syncd_snapshots_waiting") == "2" }, ioTimeout, 10*time.Millisecond)

	// The queue is full: a fourth device is refused at once, and so is a
	// second snapshot for a token already waiting.
	refusedBusy(t, syncdtest.Get(t, ts.url+syncproto.SnapshotPath, ts.Member(t, "acme", "fourth")))
	refusedBusy(t, syncdtest.Get(t, ts.url+syncproto.SnapshotPath, tokens[0]))

	// The stalled device goes away; the waiting ones are served in turn.
	stalled.Body.Close()
	for range tokens {
		select {
		case r := <-results:
			require.NoError(t, r.err)
			require.Equal(t, n, r.records)
		case <-time.After(2 * ioTimeout):
			t.Fatal("a waiting snapshot was never served")
		}
	}
	require.Equal(t, "0", ts.Metric(t, "syncd_snapshots_waiting"))
	require.Equal(t, "2", ts.Metric(t, "syncd_snapshots_refused_total"))
	require.Equal(t, "1", ts.Metric(t, "syncd_snapshots_shared_total"), "the third joined the second's read")
}

// A device that waits longer than SnapshotQueueTimeout is refused with a
// Retry-After and leaves the queue; the refusal reaches it even when the
// wait outlasted the HTTP server's write timeout.
func TestSnapshotWaitIsBounded(t *testing.T) {
	ts := startServer(t, server.Config{MaxConcurrentSnapshots: 1, SnapshotQueueTimeout: 300 * time.Millisecond})
	seedLarge(t, ts)
	base := serveWithTimeouts(t, ts, 100*time.Millisecond)
	stalled := syncdtest.Get(t, base+syncproto.SnapshotPath, ts.Member(t, "acme", "stalled"))
	defer stalled.Body.Close()
	require.Equal(t, http.StatusOK, stalled.StatusCode)

	refusedBusy(t, syncdtest.Get(t, base+syncproto.SnapshotPath, ts.Member(t, "acme", "patient")))
	require.Equal(t, "0", ts.Metric(t, "syncd_snapshots_waiting"))
}

// serveWithTimeouts serves ts's public handler on a listener of its own
// whose HTTP server has read and write timeouts of d, and returns its
// base URL.
func serveWithTimeouts(t *testing.T, ts *testServer, d time.Duration) string {
	t.Helper()
	hs := ts.srv.HTTPServer(ts.srv.Handler())
	hs.ReadTimeout, hs.WriteTimeout = d, d
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return "http://" + ln.Addr().String()
}

// fetchSnapshotRecords reads a whole snapshot and returns its records, bounded by 2 ioTimeout,
// without a testing.T (it runs off the test's goroutine).
func fetchSnapshotRecords(base, token string) ([]syncproto.SnapshotRecord, error) {
	hc := &http.Client{Timeout: 2 * ioTimeout}
	req, err := http.NewRequest(http.MethodGet, base+syncproto.SnapshotPath, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("http %d", resp.StatusCode)
	}
	sr, err := syncproto.NewSnapshotReader(resp.Body)
	if err != nil {
		return nil, err
	}
	var recs []syncproto.SnapshotRecord
	for range 100_000 {
		rec, err := sr.Next()
		if err == io.EOF {
			return recs, nil
		}
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec)
	}
	return nil, fmt.Errorf("snapshot longer than 100000 records")
}

// The HTTP server's read and write timeouts run from a request's start: a
// snapshot that waited its turn, or streams, for longer than they are is
// not cut by them (SnapshotQueueTimeout, SnapshotTimeout and the per-write
// deadline bound it instead).
func TestSnapshotOutlivesTheHTTPTimeouts(t *testing.T) {
	ts := startServer(t, server.Config{MaxConcurrentSnapshots: 1})
	n := seedLarge(t, ts)
	const timeouts = 200 * time.Millisecond
	base := serveWithTimeouts(t, ts, timeouts)

	first := syncdtest.Get(t, base+syncproto.SnapshotPath, ts.Member(t, "acme", "first"))
	defer first.Body.Close()
	require.Equal(t, http.StatusOK, first.StatusCode)
	second := make(chan error, 1)
	go func() {
		recs, err := fetchSnapshotRecords(base, ts.Member(t, "acme", "second"))
		if err == nil && len(recs) != n {
			err = fmt.Errorf("%d records, want %d", len(recs), n)
		}
		second <- err
	}()
	require.Eventually(t, func() bool { return ts.Metric(t, "syncd_snapshots_waiting") == "1" }, ioTimeout, 10*time.Millisecond)
	time.Sleep(3 * timeouts) // both requests outlive the timeouts

	sr, err := syncproto.NewSnapshotReader(first.Body)
	require.NoError(t, err)
	for i := 0; ; i++ {
		_, err := sr.Next()
		if err == io.EOF {
			require.Equal(t, n, i, "the first snapshot is whole")
			break
		}
		require.NoError(t, err)
	}
	select {
	case err := <-second:
		require.NoError(t, err, "the snapshot that waited is whole")
	case <-time.After(2 * ioTimeout):
		t.Fatal("the waiting snapshot was never served")
	}
}

// When a device's turn comes, the devices of the same scope waiting then
// join its read; a device of another scope waits for a read of its own.
// Every joiner's snapshot holds every write acknowledged before it asked.
func TestSnapshotReadIsSharedByTheDevicesWaitingForIt(t *testing.T) {
	ts := startServer(t, server.Config{MaxConcurrentSnapshots: 1})
	n := seedLarge(t, ts)
	other, otherClock := session(t, ts, ts.Member(t, "globex", "seeder"), "seeder")
	requireApplied(t, other.push("o1", put(t, otherClock, "notes", "theirs", `1`)))
	stalled := syncdtest.Get(t, ts.url+syncproto.SnapshotPath, ts.Member(t, "acme", "stalled"))
	require.Equal(t, http.StatusOK, stalled.StatusCode)

	type fetched struct {
		who  string
		recs []syncproto.SnapshotRecord
		err  error
	}
	results := make(chan fetched, 3)
	fetch := func(who, token string) {
		go func() {
			recs, err := fetchSnapshotRecords(ts.url, token)
			results <- fetched{who, recs, err}
		}()
	}
	waiting := func(k int) {
		t.Helper()
		require.Eventually(t, func() bool { return ts.Metric(t, "syncd_snapshots_waiting") == strconv.Itoa(k) }, ioTimeout, 10*time.Millisecond)
	}
	fetch("early", ts.Member(t, "acme", "early"))
	waiting(1)
	writer, clock := session(t, ts, ts.Member(t, "acme", "writer"), "writer")
	requireApplied(t, writer.push("w1", put(t, clock, "notes", "written-before-late-asked", `1`)))
	fetch("late", ts.Member(t, "acme", "late"))
	fetch("globex", ts.Member(t, "globex", "reader"))
	waiting(3)

	stalled.Body.Close()
	got := map[string][]syncproto.SnapshotRecord{}
	for range 3 {
		select {
		case r := <-results:
			require.NoError(t, r.err, r.who)
			got[r.who] = r.recs
		case <-time.After(2 * ioTimeout):
			t.Fatal("a waiting snapshot was never served")
		}
	}
	require.Len(t, got["early"], n+1)
	require.Equal(t, got["early"], got["late"], "one read served both")
	require.True(t, slices.ContainsFunc(got["late"], func(r syncproto.SnapshotRecord) bool { return r.Key == "written-before-late-asked" }))
	require.Len(t, got["globex"], 1, "the other tenant's own record alone")
	require.Equal(t, "1", ts.Metric(t, "syncd_snapshots_shared_total"))
}

// A device that stops reading a shared read holds the others back only
// until its per-write deadline cuts it; the others get their whole
// snapshot.
func TestSnapshotSharedWithAStalledReader(t *testing.T) {
	ts := startServer(t, server.Config{MaxConcurrentSnapshots: 1, SnapshotShareBytes: 256 << 10, SnapshotWriteTimeout: 300 * time.Millisecond})
	n := seedLarge(t, ts)
	first := syncdtest.Get(t, ts.url+syncproto.SnapshotPath, ts.Member(t, "acme", "first"))
	require.Equal(t, http.StatusOK, first.StatusCode)

	reader := make(chan error, 1)
	go func() {
		recs, err := fetchSnapshotRecords(ts.url, ts.Member(t, "acme", "reader"))
		if err == nil && len(recs) != n {
			err = fmt.Errorf("%d records, want %d", len(recs), n)
		}
		reader <- err
	}()
	require.Eventually(t, func() bool { return ts.Metric(t, "syncd_snapshots_waiting") == "1" }, ioTimeout, 10*time.Millisecond)
	staller := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(snapshotRequest(t, ts.url, ts.Member(t, "acme", "staller")))
		if err == nil {
			staller <- resp
		}
		close(staller)
	}()
	require.Eventually(t, func() bool { return ts.Metric(t, "syncd_snapshots_waiting") == "2" }, ioTimeout, 10*time.Millisecond)

	// The first device reads its whole snapshot; the second, sharing the
	// read with a third that never reads, gets its whole one too.
	_, err := io.Copy(io.Discard, first.Body)
	require.NoError(t, err)
	first.Body.Close()
	select {
	case err := <-reader:
		require.NoError(t, err)
	case <-time.After(2 * ioTimeout):
		t.Fatal("the reading device was held back for good")
	}
	require.Equal(t, "1", ts.Metric(t, "syncd_snapshots_shared_total"))
	require.Eventually(t, func() bool { return ts.Metric(t, "syncd_snapshots_cut_total") == "1" }, ioTimeout, 10*time.Millisecond, "the staller was cut")
	if resp := <-staller; resp != nil {
		resp.Body.Close()
	}
}

// snapshotRequest is a GET of the snapshot with token.
func snapshotRequest(t *testing.T, base, token string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+syncproto.SnapshotPath, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}

// SnapshotTimeout bounds a whole snapshot, however steadily its reader
// reads: a reader too slow for it is cut.
func TestSnapshotTimeoutBoundsASlowReader(t *testing.T) {
	ts := startServer(t, server.Config{SnapshotTimeout: 300 * time.Millisecond})
	seedLarge(t, ts)
	resp := syncdtest.Get(t, ts.url+syncproto.SnapshotPath, ts.Member(t, "acme", "slow"))
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sr, err := syncproto.NewSnapshotReader(&slowReader{r: resp.Body})
	require.NoError(t, err)
	for range 100_000 {
		if _, err = sr.Next(); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, syncproto.ErrSnapshotTruncated)
	require.Eventually(t, func() bool { return ts.Metric(t, "syncd_snapshots_cut_total") == "1" }, ioTimeout, 10*time.Millisecond)
}

// slowReader reads at most 64 KiB every 20 ms.
type slowReader struct{ r io.Reader }

func (s *slowReader) Read(p []byte) (int, error) {
	time.Sleep(20 * time.Millisecond)
	return s.r.Read(p[:min(len(p), 64<<10)])
}
