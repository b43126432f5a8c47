package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/syncproto"
)

// benchConfig is syncctl bench's flags, checked.
type benchConfig struct {
	urls           []string
	clientsFile    string
	connections    int
	pushShare      float64
	subscribeShare float64
	rate           float64
	inflight       int
	batch          int
	valueSize      int
	models         []string
	keys           int
	preload        int
	storm          int
	duration       time.Duration
	drain          time.Duration
	connectTimeout time.Duration
	readBuffer     int // SO_RCVBUF of each device's socket; 0 = the kernel's default
	progress       progressMode
	findKnee       bool
	knee           kneeTargets
	cpuProfile     string // file for the generator's own CPU profile; "" = none
}

func (a *app) benchCommand() *cobra.Command {
	cfg := benchConfig{progress: progressAuto}
	cmd := &cobra.Command{
		Use:   "bench --clients FILE [--url URL]... [flags]",
		Short: "Load a running syncd with many devices and report throughput, latency and server memory",
		Long: `Open --connections websocket sessions, each a device with its own client id
and token (from --clients, "CLIENT_ID TOKEN" lines that syncctl token issue
--count N writes), spread over the --url nodes. A share of them subscribe to
the change feed at the head; a share push batches of --batch puts on keys
drawn from --keys, as fast as acknowledged (--rate 0) or at --rate pushes a
second each. --snapshot-storm N devices fetch a snapshot at once when pushing
starts; --preload N writes N records first so snapshots carry something.

After --duration the pushers stop, the run waits (at most --drain) for every
answer and every subscriber to catch up, closes every session and reports:
pushes and mutations per second, ack latency, feed delivery latency (ack
seen by the generator -> change seen by a subscriber) with a count of
deliveries missing, snapshot times, errors by code, and each node's RSS and
goroutines before, loaded and after (from /metrics). It touches only the
given URLs and stops by itself.

With --find-knee it runs the load several times in open loop (at most 12
runs), from --rate pushes a second per pusher (1 when 0), doubling the rate
until a run misses a target and then halving the interval, and reports every
run and the knee: the highest rate whose run had push-ack p99 under
--knee-ack-p99, feed-delivery p99 under --knee-delivery-p99, every write
delivered and no error.`,
		Args: exactArgs(0, "no arguments"),
	}
	f := cmd.Flags()
	f.StringSliceVar(&cfg.urls, "url", []string{defaultSyncURL}, "syncd public base URL; repeat (or comma-separate) for a cluster's nodes")
	f.StringVar(&cfg.clientsFile, "clients", "", `file of "CLIENT_ID TOKEN" lines, one per device (syncctl token issue --count N > FILE)`)
	f.IntVar(&cfg.connections, "connections", 100, fmt.Sprintf("devices to connect, 1..%d (at most the clients in --clients)", benchMaxConnections))
	f.Float64Var(&cfg.pushShare, "push-share", 0.1, "share of the connections that push, 0..1")
	f.Float64Var(&cfg.subscribeShare, "subscribe-share", 1, "share of the connections subscribed to the change feed, 0..1")
	f.Float64Var(&cfg.rate, "rate", 0, fmt.Sprintf("pushes a second per pusher, up to %g; 0 = closed loop (next push as soon as one is answered)", benchMaxRate))
	f.IntVar(&cfg.inflight, "inflight", 1, fmt.Sprintf("pushes a connection may have unanswered, 1..%d", benchMaxInflight))
	f.IntVar(&cfg.batch, "batch", 10, fmt.Sprintf("mutations per push, 1..%d", syncproto.MaxBatch))
	f.IntVar(&cfg.valueSize, "value-size", 200, fmt.Sprintf("bytes of each value, 8..%d", syncproto.MaxPayloadBytes))
	f.StringSliceVar(&cfg.models, "models", []string{"bench"}, "models written, each push's mutations picking among them")
	f.IntVar(&cfg.keys, "keys", 100_000, fmt.Sprintf("key space per model, 1..%d; a small one makes hot keys and LWW losers", benchMaxKeys))
	f.IntVar(&cfg.preload, "preload", 0, fmt.Sprintf("records written before the measured run, 0..%d", benchMaxPreload))
	f.IntVar(&cfg.storm, "snapshot-storm", 0, "devices fetching a snapshot at once when pushing starts, 0..--connections")
	f.DurationVar(&cfg.duration, "duration", 10*time.Second, fmt.Sprintf("how long pushers push, up to %s", benchMaxDuration))
	f.DurationVar(&cfg.drain, "drain", 30*time.Second, fmt.Sprintf("bound on waiting for answers and subscribers after the run, up to %s", benchMaxDrain))
	f.DurationVar(&cfg.connectTimeout, "connect-timeout", 10*time.Second, "bound on one device's connect, hello and subscribe")
	f.IntVar(&cfg.readBuffer, "read-buffer", 0, fmt.Sprintf("each device's socket receive buffer in bytes (SO_RCVBUF), %d..%d; 0 = the kernel's default (autotuned, up to megabytes: a device that reads its feed slowly then has seconds of feed buffered ahead of its push answers)", benchMinReadBuffer, benchMaxReadBuffer))
	f.Var(&cfg.progress, "progress", "live progress line on stderr: auto (when a terminal), always, never")
	f.BoolVar(&cfg.findKnee, "find-knee", false, "search the highest open-loop rate meeting the knee targets (several runs; see above)")
	f.DurationVar(&cfg.knee.ackP99, "knee-ack-p99", 100*time.Millisecond, "--find-knee: the push-ack p99 a run must stay under")
	f.DurationVar(&cfg.knee.deliveryP99, "knee-delivery-p99", 250*time.Millisecond, "--find-knee: the feed-delivery p99 a run must stay under")
	f.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write the generator's own CPU profile (go tool pprof) to this file, over every run")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if !cmd.Flags().Changed("url") {
			if v := a.getenv("SYNCCTL_SYNC_URL"); v != "" {
				cfg.urls = strings.Split(v, ",")
			}
		}
		if err := cfg.validate(); err != nil {
			return err
		}
		file, err := os.Open(cfg.clientsFile)
		if err != nil {
			return failf(exitNotFound, "--clients: %v", err)
		}
		clients, err := readBenchClients(file, cfg.clientsFile)
		file.Close()
		if err != nil {
			return err
		}
		if len(clients) < cfg.connections {
			return failf(exitUsage, "--connections %d: %s holds only %d clients (syncctl token issue --count %d)", cfg.connections, cfg.clientsFile, len(clients), cfg.connections)
		}
		stop, err := startCPUProfile(cfg.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
		if cfg.findKnee {
			if cfg.rate == 0 {
				cfg.rate = 1
			}
			knee, err := a.findKnee(cmd.Context(), cfg, clients, cfg.knee)
			if err != nil {
				return err
			}
			if a.json {
				return printJSON(a.stdout, knee)
			}
			return knee.print(a.stdout)
		}
		rep, err := a.bench(cmd.Context(), cfg, clients)
		if err != nil {
			return err
		}
		if a.json {
			return printJSON(a.stdout, rep)
		}
		return rep.print(a.stdout)
	}
	return cmd
}

// validate checks every flag against its bound.
func (c *benchConfig) validate() error {
	bad := func(format string, args ...any) error {
		return failf(exitUsage, format+" (see syncctl bench --help)", args...)
	}
	switch {
	case c.clientsFile == "":
		return bad("--clients is required: a file of \"CLIENT_ID TOKEN\" lines (syncctl token issue --count N --tenant T --client-id dev --read '*' --write '*' > FILE)")
	case c.connections < 1 || c.connections > benchMaxConnections:
		return bad("--connections %d outside 1..%d", c.connections, benchMaxConnections)
	case c.pushShare < 0 || c.pushShare > 1:
		return bad("--push-share %g outside 0..1", c.pushShare)
	case c.subscribeShare < 0 || c.subscribeShare > 1:
		return bad("--subscribe-share %g outside 0..1", c.subscribeShare)
	case c.rate < 0 || c.rate > benchMaxRate:
		return bad("--rate %g outside 0..%g", c.rate, benchMaxRate)
	case c.inflight < 1 || c.inflight > benchMaxInflight:
		return bad("--inflight %d outside 1..%d", c.inflight, benchMaxInflight)
	case c.batch < 1 || c.batch > syncproto.MaxBatch:
		return bad("--batch %d outside 1..%d", c.batch, syncproto.MaxBatch)
	case c.valueSize < 8 || c.valueSize > syncproto.MaxPayloadBytes:
		return bad("--value-size %d outside 8..%d", c.valueSize, syncproto.MaxPayloadBytes)
	case c.keys < 1 || c.keys > benchMaxKeys:
		return bad("--keys %d outside 1..%d", c.keys, benchMaxKeys)
	case c.preload < 0 || c.preload > benchMaxPreload:
		return bad("--preload %d outside 0..%d", c.preload, benchMaxPreload)
	case c.storm < 0 || c.storm > c.connections:
		return bad("--snapshot-storm %d outside 0..--connections (%d)", c.storm, c.connections)
	case c.duration <= 0 || c.duration > benchMaxDuration:
		return bad("--duration %s outside (0, %s]", c.duration, benchMaxDuration)
	case c.drain < 0 || c.drain > benchMaxDrain:
		return bad("--drain %s outside 0..%s", c.drain, benchMaxDrain)
	case c.connectTimeout <= 0:
		return bad("--connect-timeout must be positive")
	case c.findKnee && (c.knee.ackP99 <= 0 || c.knee.deliveryP99 <= 0):
		return bad("--knee-ack-p99 and --knee-delivery-p99 must be positive")
	case c.findKnee && c.pushShare == 0:
		return bad("--find-knee needs pushers (--push-share above 0)")
	case c.readBuffer != 0 && (c.readBuffer < benchMinReadBuffer || c.readBuffer > benchMaxReadBuffer):
		return bad("--read-buffer %d outside %d..%d (or 0)", c.readBuffer, benchMinReadBuffer, benchMaxReadBuffer)
	case len(c.urls) == 0:
		return bad("--url: at least one syncd URL")
	}
	for _, m := range c.models {
		if err := syncproto.ValidateModel(m); err != nil {
			return bad("--models %q: %v", m, err)
		}
	}
	if len(c.models) == 0 {
		return bad("--models: at least one model")
	}
	for i, u := range c.urls {
		c.urls[i] = strings.TrimRight(strings.TrimSpace(u), "/")
		if _, err := websocketURL(c.urls[i]); err != nil {
			return err
		}
	}
	return nil
}

// bench runs the load and returns its report. It checks each node first
// with one client's hello, so an unreachable node, a URL that is not syncd
// or a refused token is a clear error before anything else connects.
func (a *app) bench(ctx context.Context, cfg benchConfig, clients []benchClient) (*benchReport, error) {
	for _, u := range cfg.urls {
		wsURL, _ := websocketURL(u)
		if err := preflight(ctx, u, wsURL, clients[0].token, clients[0].id, cfg.connectTimeout); err != nil {
			return nil, err
		}
	}
	r := &benchRun{cfg: cfg, value: benchValue(cfg.valueSize), dialer: benchDialer(cfg.readBuffer), deliveries: newDeliveries(time.Now())}
	rep := &benchReport{Config: cfg.view()}
	for _, u := range cfg.urls {
		rep.Servers = append(rep.Servers, serverView{URL: u, Before: scrape(ctx, u)})
	}
	line := a.newBenchLine(cfg.progress)
	defer line.end()

	// Connect. The run's sessions end with runCtx, whatever happens next.
	runCtx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		r.closeAll()
	}()
	if cfg.preload > 0 {
		if err := r.preload(runCtx, clients[0], func() { line.show("preloading %d/%d records", r.preloaded.Load(), cfg.preload) }); err != nil {
			return nil, err
		}
	}
	connected := 0
	var mu sync.Mutex
	start := time.Now()
	r.connectAll(runCtx, clients, func() {
		mu.Lock()
		connected++
		if connected%100 == 0 || connected == cfg.connections {
			line.show("connecting %d/%d  %s", connected, cfg.connections, time.Since(start).Round(time.Millisecond))
		}
		mu.Unlock()
	})
	rep.ConnectSeconds = time.Since(start).Seconds()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if conns, _ := r.live(); conns == 0 {
		return nil, failf(exitUnreachable, "no device connected (%s)", describeCounts(r.errors.snapshot()))
	}

	// Push, subscribe and storm for the duration.
	pushCtx, stopPush := context.WithTimeout(runCtx, cfg.duration)
	defer stopPush()
	var workers sync.WaitGroup
	nPush := int(float64(cfg.connections)*cfg.pushShare + 0.5)
	// Pushers are the last connections, so subscribers and pushers overlap
	// only when both shares together exceed 1.
	for i := cfg.connections - nPush; i < cfg.connections; i++ {
		c := r.conns[i]
		if !c.live.Load() {
			continue
		}
		workers.Add(1)
		go func() {
			defer workers.Done()
			r.pushLoop(pushCtx, c, uint64(i))
		}()
	}
	// The storm has a context of its own: ending the fetches that outlive
	// the drain must not end the sessions (runCtx) before they are
	// measured loaded.
	stormCtx, stopStorm := context.WithCancel(runCtx)
	defer stopStorm()
	var storm sync.WaitGroup
	r.storm(stormCtx, &storm)
	runStart := time.Now()
	ticker := time.NewTicker(time.Second)
	for pushCtx.Err() == nil {
		select {
		case <-pushCtx.Done():
		case <-ticker.C:
			el := time.Since(runStart)
			p := r.pushes.Load()
			line.show("%s/%s  conns %d  pushes %d (%.0f/s)  mutations %d  ack p99 %s  errors %d",
				el.Round(time.Second), cfg.duration, connected, p, float64(p)/el.Seconds(), r.mutations.Load(),
				r.ack.quantile(0.99).Round(100*time.Microsecond), sum(r.errors.snapshot()))
		}
	}
	ticker.Stop()
	elapsed := time.Since(runStart)
	line.show("settling: waiting for answers and subscribers (at most %s)", cfg.drain)
	drainEnd := time.Now().Add(cfg.drain)
	r.settle(runCtx, cfg.drain)
	conns, subs := r.live()
	workers.Wait()
	// Snapshots still being read get what is left of the drain.
	stormDone := make(chan struct{})
	go func() {
		storm.Wait()
		close(stormDone)
	}()
	select {
	case <-stormDone:
	case <-time.After(time.Until(drainEnd)):
	}
	stopStorm() // ends the fetches that outlive the drain
	<-stormDone
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	for i := range rep.Servers {
		rep.Servers[i].Loaded = scrape(ctx, rep.Servers[i].URL)
	}
	r.closeAll()
	for i := range rep.Servers {
		rep.Servers[i].After = settleScrape(ctx, rep.Servers[i].URL, rep.Servers[i].Before)
	}
	line.end()
	rep.fill(r, elapsed, conns, subs, nPush)
	return rep, nil
}

// settleScrape scrapes a node until its goroutines are back to what they
// were before the run (sessions end asynchronously), at most benchSettle.
func settleScrape(ctx context.Context, base string, before serverFigures) serverFigures {
	deadline := time.Now().Add(benchSettle)
	for {
		f := scrape(ctx, base)
		if f.Goroutines <= before.Goroutines || time.Now().After(deadline) || ctx.Err() != nil {
			return f
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sum(m map[string]int64) (n int64) {
	for _, v := range m {
		n += v
	}
	return n
}

// describeCounts lists counts by name, largest first.
func describeCounts(m map[string]int64) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int {
		if m[a] != m[b] {
			return int(m[b] - m[a])
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s: %d", k, m[k])
	}
	if len(parts) == 0 {
		return "no errors"
	}
	return strings.Join(parts, ", ")
}

// benchLine is the live progress line, redrawn in place on stderr.
type benchLine struct {
	w     io.Writer // nil: disabled
	mu    sync.Mutex
	drawn bool
}

func (a *app) newBenchLine(mode progressMode) *benchLine {
	l := &benchLine{}
	if mode == progressAlways || (mode == progressAuto && a.isTerminal(a.stderr)) {
		l.w = a.stderr
	}
	return l
}

func (l *benchLine) show(format string, args ...any) {
	if l.w == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "\r\033[K"+format, args...)
	l.drawn = true
}

func (l *benchLine) end() {
	if l.w == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.drawn {
		fmt.Fprintln(l.w)
		l.drawn = false
	}
}

// startCPUProfile starts the generator's CPU profile into path (nothing
// when path is empty) and returns what stops it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, failf(exitUsage, "--cpuprofile: %v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, failf(exitUsage, "--cpuprofile: %v", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
