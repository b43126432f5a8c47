package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd-dev/syncd/syncproto"
)

// Bounds of syncctl bench. Each is checked before anything connects.
const (
	benchMaxConnections  = 50_000          // --connections
	benchMaxDuration     = time.Hour       // --duration
	benchMaxRate         = 10_000.0        // --rate, pushes per second per pusher
	benchMaxInflight     = 64              // --inflight, pushes per connection
	benchMaxPreload      = 10_000_000      // --preload, records
	benchMaxKeys         = 100_000_000     // --keys
	benchMaxDrain        = 5 * time.Minute // --drain
	benchDialParallel    = 64              // connections opened at once
	benchPreloadBatch    = syncproto.MaxBatch
	benchPreloadInflight = 4                // preload pushes in flight
	benchPreloadRefusals = 100              // refusals of one preload push before the preload fails
	benchScrapeTimeout   = 5 * time.Second  // each /metrics scrape
	benchSettle          = 10 * time.Second // bound on waiting for the server's goroutines to fall after disconnect
	benchWriteTimeout    = 30 * time.Second // a push write blocked this long (the server stopped reading) cuts its session
	benchMinReadBuffer   = 4 << 10          // --read-buffer
	benchMaxReadBuffer   = 64 << 20         // --read-buffer
)

// benchRun is one run of syncctl bench: its connections and what they
// measured.
type benchRun struct {
	cfg    benchConfig
	value  []byte
	dialer *http.Client // what devices dial with (benchDialer)

	conns      []*benchConn
	readers    sync.WaitGroup
	closing    atomic.Bool
	connect    histogram
	ack        histogram
	snapshot   histogram
	deliveries *deliveries
	pushes     atomic.Int64
	mutations  atomic.Int64
	preloaded  atomic.Int64
	top        atomic.Uint64 // highest seq acknowledged
	statuses   counters
	errors     counters

	preloadRetries atomic.Int64 // preload pushes sent again after a refusal

	snapshots, snapshotsComplete, snapshotRecords, snapshotRetries, snapshotRetriesFailed atomic.Int64
}

func (r *benchRun) raiseTop(seq uint64) {
	for {
		t := r.top.Load()
		if seq <= t || r.top.CompareAndSwap(t, seq) {
			return
		}
	}
}

// benchClient is one line of the clients file.
type benchClient struct{ id, token string }

// readBenchClients reads "CLIENT_ID TOKEN" lines (syncctl token issue
// --count writes them); blank lines and lines starting with # are skipped.
func readBenchClients(r io.Reader, name string) ([]benchClient, error) {
	var out []benchClient
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 || syncproto.ValidateID(f[0]) != nil || !strings.HasPrefix(f[1], "sdk_") {
			return nil, failf(exitBadFile, "%s line %d: want \"CLIENT_ID TOKEN\" (syncctl token issue --count N writes such a file)", name, n)
		}
		out = append(out, benchClient{id: f[0], token: f[1]})
	}
	if err := sc.Err(); err != nil {
		return nil, failf(exitBadFile, "read %s: %v", name, err)
	}
	return out, nil
}

// connectAll opens every connection, benchDialParallel at a time, spread
// over the URLs in turn. Failures are counted, not fatal: the report says
// how many connected.
func (r *benchRun) connectAll(ctx context.Context, clients []benchClient, tick func()) {
	cfg := r.cfg
	nSub := int(float64(cfg.connections)*cfg.subscribeShare + 0.5)
	r.conns = make([]*benchConn, cfg.connections)
	sem := make(chan struct{}, benchDialParallel)
	var wg sync.WaitGroup
	for i := range r.conns {
		c := &benchConn{
			run: r, id: clients[i].id, token: clients[i].token, base: cfg.urls[i%len(cfg.urls)],
			subscriber: i < nSub, slots: make(chan struct{}, cfg.inflight), pending: map[string]sentPush{},
			dead: make(chan struct{}),
		}
		r.conns[i] = c
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			close(c.dead)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			start := time.Now()
			if err := c.dial(ctx, cfg.connectTimeout); err != nil {
				r.errors.add(err.Error(), 1)
				close(c.dead)
				return
			}
			r.connect.observe(time.Since(start))
			r.readers.Add(1)
			go func() {
				defer r.readers.Done()
				c.read(ctx)
			}()
			tick()
		}()
	}
	wg.Wait()
}

// live counts the open sessions and the open subscribed ones.
func (r *benchRun) live() (conns, subs int) {
	for _, c := range r.conns {
		if c.live.Load() {
			conns++
			if c.subscriber {
				subs++
			}
		}
	}
	return conns, subs
}

// closeAll closes every session and waits for the readers.
func (r *benchRun) closeAll() {
	r.closing.Store(true)
	var wg sync.WaitGroup
	sem := make(chan struct{}, benchDialParallel)
	for _, c := range r.conns {
		if c.conn == nil {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c.conn.CloseNow()
		}()
	}
	wg.Wait()
	r.readers.Wait()
}

// preload writes n records on distinct keys through a session of its own
// (the first client's), before the devices connect and subscribe, so
// snapshots have something to carry and the feed measures only the run.
// One token writing as fast as it can runs into the server's quotas: a push
// refused rate_limited or server_busy is sent again, the same mutations
// (op ids included, so nothing is written twice), after the wait the
// server asked for, at most benchPreloadRefusals times. It fails unless
// every record was written.
func (r *benchRun) preload(ctx context.Context, client benchClient, tick func()) error {
	c := &benchConn{run: r, id: client.id, token: client.token, base: r.cfg.urls[0],
		slots: make(chan struct{}, benchPreloadInflight), pending: map[string]sentPush{}, dead: make(chan struct{}),
		redoReady: make(chan struct{}, 1)}
	if err := c.dial(ctx, r.cfg.connectTimeout); err != nil {
		return failf(exitFailure, "preload: %v", err)
	}
	go c.read(ctx)
	defer func() {
		c.leaving.Store(true)
		c.conn.CloseNow()
		<-c.dead
	}()
	ended := func() error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return failf(exitFailure, "preload: the session ended after %d records", r.preloaded.Load())
	}
	n := r.cfg.preload
	sent := 0
	for {
		c.mu.Lock()
		var b *preloadBatch
		if len(c.redo) > 0 {
			b = c.redo[0]
			c.redo = c.redo[1:]
		}
		c.mu.Unlock()
		switch {
		case b != nil:
			if b.refusals > benchPreloadRefusals {
				return failf(exitFailure, "preload: a push was refused %d times (%s)", b.refusals, describeCounts(r.errors.snapshot()))
			}
			select {
			case <-time.After(b.wait):
			case <-ctx.Done():
				return ctx.Err()
			}
		case sent < n:
			b = &preloadBatch{muts: make([]syncproto.Mutation, min(benchPreloadBatch, n-sent))}
			for i := range b.muts {
				op, err := syncproto.NewOpID()
				if err != nil {
					return err
				}
				b.muts[i] = syncproto.Mutation{OpID: op, Model: r.cfg.models[0], Key: "pre" + strconv.Itoa(sent+i), Op: syncproto.OpPut, Value: r.value, HLC: c.clock.Now()}
			}
			sent += len(b.muts)
		case len(c.slots) == 0:
			// Every push answered, none to send again.
			if got := r.preloaded.Load(); got != int64(n) {
				return failf(exitFailure, "preload: %d of %d records written (%s)", got, n, describeCounts(r.errors.snapshot()))
			}
			return nil
		default:
			// Wait for an answer: a refusal to send again, or the last ones.
			select {
			case <-c.redoReady:
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			case <-c.dead:
				return ended()
			}
			continue
		}
		if !c.push(ctx, b.muts, b) {
			return ended()
		}
		tick()
	}
}

// pushLoop pushes batches on c until ctx ends: closed loop (as fast as
// acknowledged, inflight at a time) or, with a rate, at that many pushes a
// second, skipping a tick when inflight pushes are unanswered.
func (r *benchRun) pushLoop(ctx context.Context, c *benchConn, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	if r.cfg.rate == 0 {
		for ctx.Err() == nil && c.push(ctx, c.mutations(rng, r.cfg.batch), nil) {
		}
		return
	}
	// Each pusher starts at a random point of its interval: pushers that
	// all ticked together would arrive as one burst per interval (a
	// thousand devices do not write in step), and the burst, not the rate,
	// would set the latencies.
	interval := time.Duration(float64(time.Second) / r.cfg.rate)
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Duration(rng.Int64N(int64(interval)))):
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.dead:
			return
		case <-t.C:
		}
		if len(c.slots) == cap(c.slots) {
			r.errors.add("skipped: inflight full", 1)
			continue
		}
		if !c.push(ctx, c.mutations(rng, r.cfg.batch), nil) {
			return
		}
	}
}

// settle waits, at most d, until every pusher's pushes are answered and
// every live subscriber's cursor has reached the highest acknowledged seq.
func (r *benchRun) settle(ctx context.Context, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		done := true
		top := r.top.Load()
		for _, c := range r.conns {
			if !c.live.Load() {
				continue
			}
			if len(c.slots) > 0 || (c.subscriber && c.cursor.Load() < top) {
				done = false
				break
			}
		}
		if done {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// storm fetches n snapshots at once, each with its own client's token, and
// reads every one to its trailer, checking it whole (checkSnapshot) without
// decoding its records, so that the generator, on the machine the server
// runs on, spends its CPU reading rather than parsing. A fetch that does
// not end whole is fetched again until ctx ends (the run's drain), as a
// device does: after Retry-After plus a random jitter of up to half of it
// when refused busy (503), after benchSnapshotRetryWait when it failed or
// was cut short. Retries are counted by kind; a snapshot still incomplete
// when ctx ends is counted once, under its last failure.
func (r *benchRun) storm(ctx context.Context, wg *sync.WaitGroup) {
	hc := &http.Client{Timeout: r.cfg.duration + r.cfg.drain}
	for i := range r.cfg.storm {
		c := r.conns[i%len(r.conns)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			for {
				n, err := fetchSnapshot(ctx, hc, c.base, c.token)
				if err == nil {
					r.snapshots.Add(1)
					r.snapshotRecords.Add(n)
					r.snapshotsComplete.Add(1)
					r.snapshot.observe(time.Since(start))
					return
				}
				wait, retries := benchSnapshotRetryWait, &r.snapshotRetriesFailed
				var busy *snapshotBusyError
				if errors.As(err, &busy) {
					wait, retries = busy.retryAfter+rand.N(busy.retryAfter/2+1), &r.snapshotRetries
				}
				select {
				case <-time.After(wait):
					if ctx.Err() == nil {
						retries.Add(1)
						continue
					}
				case <-ctx.Done():
				}
				r.snapshots.Add(1)
				r.errors.add("snapshot: "+err.Error(), 1)
				return
			}
		}()
	}
}

// benchDefaultRetryAfter is the wait before fetching again a snapshot
// refused busy without a usable Retry-After; benchSnapshotRetryWait the
// wait after one that failed or was cut short.
const (
	benchDefaultRetryAfter = time.Second
	benchSnapshotRetryWait = time.Second
)

// snapshotBusyError: the server refused a snapshot 503 (its snapshot
// concurrency limit); fetch it again after retryAfter.
type snapshotBusyError struct{ retryAfter time.Duration }

func (e *snapshotBusyError) Error() string { return "http 503" }

// fetchSnapshot reads one snapshot to its trailer and returns its records.
// A 503 is a *snapshotBusyError carrying the answer's Retry-After.
func fetchSnapshot(ctx context.Context, hc *http.Client, base, token string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+syncproto.SnapshotPath, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("request failed")
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		wait := benchDefaultRetryAfter
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			wait = time.Duration(s) * time.Second
		}
		return 0, &snapshotBusyError{retryAfter: wait}
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("http %d", resp.StatusCode)
	}
	return checkSnapshot(resp.Body)
}

// Errors of checkSnapshot, as the errors table names them.
var (
	errSnapshotTruncated = errors.New("truncated")
	errSnapshotMalformed = errors.New("malformed")
)

// checkSnapshot reads a snapshot body (PROTOCOL.md, "Resync") and returns
// its record count when it is whole: a header line, record lines, and a
// trailer line counting exactly those records, then the end of the body.
// It checks the framing a device relies on to know it has everything,
// without decoding the records (syncproto.SnapshotReader does that, at
// several times the cost).
func checkSnapshot(body io.Reader) (int64, error) {
	br := bufio.NewReaderSize(body, 64<<10)
	header, err := readLine(br)
	if err != nil {
		return 0, errSnapshotTruncated
	}
	if !bytes.HasPrefix(header, []byte(`{"head":`)) {
		return 0, errSnapshotMalformed
	}
	trailer := []byte(`{"end":true,"records":`)
	var n int64
	for {
		line, err := readLine(br)
		if err != nil {
			return n, errSnapshotTruncated
		}
		if count, ok := bytes.CutPrefix(line, trailer); ok {
			m, err := strconv.ParseInt(string(bytes.TrimSuffix(count, []byte("}\n"))), 10, 64)
			if err != nil || m != n {
				return n, errSnapshotMalformed
			}
			if _, err := br.ReadByte(); err != io.EOF {
				return n, errSnapshotMalformed
			}
			return n, nil
		}
		if !bytes.HasPrefix(line, []byte(`{"model":`)) {
			return n, errSnapshotMalformed
		}
		n++
	}
}

// readLine returns the next line, its newline included; a line longer
// than the reader's buffer is returned cut to its first buffer-full (only
// line starts are checked). A body that ends before a newline is an error.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != bufio.ErrBufferFull {
		return line, err
	}
	head := bytes.Clone(line)
	for err == bufio.ErrBufferFull {
		_, err = br.ReadSlice('\n')
	}
	return head, err
}

// serverFigures are what /metrics says about a node's process.
type serverFigures struct {
	RSSBytes   int64 `json:"rss_bytes"`  // -1 when not exported
	Goroutines int64 `json:"goroutines"` // -1 when not exported
}

// scrape reads process_resident_memory_bytes and go_goroutines from a
// node's /metrics; a figure the node does not export is -1.
func scrape(ctx context.Context, base string) serverFigures {
	out := serverFigures{RSSBytes: -1, Goroutines: -1}
	ctx, cancel := context.WithTimeout(ctx, benchScrapeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return out
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		switch name {
		case "process_resident_memory_bytes":
			out.RSSBytes = int64(f)
		case "go_goroutines":
			out.Goroutines = int64(f)
		}
	}
	return out
}
