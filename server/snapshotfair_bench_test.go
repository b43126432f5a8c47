package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// The snapshot storm of issue 24's fairness item: tenant A, a big tenant
// whose users each follow a scope value of their own (so no two of its
// devices share a read), has stormDevices devices bootstrapping at once;
// tenant B's one device asks for its snapshot while A's storm waits for
// turns.
const (
	// stormValues is how many scope values A's records are spread over, one
	// per storming device.
	stormValues = 256
	// stormPerValue is the records of one of A's values, and B's records.
	stormPerValue = 100
)

// stormScopes declares the scope the storm's devices follow.
func stormScopes(tb testing.TB) *replication.Scopes {
	tb.Helper()
	sc := &replication.Scopes{}
	require.NoError(tb, sc.Set("project=notes.p"))
	return sc
}

// snapshotStorm is a server holding A's records (stormValues values of
// stormPerValue records) and B's (stormPerValue records), with a token per
// storming device of A granted its own value, and B's device's token.
type snapshotStorm struct {
	ts       *testServer
	aTokens  []string
	bToken   string
	aRecords int // records of one A device's snapshot
}

// startSnapshotStorm starts syncd with cfg (its scopes set to the storm's)
// and loads the storm's records and tokens for devices storming devices of
// A.
func startSnapshotStorm(tb *testing.B, cfg server.Config, devices int) *snapshotStorm {
	tb.Helper()
	cfg.Scopes = stormScopes(tb)
	ts := startServer(tb, cfg)
	pad := fmt.Sprintf("%0180d", 0)
	all := map[string][]string{"project": {"*"}}
	loaderA := ts.Issue(tb, auth.Principal{Tenant: "storm", ClientID: "bench-client", Read: []string{"*"}, Write: []string{"*"}, Scopes: all})
	preloadValues(tb, ts, loaderA, stormValues*stormPerValue, "notes", func(i int) []byte { return fmt.Appendf(nil, `{"p":"v%04d","v":%q}`, i%stormValues, pad) })
	loaderB := ts.Issue(tb, auth.Principal{Tenant: "small", ClientID: "bench-client", Read: []string{"*"}, Write: []string{"*"}, Scopes: all})
	preloadValues(tb, ts, loaderB, stormPerValue, "notes", func(int) []byte { return fmt.Appendf(nil, `{"p":"b","v":%q}`, pad) })
	s := &snapshotStorm{ts: ts, aRecords: stormPerValue}
	for i := range devices {
		s.aTokens = append(s.aTokens, ts.Issue(tb, auth.Principal{Tenant: "storm", ClientID: fmt.Sprintf("d%d", i), Read: []string{"*"},
			Scopes: map[string][]string{"project": {fmt.Sprintf("v%04d", i%stormValues)}}}))
	}
	s.bToken = ts.Issue(tb, auth.Principal{Tenant: "small", ClientID: "device", Read: []string{"*"}, Scopes: all})
	return s
}

// timedSnapshot is one snapshot fetched whole: its time to the response's
// first byte (headers) and to its trailer.
type timedSnapshot struct {
	firstByte, done time.Duration
	err             error
}

// fetchTimed reads the snapshot token may read, wholly, requiring want
// records; it uses no require (it runs off the test goroutine).
func fetchTimed(ctx context.Context, base, token string, want int) timedSnapshot {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+syncproto.SnapshotPath, nil)
	if err != nil {
		return timedSnapshot{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return timedSnapshot{err: err}
	}
	defer resp.Body.Close()
	got := timedSnapshot{firstByte: time.Since(start)}
	if resp.StatusCode != http.StatusOK {
		got.err = fmt.Errorf("http %d", resp.StatusCode)
		return got
	}
	var lc lineCounter
	if _, err := io.Copy(&lc, resp.Body); err != nil {
		got.err = err
		return got
	}
	got.done = time.Since(start)
	if lc.lines != want+2 || string(lc.last) != fmt.Sprintf(`{"end":true,"records":%d}`, want) {
		got.err = fmt.Errorf("%d lines ending %s, want %d records", lc.lines, lc.last, want)
	}
	return got
}

// storm asks every A device's snapshot at once and returns, once every one
// of them reached the gate (waiting, served or done) and at least waitFor
// wait for a turn, a function that waits for them all and returns the
// first failure; queued is false when the storm ended (or failed) before
// (the machine served it as fast as it came), and then the storm is over.
func (s *snapshotStorm) storm(tb testing.TB, ctx context.Context, waitFor int) (wait func() error, queued bool) {
	tb.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(s.aTokens))
	var finished atomic.Int64
	for _, token := range s.aTokens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer finished.Add(1)
			if got := fetchTimed(ctx, s.ts.url, token, s.aRecords); got.err != nil {
				errs <- got.err
			}
		}()
	}
	ended := make(chan struct{})
	go func() {
		wg.Wait()
		close(ended)
	}()
	wait = func() error {
		<-ended
		select {
		case err := <-errs:
			return err
		default:
			return nil
		}
	}
	for {
		// Read in this order, a snapshot moving on between two reads is
		// counted twice at worst, never missed.
		waiting := s.ts.MetricValue(tb, "syncd_snapshots_waiting")
		active := s.ts.MetricValue(tb, "syncd_snapshots_active")
		if waiting >= float64(waitFor) && int(waiting+active)+int(finished.Load()) >= len(s.aTokens) {
			return wait, true
		}
		select {
		case <-ended:
			return wait, false
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// BenchmarkSnapshotFairness is the snapshot turns' fairness figure, at
// syncd's snapshot defaults (4 at once, 1,024 queued, 512 a tenant):
// tenant B's one device fetches its snapshot (100 records) alone, then
// while tenant A storms with SYNCD_BENCH_STORM_DEVICES devices (256 by
// default), each following a scope value of its own (100 records each,
// so no two share a read), asked at once; B asks once at least a quarter of
// A's storm waits for a turn and all of it reached the gate (a storm
// served before, as a quiet machine may, is asked again), so B's wait is
// the gate's and not the HTTP server's. It reports the medians over b.N rounds of
//
//	b_first_byte_alone_ms, b_first_byte_storm_ms, b_first_byte_ratio
//	b_done_alone_ms, b_done_storm_ms, b_done_ratio
//	a_storm_s  the time A's whole storm took
//	b_done_in_a_turns  b_done_storm_ms over one turn of the storm (a_storm_s
//	           times MaxConcurrentSnapshots over the storm's devices): what
//	           B waited and read, in turns; the fair order's floor is about
//	           2 (the end of one running read, then its own)
//
// One op is one round: B alone (5 fetches, their median), then one storm.
func BenchmarkSnapshotFairness(b *testing.B) {
	devices := benchSize(b, "SYNCD_BENCH_STORM_DEVICES", stormValues)
	s := startSnapshotStorm(b, server.Config{RequestsPerSecond: 1e9, RequestBurst: 1 << 30, Quotas: noQuotas, RetentionInterval: -1, Synchronous: sqlitedb.Normal}, devices)
	ctx := context.Background()
	var firstAlone, firstStorm, doneAlone, doneStorm, stormTook, inTurns []float64
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ResetTimer()
	for range b.N {
		var first, done []float64
		for range 5 {
			got := fetchTimed(ctx, s.ts.url, s.bToken, stormPerValue)
			require.NoError(b, got.err)
			first, done = append(first, ms(got.firstByte)), append(done, ms(got.done))
		}
		firstAlone, doneAlone = append(firstAlone, median(first)), append(doneAlone, median(done))

		var start time.Time
		var wait func() error
		for attempt := 0; ; attempt++ {
			require.Less(b, attempt, 10, "the storm never had %d snapshots waiting", devices/4)
			start = time.Now()
			w, queued := s.storm(b, ctx, devices/4)
			if queued {
				wait = w
				break
			}
			require.NoError(b, w())
		}
		got := fetchTimed(ctx, s.ts.url, s.bToken, stormPerValue)
		require.NoError(b, got.err)
		require.NoError(b, wait())
		took := time.Since(start).Seconds()
		stormTook = append(stormTook, took)
		inTurns = append(inTurns, got.done.Seconds()/(took*server.DefaultMaxConcurrentSnapshots/float64(devices)))
		firstStorm, doneStorm = append(firstStorm, ms(got.firstByte)), append(doneStorm, ms(got.done))
	}
	b.StopTimer()
	b.ReportMetric(median(firstAlone), "b_first_byte_alone_ms")
	b.ReportMetric(median(firstStorm), "b_first_byte_storm_ms")
	b.ReportMetric(median(firstStorm)/median(firstAlone), "b_first_byte_ratio")
	b.ReportMetric(median(doneAlone), "b_done_alone_ms")
	b.ReportMetric(median(doneStorm), "b_done_storm_ms")
	b.ReportMetric(median(doneStorm)/median(doneAlone), "b_done_ratio")
	b.ReportMetric(median(stormTook), "a_storm_s")
	b.ReportMetric(median(inTurns), "b_done_in_a_turns")
}

// median is the middle of v (sorted in place).
func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}
