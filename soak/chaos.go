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
	nodes   []*syncdProc // one, or a cluster's
	routes  *routes      // a cluster's NATS routes; nil with one node
	counts  *counts
	events  io.Writer
	start   time.Time
	slots   []slot
	network []FaultKind // network kinds on
	crashes []FaultKind // client crash kinds on
	servers []FaultKind // syncd kinds on (route cuts too)
	// baselines are each node's goroutine and file counts after its
	// newest start.
	baselines []checker.Sample
	// cutNode is the node whose routes are cut (-1 for none), until
	// cutUntil.
	cutNode  int
	cutUntil time.Time
	// firsts holds the planned first injection of every kind not yet
	// injected (see planFirsts).
	firsts map[FaultKind]time.Time
	// wipeLedger forgets every ledger decision (BreakLedgerAmnesia).
	wipeLedger func(context.Context) error
}

func newChaos(cfg *Config, clients []*clientProc, nodes []*syncdProc, rt *routes, c *counts, events io.Writer, start time.Time) *chaos {
	ch := &chaos{
		cfg: cfg, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5eed)), clients: clients, nodes: nodes, routes: rt, counts: c,
		events: events, start: start, slots: make([]slot, len(clients)), baselines: make([]checker.Sample, len(nodes)), cutNode: -1,
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
	for i, n := range ch.nodes {
		if err := n.exitedOnItsOwn(); err != nil {
			ch.counts.finding(err)
			if err := ch.startNode(ctx, i); err != nil {
				return err
			}
		}
	}
	if ch.cutNode >= 0 && now.After(ch.cutUntil) {
		ch.healCut()
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
	case k == FaultRouteCut:
		done = ch.cutRoutes(now)
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
	p, s, id := ch.clients[i].proxies, &ch.slots[i], ch.clients[i].cfg.Profile.ID
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
	p, id := ch.clients[i].proxies, ch.clients[i].cfg.Profile.ID
	before := p.cuts()
	p.CutAfter(faultproxy.Down, 0)
	deadline := time.Now().Add(3 * time.Second)
	for p.cuts() == before && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	p.SetMode(faultproxy.Refuse) // no reconnect, so no resend, before the wipe
	err := ch.wipeLedger(ctx)
	p.SetMode(faultproxy.Pass)
	ch.logf("%s ack lost (cut: %t), then the ledger was wiped", id, p.cuts() > before)
	return err
}

// endFault ends client i's timed network fault.
func (ch *chaos) endFault(i int) {
	p, s := ch.clients[i].proxies, &ch.slots[i]
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
		c.proxies.SetMode(faultproxy.Refuse)
		c.proxies.ResetAll()
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

// restartSyncd kills (SIGKILL) or stops (SIGTERM) syncd, or in a cluster
// one node, leaves it down for a moment, and starts it again on the same
// database and ports. A route cut in progress is healed first: a node
// killed while another is cut off would leave the cluster without quorum,
// and the restarted node could not become ready.
func (ch *chaos) restartSyncd(ctx context.Context, k FaultKind) error {
	if ch.cutNode >= 0 {
		ch.healCut()
	}
	i := ch.rng.IntN(len(ch.nodes))
	n := ch.nodes[i]
	at := time.Since(ch.start)
	if k == FaultSyncdCrash {
		ch.counts.finding(n.kill(ctx))
		ch.counts.mark(at, "kill")
	} else {
		ch.counts.finding(n.terminate(ctx))
		ch.counts.mark(at, "term")
	}
	ch.counts.fault(k)
	down := ch.between(200*time.Millisecond, 3*time.Second)
	ch.logf("%s %s; down for %v", n.name, k, down)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	return ch.startNode(ctx, i)
}

// startAll starts every node: launched together, since a cluster's nodes
// each wait for the others' quorum, each then baselined.
func (ch *chaos) startAll(ctx context.Context) error {
	ch.refuse(-1)
	for _, n := range ch.nodes {
		if err := n.launch(); err != nil {
			return err
		}
	}
	for i := range ch.nodes {
		if err := ch.baseline(ctx, i); err != nil {
			return err
		}
	}
	ch.restoreModes(-1)
	return nil
}

// startNode starts node i with every client's proxy to it refusing, takes
// the baseline while no client can be connected to it, then restores each
// proxy's mode.
func (ch *chaos) startNode(ctx context.Context, i int) error {
	ch.refuse(i)
	if err := ch.nodes[i].launch(); err != nil {
		return err
	}
	if err := ch.baseline(ctx, i); err != nil {
		return err
	}
	ch.restoreModes(i)
	return nil
}

// baseline waits until launched node i is ready and records its baseline.
func (ch *chaos) baseline(ctx context.Context, i int) error {
	n := ch.nodes[i]
	if err := n.waitReady(ctx); err != nil {
		return err
	}
	baseline, files, err := n.sample(ctx)
	if err != nil {
		return err
	}
	ch.baselines[i] = baseline
	ch.logf("%s generation %d ready (baseline %d goroutines, %d open files, %d of the database: %s)", n.name, n.gen,
		baseline.Goroutines, baseline.FDs, baseline.DatabaseFDs, strings.Join(files, " "))
	return nil
}

// refuse sets every client's proxy to node i (every node when i < 0) to
// refuse; restoreModes gives them back the mode their faults call for.
func (ch *chaos) refuse(i int) {
	for _, c := range ch.clients {
		for j, p := range c.proxies.nodes {
			if i < 0 || i == j {
				p.SetMode(faultproxy.Refuse)
			}
		}
	}
}

func (ch *chaos) restoreModes(i int) {
	for k, c := range ch.clients {
		for j, p := range c.proxies.nodes {
			if i < 0 || i == j {
				p.SetMode(ch.modeOf(k))
			}
		}
	}
}

// cutRoutes cuts a random node off from the others for a while; false
// when a cut is already in progress.
func (ch *chaos) cutRoutes(now time.Time) bool {
	if ch.routes == nil || ch.cutNode >= 0 {
		return false
	}
	ch.cutNode = ch.rng.IntN(len(ch.nodes))
	d := ch.between(time.Second, 8*time.Second)
	ch.cutUntil = now.Add(d)
	ch.routes.cut(ch.cutNode)
	ch.counts.fault(FaultRouteCut)
	ch.counts.mark(time.Since(ch.start), "cut")
	ch.logf("%s cut off from the other nodes for %v", ch.nodes[ch.cutNode].name, d)
	return true
}

// healCut heals the route cut in progress.
func (ch *chaos) healCut() {
	ch.routes.heal(ch.cutNode)
	ch.logf("%s routes healed", ch.nodes[ch.cutNode].name)
	ch.cutNode = -1
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
	if ch.cutNode >= 0 {
		ch.healCut()
	}
	for i, n := range ch.nodes {
		if err := n.exitedOnItsOwn(); err != nil {
			ch.counts.finding(err)
		}
		if !n.running() {
			if err := ch.startNode(ctx, i); err != nil {
				return err
			}
		}
	}
	for i, c := range ch.clients {
		p := c.proxies
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
