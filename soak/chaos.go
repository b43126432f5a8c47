package soak

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/soak/checker"
	"github.com/syncd-dev/syncd/soak/faultproxy"
)

// chaosTick is the scheduler's step: each step draws every fault kind
// with probability tick/mean, so arrivals are close to a Poisson process.
const chaosTick = 50 * time.Millisecond

// counts are the run's fault and restart counts. They are written by the
// scheduler and read by the progress line and the report.
type counts struct {
	mu             sync.Mutex
	faults         map[FaultKind]int
	clientRestarts int
	health         []string // harness findings: unexpected exits, failed stops, race reports
	markers        []marker // syncd kills and restarts, for the plot
}

// marker is a moment worth drawing on the queue-depth plot.
type marker struct {
	at    time.Duration
	label string
}

func (c *counts) fault(k FaultKind) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults[k]++
}

func (c *counts) restart() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clientRestarts++
}

// finding records a harness finding; a repeat of the last one is dropped,
// so a process that keeps failing the same way is reported once.
func (c *counts) finding(err error) {
	if err == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.health); n > 0 && c.health[n-1] == err.Error() {
		return
	}
	c.health = append(c.health, err.Error())
}

func (c *counts) mark(at time.Duration, label string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.markers = append(c.markers, marker{at, label})
}

// snapshot copies the counts.
func (c *counts) snapshot() (faults map[FaultKind]int, restarts int, health []string, markers []marker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	faults = make(map[FaultKind]int, len(c.faults))
	for k, v := range c.faults {
		faults[k] = v
	}
	return faults, c.clientRestarts, append([]string(nil), c.health...), append([]marker(nil), c.markers...)
}

// flaps counts the network faults.
func flapsOf(faults map[FaultKind]int) int {
	n := 0
	for _, k := range NetworkFaults {
		n += faults[k]
	}
	return n
}

// slot is the scheduler's state of one client.
type slot struct {
	fault      FaultKind // the timed fault on its proxy, "" for none
	until      time.Time // when a timed network fault ends
	resetOnEnd bool      // a blackhole that ends with the path reset
	killAt     time.Time // offline-crash: when to kill it
	down       bool      // killed, waiting for restartAt
	restartAt  time.Time
}

// chaos is the fault scheduler. It owns the proxies' fault settings and the
// processes' lifecycles during the churn phase; all of it runs on the
// goroutine that calls run.
type chaos struct {
	cfg     *Config
	rng     *rand.Rand
	clients []*clientProc
	syncd   *syncdProc
	counts  *counts
	events  io.Writer
	start   time.Time
	slots   []slot
	network []FaultKind // network kinds on
	crashes []FaultKind // client crash kinds on
	servers []FaultKind // syncd kinds on
	// baseline is syncd's goroutine and file counts after its newest start.
	baseline checker.Sample
	// firsts holds the planned first injection of every kind not yet
	// injected (see planFirsts).
	firsts map[FaultKind]time.Time
	// wipeLedger forgets every ledger decision (BreakLedgerAmnesia).
	wipeLedger func(context.Context) error
}

func newChaos(cfg *Config, clients []*clientProc, s *syncdProc, c *counts, events io.Writer, start time.Time) *chaos {
	ch := &chaos{
		cfg: cfg, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5eed)), clients: clients, syncd: s, counts: c,
		events: events, start: start, slots: make([]slot, len(clients)),
	}
	for _, k := range cfg.Faults {
		switch {
		case k.network():
			ch.network = append(ch.network, k)
		case k == FaultClientCrash || k == FaultOfflineCrash:
			ch.crashes = append(ch.crashes, k)
		default:
			ch.servers = append(ch.servers, k)
		}
	}
	ch.planFirsts(cfg.Duration)
	return ch
}

func (ch *chaos) logf(format string, a ...any) {
	fmt.Fprintf(ch.events, "%9.3fs %s\n", time.Since(ch.start).Seconds(), fmt.Sprintf(format, a...))
}

// between returns a uniform duration in [lo, hi].
func (ch *chaos) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(ch.rng.Int64N(int64(hi-lo)+1))
}

// chance is true with probability tick/mean.
func (ch *chaos) chance(mean time.Duration) bool {
	return mean > 0 && ch.rng.Float64() < float64(chaosTick)/float64(mean)
}

// run injects faults until the deadline or ctx ends. It returns an error
// only when the run cannot go on (syncd does not restart).
func (ch *chaos) run(ctx context.Context, until time.Time) error {
	t := time.NewTicker(chaosTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		now := time.Now()
		if now.After(until) {
			return nil
		}
		if err := ch.step(ctx, now); err != nil {
			return err
		}
	}
}

func (ch *chaos) step(ctx context.Context, now time.Time) error {
	if err := ch.syncd.exitedOnItsOwn(); err != nil {
		ch.counts.finding(err)
		if err := ch.startSyncd(ctx); err != nil {
			return err
		}
	}
	for i, c := range ch.clients {
		s := &ch.slots[i]
		switch {
		case s.down:
			if now.After(s.restartAt) {
				ch.restartClient(i)
			}
		case !c.running():
			ch.counts.finding(c.exitedOnItsOwn())
			ch.restartClient(i)
		case !s.killAt.IsZero() && now.After(s.killAt):
			ch.kill(i, ch.between(100*time.Millisecond, time.Second))
		case s.fault != "" && s.fault != FaultOfflineCrash && now.After(s.until):
			ch.endFault(i)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(ch.firsts)) {
		if now.After(ch.firsts[k]) {
			if _, err := ch.inject(ctx, now, k); err != nil {
				return err
			}
		}
	}
	draws := []struct {
		kinds []FaultKind
		mean  time.Duration
	}{{ch.network, ch.cfg.FlapEvery}, {ch.crashes, ch.cfg.ClientCrashEvery}, {ch.servers, ch.cfg.SyncdCrashEvery}}
	for _, d := range draws {
		if len(d.kinds) > 0 && ch.chance(d.mean) {
			if _, err := ch.inject(ctx, now, d.kinds[ch.rng.IntN(len(d.kinds))]); err != nil {
				return err
			}
		}
	}
	return nil
}

// planFirsts schedules the first injection of every enabled kind at an
// evenly spaced moment (in a seeded order) within the first 70% of the
// churn, so every run covers every kind whatever the rates; later ones
// arrive at random.
func (ch *chaos) planFirsts(churn time.Duration) {
	kinds := slices.Clone(ch.cfg.Faults)
	ch.rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	ch.firsts = map[FaultKind]time.Time{}
	for i, k := range kinds {
		ch.firsts[k] = ch.start.Add(churn * 7 / 10 * time.Duration(i+1) / time.Duration(len(kinds)+1))
	}
}

// inject injects one fault of kind k; false when no client was free for
// it. Once k is injected its planned first injection is moot.
func (ch *chaos) inject(ctx context.Context, now time.Time, k FaultKind) (done bool, err error) {
	switch {
	case k.network():
		done, err = ch.flap(ctx, now, k)
	case k == FaultClientCrash || k == FaultOfflineCrash:
		done = ch.crashClient(now, k)
	default:
		done, err = true, ch.restartSyncd(ctx, k)
	}
	if done {
		delete(ch.firsts, k)
	}
	return done, err
}

// freeSlot picks a client with no fault in progress, or -1.
func (ch *chaos) freeSlot() int {
	var free []int
	for i, s := range ch.slots {
		if s.fault == "" && !s.down && s.killAt.IsZero() {
			free = append(free, i)
		}
	}
	if len(free) == 0 {
		return -1
	}
	return free[ch.rng.IntN(len(free))]
}

// flap injects network fault k on a free client's proxy.
func (ch *chaos) flap(ctx context.Context, now time.Time, k FaultKind) (bool, error) {
	i := ch.freeSlot()
	if i < 0 || (k == FaultAckLost && ch.cfg.Break == BreakLedgerAmnesia && !ch.clients[i].status().Connected) {
		return false, nil
	}
	p, s, id := ch.clients[i].proxy, &ch.slots[i], ch.clients[i].cfg.Profile.ID
	timed := func(lo, hi time.Duration) time.Duration {
		d := ch.between(lo, hi)
		s.fault, s.until = k, now.Add(d)
		return d
	}
	switch k {
	case FaultBlackhole:
		p.SetMode(faultproxy.Blackhole)
		d := timed(300*time.Millisecond, 4*time.Second)
		s.resetOnEnd = ch.rng.IntN(2) == 0
		ch.logf("%s blackhole for %v (reset at the end: %t)", id, d, s.resetOnEnd)
	case FaultOutage:
		p.SetMode(faultproxy.Refuse)
		p.ResetAll()
		ch.logf("%s outage for %v", id, timed(300*time.Millisecond, 4*time.Second))
	case FaultReset:
		ch.logf("%s reset: %d connections", id, p.ResetAll())
	case FaultDelay:
		up, down := ch.between(10*time.Millisecond, 500*time.Millisecond), ch.between(10*time.Millisecond, 500*time.Millisecond)
		p.SetDelay(up, down)
		ch.logf("%s delay up %v down %v for %v", id, up, down, timed(time.Second, 6*time.Second))
	case FaultThrottle:
		bps := 2048 + ch.rng.IntN(62*1024)
		p.SetThrottle(bps)
		ch.logf("%s throttle %d B/s for %v", id, bps, timed(time.Second, 6*time.Second))
	case FaultAckLost:
		if ch.cfg.Break == BreakLedgerAmnesia {
			if err := ch.ackLostWithAmnesia(ctx, i); err != nil {
				return false, err
			}
		} else {
			p.CutAfter(faultproxy.Down, 0)
			ch.logf("%s ack lost: the next server byte resets", id)
		}
	case FaultCutNext:
		dir, n := faultproxy.Direction(ch.rng.IntN(2)), ch.rng.Int64N(4097)
		p.CutNextAfter(dir, n)
		ch.logf("%s next connection cut after %d bytes %s", id, n, dir)
	case FaultCutUp:
		n := ch.rng.Int64N(2049)
		p.CutAfter(faultproxy.Up, n)
		ch.logf("%s live connections cut after %d more bytes up", id, n)
	}
	ch.counts.fault(k)
	return true, nil
}

// ackLostWithAmnesia loses an acknowledgement and, before the client can
// reconnect and resend, wipes the ledger: the broken ledger of
// BreakLedgerAmnesia. The client is connected and writing, so the next
// bytes towards it are (mostly) the answer to a push syncd committed.
func (ch *chaos) ackLostWithAmnesia(ctx context.Context, i int) error {
	p, id := ch.clients[i].proxy, ch.clients[i].cfg.Profile.ID
	before := p.Stats().Cuts
	p.CutAfter(faultproxy.Down, 0)
	deadline := time.Now().Add(3 * time.Second)
	for p.Stats().Cuts == before && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	p.SetMode(faultproxy.Refuse) // no reconnect, so no resend, before the wipe
	err := ch.wipeLedger(ctx)
	p.SetMode(faultproxy.Pass)
	ch.logf("%s ack lost (cut: %t), then the ledger was wiped", id, p.Stats().Cuts > before)
	return err
}

// endFault ends client i's timed network fault.
func (ch *chaos) endFault(i int) {
	p, s := ch.clients[i].proxy, &ch.slots[i]
	switch s.fault {
	case FaultBlackhole:
		p.SetMode(faultproxy.Pass)
		if s.resetOnEnd {
			p.ResetAll()
		}
	case FaultOutage, FaultOfflineCrash:
		p.SetMode(faultproxy.Pass)
	case FaultDelay:
		p.SetDelay(0, 0)
	case FaultThrottle:
		p.SetThrottle(0)
	}
	s.fault, s.resetOnEnd = "", false
}

// crashClient kills a free client: at once (client-crash), or after
// cutting it off and letting it queue writes for a while (offline-crash).
func (ch *chaos) crashClient(now time.Time, k FaultKind) bool {
	i := ch.freeSlot()
	if i < 0 {
		return false
	}
	s, c := &ch.slots[i], ch.clients[i]
	if k == FaultOfflineCrash {
		c.proxy.SetMode(faultproxy.Refuse)
		c.proxy.ResetAll()
		s.fault, s.killAt = FaultOfflineCrash, now.Add(ch.between(500*time.Millisecond, 2500*time.Millisecond))
		ch.logf("%s cut off; SIGKILL at %v", c.cfg.Profile.ID, s.killAt.Sub(ch.start).Round(time.Millisecond))
	} else {
		ch.kill(i, ch.between(100*time.Millisecond, 2*time.Second))
	}
	ch.counts.fault(k)
	return true
}

// kill SIGKILLs client i and schedules its restart after pause.
func (ch *chaos) kill(i int, pause time.Duration) {
	s, c := &ch.slots[i], ch.clients[i]
	ch.counts.finding(c.kill())
	s.down, s.killAt, s.restartAt = true, time.Time{}, time.Now().Add(pause)
	ch.logf("%s SIGKILL (pending %d); restart in %v", c.cfg.Profile.ID, c.status().Pending, pause)
}

// restartClient starts client i's next incarnation and ends an
// offline-crash's outage.
func (ch *chaos) restartClient(i int) {
	s, c := &ch.slots[i], ch.clients[i]
	s.down = false
	if s.fault == FaultOfflineCrash {
		ch.endFault(i)
	}
	if err := c.start(); err != nil {
		ch.counts.finding(err)
		return
	}
	ch.counts.restart()
	ch.logf("%s restarted (incarnation %d)", c.cfg.Profile.ID, c.cfg.Incarnation)
}

// restartSyncd kills (SIGKILL) or stops (SIGTERM) syncd, leaves it down for
// a moment, and starts it again on the same database and ports.
func (ch *chaos) restartSyncd(ctx context.Context, k FaultKind) error {
	at := time.Since(ch.start)
	if k == FaultSyncdCrash {
		ch.counts.finding(ch.syncd.kill(ctx))
		ch.counts.mark(at, "kill")
	} else {
		ch.counts.finding(ch.syncd.terminate(ctx))
		ch.counts.mark(at, "term")
	}
	ch.counts.fault(k)
	down := ch.between(200*time.Millisecond, 3*time.Second)
	ch.logf("syncd %s; down for %v", k, down)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	return ch.startSyncd(ctx)
}

// startSyncd starts syncd with every proxy refusing, takes the baseline
// while no client can be connected, then restores each proxy's mode.
func (ch *chaos) startSyncd(ctx context.Context) error {
	for _, c := range ch.clients {
		c.proxy.SetMode(faultproxy.Refuse)
	}
	if err := ch.syncd.start(ctx); err != nil {
		return err
	}
	baseline, files, err := ch.syncd.sample(ctx)
	if err != nil {
		return err
	}
	ch.baseline = baseline
	for i, c := range ch.clients {
		c.proxy.SetMode(ch.modeOf(i))
	}
	ch.logf("syncd generation %d ready (baseline %d goroutines, %d open files, %d of the database: %s)", ch.syncd.gen,
		baseline.Goroutines, baseline.FDs, baseline.DatabaseFDs, strings.Join(files, " "))
	return nil
}

// modeOf is the proxy mode client i's faults call for.
func (ch *chaos) modeOf(i int) faultproxy.Mode {
	switch ch.slots[i].fault {
	case FaultBlackhole:
		return faultproxy.Blackhole
	case FaultOutage, FaultOfflineCrash:
		return faultproxy.Refuse
	}
	return faultproxy.Pass
}

// calm ends every fault, restarts every client that is down, and makes
// sure syncd runs: the start of quiescence. Live connections are reset
// once, so none stays silent from a blackhole.
func (ch *chaos) calm(ctx context.Context) error {
	if err := ch.syncd.exitedOnItsOwn(); err != nil {
		ch.counts.finding(err)
	}
	if !ch.syncd.running() {
		if err := ch.startSyncd(ctx); err != nil {
			return err
		}
	}
	for i, c := range ch.clients {
		p := c.proxy
		p.SetMode(faultproxy.Pass)
		p.SetDelay(0, 0)
		p.SetThrottle(0)
		p.ClearCuts()
		p.ResetAll()
		ch.slots[i] = slot{}
		if !c.running() {
			ch.counts.finding(c.exitedOnItsOwn())
			if err := c.start(); err != nil {
				return err
			}
			ch.counts.restart()
		}
	}
	ch.logf("faults stopped; quiescing")
	return nil
}
