package synccore

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/syncd-dev/syncd/client/reconnect"
	"github.com/syncd-dev/syncd/internal/race"
	"github.com/syncd-dev/syncd/ledger"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

var (
	simSeeds = flag.Int("sim.seeds", 10000, "how many seeded schedules TestSimulation runs")
	simSeed  = flag.Uint64("sim.seed", 0, "run only this schedule (the replay of a failure)")
	simTrace = flag.Bool("sim.trace", false, "print every input and action of the schedules run")
)

// TestSimulation runs seeded schedules of several cores against the
// server's decision code (replication.Admit, replication.Memory) over a
// simulated network and clock (frames dropped with cut connections,
// reordered, duplicated; devices crashed and upgraded to builds writing a
// newer value version; the server crashed, compacted, restored from a
// backup under a new database id, and restarted accepting another window
// of value versions), and checks the invariants after each.
func TestSimulation(t *testing.T) {
	first, n := uint64(1), uint64(*simSeeds)
	if race.Enabled && n > raceSeeds {
		n = raceSeeds
	}
	if *simSeed != 0 {
		first, n = *simSeed, 1
	}
	start := time.Now()
	restored := 0
	for seed := first; seed < first+n; seed++ {
		restores, err := runSchedule(seed, faults{})
		if err != nil {
			t.Fatalf("seed %d: %v\nreplay: go test ./client/synccore -run 'TestSimulation$' -count=1 -v -sim.seed=%d", seed, err, seed)
		}
		if restores > 0 {
			restored++
		}
	}
	t.Logf("%d schedules (seeds %d..%d) passed every invariant in %s; %d of them restored the server from a backup", n, first, first+n-1, time.Since(start).Round(time.Millisecond), restored)
	st := scopeStats
	t.Logf("partial sync: %d rows moved between values, %d evict entries, %d value evictions applied, %d backfill pages, %d membership writes, %d requests changed, %d token changes, %d writes dead-lettered forbidden_scope",
		st.moves, st.evictEntries, st.valueEvictions, st.backfillPages, st.shares, st.rescopes, st.tokenChanges, st.forbidden)
}

// TestSimulationCatchesBrokenComponents runs the same schedules with a
// component deliberately broken, and asserts the checker notices within
// simControlSeeds seeds: a checker that passes these is checking nothing.
func TestSimulationCatchesBrokenComponents(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    faults
	}{
		{"queue forgets attempts", faults{queueForgetsAttempts: true}},
		{"ledger forgets decisions", faults{ledgerForgets: true}},
		{"core skips a result", faults{coreSkipsResult: true}},
		{"restore keeps the database id", faults{restoreKeepsID: true}},
		{"core sends a paused model", faults{coreIgnoresPause: true}},
		{"server forgets to evict a moved row", faults{serverForgetsEvict: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= simControlSeeds; seed++ {
				if _, err := runSchedule(seed, tc.f); err != nil {
					t.Logf("caught at seed %d: %v", seed, err)
					return
				}
			}
			t.Fatalf("%d schedules with %s passed the checker", simControlSeeds, tc.name)
		})
	}
}

// simControlSeeds bounds the schedules a negative control may take to be
// caught. The rarest (a paused model sent) needs a refused value version
// and a later write of that model on an ordered connection, which about
// one schedule in a few hundred makes.
const simControlSeeds = 2000

// faults are the deliberately broken components of a negative control.
type faults struct {
	queueForgetsAttempts bool // SetAttempts does nothing
	ledgerForgets        bool // the server's ledger evicts every decision at once
	coreSkipsResult      bool // the driver drops the settle of some writes
	restoreKeepsID       bool // a restored server keeps its database id (a restore by plain copy)
	coreIgnoresPause     bool // the device reads needs_upgrade as another rejection (charged, no pause)
	serverForgetsEvict   bool // a row moved out of a reader's values reaches it as nothing, not as an evict entry
}

// raceSeeds bounds the schedules of one run under the race detector,
// which slows the simulation about tenfold and finds nothing in it (the
// core and the simulation run on one goroutine). `make test` also runs
// the full -sim.seeds without it.
const raceSeeds = 200

const (
	simTenant      = "t"
	simMaxAttempts = 3
	simMaxSkew     = time.Minute
	chaosSteps     = 120
	quiesceSteps   = 4000
	// simRetryBase and simRetryMax are the client's defaults
	// (client.DefaultRetryInterval, DefaultMaxRetryInterval), which its
	// driver gives its backoff.
	simRetryBase = 2 * time.Second
	simRetryMax  = time.Minute
)

var simPolicies = replication.Config{"tasks": syncproto.PolicyLWW, "members": syncproto.PolicyLWW, "notes": syncproto.PolicyLWW, "docs": syncproto.PolicyOptimistic, "flaky": syncproto.PolicyLWW, "shapes": syncproto.PolicyLWW}

// simMaxValueVersion is the newest value version of the "shapes" model a
// device build writes; the server accepts a window of 1..it.
const simMaxValueVersion = 3

// msg is one frame on a simulated connection.
type msg struct {
	push     uint64
	muts     []syncproto.Mutation // client to server: push
	after    uint64               // subscribe
	resync   bool                 // client to server: snapshot request
	subscr   bool
	results  []syncproto.Result // server to client
	err      *syncproto.Error
	changes  *Changes
	snapshot *Snapshot
	records  []syncproto.Change // with snapshot: the records at its head
	dbID     int                // with snapshot: the database it was read from
	feedLost bool
	// partial sync (sim_scopes_test.go)
	sub      uint64    // the subscription a subscribe starts, or a frame belongs to
	sub0     Subscribe // with subscr: the request
	backfill *Backfill
	at       uint64 // with backfill: the seq it was read at
}

type conn struct {
	id       int
	client   *simClient
	up, down []msg // client to server, server to client
	reorder  bool
	dup      bool
	// server side
	subscribed bool
	sent       uint64
	paused     bool // the server refused a "shapes" write for its version on this connection
	sess       *session
}

// simClient is one device: durable state that survives a crash, and a
// core and connection that do not.
type simClient struct {
	id    string
	skew  time.Duration
	clock *syncproto.Clock
	// durable
	queue    []Item
	nextID   uint64
	dead     map[string]string // op id -> reason
	outcomes map[string][]Verdict
	replica  map[replication.RecordKey]syncproto.Change
	cursor   uint64
	dbID     int                // the database the replica was synced from
	build    uint64             // the value version of "shapes" this device's build writes
	want     syncproto.ScopeSet // the app's request
	scopes   Scopes             // have and resume, as the driver stores them
	subs     uint64             // subscriptions made, for their ids
	subID    uint64             // the live subscription on conn
	// volatile
	core  *Core
	conn  *conn
	timer uint64    // armed timer, 0 when none
	due   time.Time // when it fires: the wait the client's backoff chose
	// resyncing: a Resync was asked on this connection; its snapshot
	// answer (one per request, as an HTTP GET) replaces the replica.
	resyncing bool
}

type sim struct {
	rng     *rand.Rand
	f       faults
	now     time.Time
	srv     *replication.Memory
	clients []*simClient
	conns   []*conn
	nextCon int
	chaos   bool
	// backoff is the client's one backoff (its defaults), drawing its
	// jitter from the schedule's rng: every retry timer waits what it says.
	backoff reconnect.Backoff
	// what the server did, observed from every Apply's effects
	applied map[string][]replication.Entry
	decided map[string]syncproto.Result
	writes  map[string]syncproto.Mutation // every write an app made
	// history is every change of the server's state since it started
	// empty, in order, for a restore to replay up to its backup.
	history  []serverEvent
	backup   *serverBackup
	dbID     int // the server database's identity; a restore gives a new one
	restores int
	lost     map[string]bool // ops a restore took away after the server applied them
	// versions are the "shapes" value versions the server accepts;
	// waiting holds the ops it refused for their version and that were
	// not sent again since, and made when (their index in writes' order).
	versions []uint64
	waiting  map[string]bool
	made     map[string]int
	// partial sync: what the server derives from its log (noteApplied),
	// and the operator's token grants by device
	scopeCur  map[replication.RecordKey]string
	scopeHist map[uint64]scopeEntry
	memberOf  map[replication.RecordKey]string
	members   []memberChange
	tokens    map[string][]string
}

// serverEvent is one change of the server's state: a push applied at a
// time, or a compaction.
type serverEvent struct {
	now      time.Time
	clientID string
	muts     []syncproto.Mutation
	compact  int // with muts nil: CompactTo(compact)
	// refused holds, by the index of muts, the edge's value-version
	// refusals (decided when the push arrived, replayed as they were).
	refused map[int]*syncproto.Error
	// grants are the writer's token grants when it pushed (replayed as
	// they were, whatever the operator changed since).
	grants []string
}

// serverBackup is the server as a backup taken at one point holds it: the
// events up to it, and what the checker had observed by then.
type serverBackup struct {
	events  int
	applied map[string][]replication.Entry
	decided map[string]syncproto.Result
}

// runSchedule runs one seeded schedule and checks it; it reports how many
// times the server was restored from a backup.
func runSchedule(seed uint64, f faults) (restores int, err error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := &sim{rng: rng, f: f, now: time.UnixMilli(1_700_000_000_000).UTC(), chaos: true,
		backoff: reconnect.Backoff{Base: simRetryBase, Cap: simRetryMax, Rand: rng.Int64N},
		applied: map[string][]replication.Entry{}, decided: map[string]syncproto.Result{}, writes: map[string]syncproto.Mutation{}, lost: map[string]bool{},
		versions: []uint64{1}, waiting: map[string]bool{}, made: map[string]int{}, tokens: map[string][]string{}}
	if err := s.newServer(); err != nil {
		return 0, err
	}
	for i := range 2 + rng.IntN(3) {
		c := &simClient{id: fmt.Sprintf("c%d", i), skew: time.Duration(rng.IntN(40)-20) * time.Second,
			dead: map[string]string{}, outcomes: map[string][]Verdict{}, replica: map[replication.RecordKey]syncproto.Change{}, build: 1}
		c.clock = syncproto.NewClock(c.id, func() time.Time { return s.now.Add(c.skew) })
		c.core = New(Config{MaxBatch: 1 + rng.IntN(4), InFlight: 1 + rng.IntN(3), MaxAttempts: simMaxAttempts}, 0)
		c.want = syncproto.ScopeSet{simScope: {syncproto.AllValues}}
		c.scopes = Scopes{}.Clone()
		s.tokens[c.id] = simScopeValues[:rng.IntN(len(simScopeValues)+1)]
		s.clients = append(s.clients, c)
	}
	for range chaosSteps {
		if err := s.chaosStep(); err != nil {
			return s.restores, err
		}
	}
	s.chaos = false
	// The operator ends up accepting every version in the field: paused
	// models resume on the reconnect after the restart.
	s.versions = []uint64{1, 2, 3}
	for _, c := range s.clients {
		s.cut(c)
	}
	for _, c := range s.clients {
		if c.conn == nil {
			if err := s.connect(c); err != nil {
				return s.restores, err
			}
		}
	}
	for range quiesceSteps {
		progressed, err := s.quietStep()
		if err != nil {
			return s.restores, err
		}
		if !progressed {
			return s.restores, s.check()
		}
	}
	return s.restores, fmt.Errorf("not quiescent after %d steps: %s", quiesceSteps, s.pending())
}

func (s *sim) newServer() error {
	opts := ledger.Options{Now: func() time.Time { return s.now }}
	if s.f.ledgerForgets {
		opts.MaxEntries = 1
	}
	m, err := replication.NewMemory(replication.MemoryOptions{Ledger: opts})
	if err != nil {
		return err
	}
	m.DeclareScopes(simDeclared())
	s.srv = m
	s.resetScopes()
	return nil
}

func (s *sim) chaosStep() error {
	s.now = s.now.Add(time.Duration(s.rng.IntN(50)) * time.Millisecond)
	c := s.clients[s.rng.IntN(len(s.clients))]
	switch r := s.rng.IntN(100); {
	case r < 25:
		return s.write(c)
	case r < 65:
		return s.deliverAny()
	case r < 72:
		if c.conn == nil {
			return s.connect(c)
		}
		s.cut(c)
	case r < 77:
		if c.timer != 0 {
			return s.fire(c)
		}
	case r < 80:
		s.crash(c)
	case r < 81:
		for _, c := range s.clients {
			s.cut(c) // the server crashes: its committed state survives
		}
	case r < 83:
		return s.replay(s.record(serverEvent{compact: s.rng.IntN(5)}))
	case r < 84:
		if s.backup == nil {
			s.backup = &serverBackup{events: len(s.history), applied: maps.Clone(s.applied), decided: maps.Clone(s.decided)}
		}
	case r < 85:
		if s.backup != nil {
			return s.restore()
		}
	case r < 87:
		s.restartWithVersions()
	case r < 88:
		c.build = min(c.build+1, simMaxValueVersion) // the app is upgraded
	case r < 91:
		return s.rescope(c)
	case r < 94:
		return s.share(c)
	case r < 95:
		s.changeToken(c)
	default:
		if c.conn == nil {
			return s.connect(c)
		}
		return s.deliverAny()
	}
	return nil
}

// quietStep delivers a frame or fires a timer; false when nothing is left.
func (s *sim) quietStep() (bool, error) {
	for _, cn := range s.conns {
		if len(cn.up) > 0 || len(cn.down) > 0 {
			return true, s.deliver(cn)
		}
	}
	for _, c := range s.clients {
		if c.timer != 0 {
			return true, s.fire(c)
		}
	}
	return false, nil
}

// restartWithVersions restarts the server accepting another window of
// "shapes" value versions (older ones upcast, newer ones not yet known):
// every connection is cut, and welcome announces the window.
func (s *sim) restartWithVersions() {
	lo := 1 + uint64(s.rng.IntN(simMaxValueVersion))
	hi := lo + uint64(s.rng.IntN(int(simMaxValueVersion-lo+1)))
	s.versions = nil
	for v := lo; v <= hi; v++ {
		s.versions = append(s.versions, v)
	}
	for _, c := range s.clients {
		s.cut(c)
	}
}

func (s *sim) pending() string {
	out := ""
	for _, c := range s.clients {
		out += fmt.Sprintf("[%s queue %d timer %d state %s] ", c.id, len(c.queue), c.timer, c.core.Status().State)
	}
	return out
}

// write is the app making a write: stamped, queued durably, then the core
// is told.
func (s *sim) write(c *simClient) error {
	n := len(s.writes)
	id := uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "%s-%d", c.id, n)).String()
	key := string(rune('a' + s.rng.IntN(3)))
	m := syncproto.Mutation{OpID: id, Key: key, Op: syncproto.OpPut, HLC: c.clock.Now()}
	switch r := s.rng.IntN(20); {
	case r < 7:
		m.Model = "notes"
	case r < 11:
		m.Model = "tasks"
	case r < 13:
		m.Model = "shapes"
		m.ValueVersion = c.build
	case r < 17:
		m.Model = "docs"
		if s.rng.IntN(8) > 0 { // else: no base version, refused for good
			base := c.replica[replication.RecordKey{Model: "docs", Key: key}].Version
			m.BaseVersion = &base
		}
	case r < 19:
		m.Model = "ro"
	default:
		m.Model = "flaky"
	}
	if s.rng.IntN(5) == 0 {
		m.Op = syncproto.OpDelete
	} else {
		m.Value = json.RawMessage(fmt.Sprintf(`{"w":%d,"p":%q}`, n, simScopeValues[s.rng.IntN(len(simScopeValues))]))
	}
	s.writes[id] = m
	s.made[id] = n
	c.nextID++
	c.queue = append(c.queue, Item{ID: c.nextID, Mutation: m})
	return s.feed(c, Enqueued{})
}

func (s *sim) connect(c *simClient) error {
	s.nextCon++
	cn := &conn{id: s.nextCon, client: c}
	if s.chaos {
		cn.reorder, cn.dup = s.rng.IntN(3) == 0, s.rng.IntN(3) == 0
	}
	c.conn = cn
	s.conns = append(s.conns, cn)
	// hello/welcome: the server checks the replica's cursor.
	bounds, _ := s.srv.Bounds(context.Background(), replication.Scope{Tenant: simTenant, AllModels: true}) // Memory's never fails
	resync := bounds.Check(c.cursor) != nil || c.dbID != s.dbID
	c.subID = 0
	sc := c.scopes.Clone()
	sc.Want = cloneSet(c.want)
	return s.feed(c, Welcomed{MaxBatch: 3, Cursor: c.cursor, Resync: resync, ValueVersions: map[string][]uint64{"shapes": slices.Clone(s.versions)}, Scopes: sc})
}

func (s *sim) cut(c *simClient) {
	if c.conn == nil {
		return
	}
	s.conns = slices.DeleteFunc(s.conns, func(x *conn) bool { return x == c.conn })
	c.conn = nil
	c.resyncing = false
	if err := s.feed(c, Disconnected{}); err != nil {
		panic(err) // Disconnected causes no I/O
	}
}

// crash loses the core, the connection and the armed timer; the queue,
// outcomes and replica are durable.
func (s *sim) crash(c *simClient) {
	s.cut(c)
	c.timer = 0
	cfg := c.core.cfg
	cfg.Scopes = c.scopes.Clone()
	cfg.Scopes.Want = cloneSet(c.want)
	c.core = New(cfg, c.cursor)
}

// fire moves the clock to the armed timer's due time, if it is not past
// it, and fires it.
func (s *sim) fire(c *simClient) error {
	t := c.timer
	c.timer = 0
	if s.now.Before(c.due) {
		s.now = c.due
	}
	return s.feed(c, TimerFired{Timer: t})
}

func (s *sim) deliverAny() error {
	var live []*conn
	for _, cn := range s.conns {
		if len(cn.up) > 0 || len(cn.down) > 0 {
			live = append(live, cn)
		}
	}
	if len(live) == 0 {
		return nil
	}
	return s.deliver(live[s.rng.IntN(len(live))])
}

// deliver hands over one frame of cn, in order unless cn reorders, and
// keeps a copy when cn duplicates.
func (s *sim) deliver(cn *conn) error {
	q, toServer := &cn.down, false
	if len(cn.up) > 0 && (len(cn.down) == 0 || s.rng.IntN(2) == 0) {
		q, toServer = &cn.up, true
	}
	i := 0
	if cn.reorder && s.chaos {
		i = s.rng.IntN(len(*q))
	}
	// A websocket keeps order: the simulation reorders and repeats frames
	// the protocol makes safe to, never past a barrier (a subscribe, a
	// backfill page, evictions), whose order is the contract.
	for j := range i {
		if barrier((*q)[j]) {
			i = j
			break
		}
	}
	m := (*q)[i]
	if !(cn.dup && s.chaos && s.rng.IntN(4) == 0) || barrier(m) {
		*q = slices.Delete(*q, i, i+1)
	}
	if toServer {
		return s.serve(cn, m)
	}
	c := cn.client
	switch {
	case m.results != nil:
		if s.f.coreIgnoresPause {
			m.results = slices.Clone(m.results)
			for i := range m.results {
				if m.results[i].Code == syncproto.CodeNeedsUpgrade {
					m.results[i].Code = syncproto.CodeBadRequest // as a build that does not know the code
				}
			}
		}
		return s.feed(c, Answered{Push: m.push, Results: m.results})
	case m.err != nil:
		return s.feed(c, PushRefused{Push: m.push, Err: m.err})
	case m.changes != nil:
		if m.sub != c.subID {
			return nil // a page of a subscription replaced since
		}
		return s.feed(c, *m.changes)
	case m.backfill != nil:
		if m.sub != c.subID {
			return nil
		}
		return s.feed(c, *m.backfill)
	case m.snapshot != nil:
		// The driver's Resync: replace the replica, then tell the core.
		if !c.resyncing {
			return nil // a duplicate: the driver's GET has one answer
		}
		c.resyncing = false
		clear(c.replica)
		for _, e := range m.records {
			c.replica[replication.RecordKey{Model: e.Model, Key: e.Key}] = e
		}
		c.cursor, c.dbID = m.snapshot.Head, m.dbID
		c.scopes = Scopes{Have: keepWanted(c)}.Clone()
		return s.feed(c, Snapshot{Head: m.snapshot.Head, Have: cloneSet(c.scopes.Have)})
	case m.feedLost:
		return s.feed(c, FeedLost{})
	}
	return fmt.Errorf("empty frame")
}

// serve is the server acting on one frame from cn.
func (s *sim) serve(cn *conn, m msg) error {
	switch {
	case m.resync:
		head, recs := s.srv.Snapshot(replication.Scope{Tenant: simTenant, AllModels: true})
		m := msg{snapshot: &Snapshot{Head: head}, dbID: s.dbID}
		grants := s.grants(cn.client.id, head)
		for _, r := range recs {
			if simScoped(r.Model) && !grants.Has(simScope, s.scopeCur[replication.RecordKey{Model: r.Model, Key: r.Key}]) {
				continue // a snapshot reads every granted value
			}
			m.records = append(m.records, s.change(r.Seq, r))
		}
		cn.down = append(cn.down, m)
		return nil
	case m.subscr:
		s.startSession(cn, m)
		return s.publish()
	}
	for _, m := range m.muts {
		delete(s.waiting, m.OpID) // sent again
	}
	if s.chaos && s.rng.IntN(10) == 0 {
		cn.down = append(cn.down, msg{push: m.push, err: &syncproto.Error{Code: syncproto.CodeServerBusy, Retryable: true, RetryAfterMS: 500}})
		return nil
	}
	ev := serverEvent{now: s.now, clientID: cn.client.id, muts: m.muts, refused: s.versionRefusals(cn, m.muts), grants: slices.Clone(s.tokens[cn.client.id])}
	fx, err := s.apply(s.record(ev))
	if err != nil {
		return err
	}
	if err := s.checkOrder(cn, m.muts, fx); err != nil {
		return err
	}
	for _, e := range fx.Entries {
		s.applied[e.OpID] = append(s.applied[e.OpID], e)
	}
	for _, r := range fx.Results {
		if r.Status == syncproto.StatusApplied || r.Status == syncproto.StatusSuperseded || r.Status == syncproto.StatusConflict {
			s.decided[r.OpID] = r
			delete(s.lost, r.OpID) // decided again, in this history
		}
	}
	cn.down = append(cn.down, msg{push: m.push, results: fx.Results})
	return s.publish()
}

// versionRefusals is the edge's value-version check of a push on cn, as
// syncd's server makes it: a "shapes" write of a version outside the
// window, and every later one on a connection that had one, is refused
// needs_upgrade naming the window.
func (s *sim) versionRefusals(cn *conn, muts []syncproto.Mutation) map[int]*syncproto.Error {
	var out map[int]*syncproto.Error
	for i := range muts {
		m := &muts[i]
		if m.Model != "shapes" {
			continue
		}
		if !cn.paused && syncproto.Accepts(s.versions, m.EffectiveValueVersion()) {
			continue
		}
		cn.paused = true
		if out == nil {
			out = map[int]*syncproto.Error{}
		}
		out[i] = syncproto.Errorf(syncproto.CodeNeedsUpgrade, "value_version %d not accepted", m.EffectiveValueVersion())
	}
	return out
}

// checkOrder checks, on a connection that keeps its frames in order, that
// no write is applied while an earlier write of its model by the same
// device waits after a value-version refusal, and records the writes
// refused for their version.
func (s *sim) checkOrder(cn *conn, muts []syncproto.Mutation, fx replication.Effects) error {
	for i, r := range fx.Results {
		m := muts[i]
		switch {
		case r.Status == syncproto.StatusRejected && r.Code == syncproto.CodeNeedsUpgrade:
			s.waiting[m.OpID] = true
		case r.Status == syncproto.StatusApplied && !cn.reorder:
			for op := range s.waiting {
				w := s.writes[op]
				if w.Model == m.Model && w.HLC.Origin == m.HLC.Origin && s.made[op] < s.made[m.OpID] {
					return fmt.Errorf("op %s on %s applied while the earlier %s waits after a value-version refusal", m.OpID, m.Model, op)
				}
			}
		}
	}
	return nil
}

// record adds ev to the server's history and returns it.
func (s *sim) record(ev serverEvent) serverEvent {
	s.history = append(s.history, ev)
	return ev
}

// apply carries out a push event on the server: Admit, the flaky model's
// refusal, Apply.
func (s *sim) apply(ev serverEvent) (replication.Effects, error) {
	a := replication.Author{Tenant: simTenant, ClientID: ev.clientID, User: ev.clientID, Grants: syncproto.ScopeSet{simScope: ev.grants},
		CanWrite: func(model string) bool { return model != "ro" }}
	b := replication.Admit(a, ev.muts, simPolicies, ev.now, simMaxSkew)
	for i, e := range ev.refused {
		if b.Writes[i].Refusal == nil {
			b.Writes[i].Refusal = e
		}
	}
	for i := range b.Writes {
		if b.Writes[i].Mutation.Model == "flaky" && b.Writes[i].Refusal == nil {
			b.Writes[i].Refusal = syncproto.Errorf(syncproto.CodeInternal, "this model always fails")
		}
	}
	fx, err := s.srv.Apply(context.Background(), &b)
	if err != nil {
		return replication.Effects{}, fmt.Errorf("server apply: %w", err)
	}
	if err := s.noteApplied(fx.Entries); err != nil {
		return replication.Effects{}, err
	}
	if s.f.ledgerForgets {
		if _, err := s.srv.Ledger().Prune(context.Background(), ev.now); err != nil {
			return replication.Effects{}, err
		}
	}
	return fx, nil
}

// replay carries out ev on the server.
func (s *sim) replay(ev serverEvent) error {
	if ev.muts == nil {
		s.srv.CompactTo(ev.compact)
		return nil
	}
	_, err := s.apply(ev)
	return err
}

// restore is the operator restoring the backup (syncctl restore): the
// server stops (every connection is cut), comes back with the state the
// backup holds and a new database id, so every device resyncs. What the
// server decided after the backup is lost; a device that settled such a
// write keeps its outcome (docs/operations.md says so), so the checker
// excuses those writes, and only those, from agreeing with the server:
// a write decided again after the restore is checked as any other.
func (s *sim) restore() error {
	for _, c := range s.clients {
		s.cut(c)
	}
	b := s.backup
	s.backup = nil
	events := s.history[:b.events]
	s.history = nil
	now := s.now
	defer func() { s.now = now }()
	if err := s.newServer(); err != nil {
		return err
	}
	for _, ev := range events {
		s.now = ev.now // the ledger stamps its decisions with the clock
		if err := s.replay(s.record(ev)); err != nil {
			return err
		}
	}
	for op := range s.decided {
		if _, kept := b.decided[op]; !kept {
			s.lost[op] = true
		}
	}
	s.applied, s.decided = b.applied, b.decided
	s.restores++
	if !s.f.restoreKeepsID {
		s.dbID++
	}
	return nil
}

// publish sends every subscribed connection the feed it has not seen.
func (s *sim) publish() error {
	for _, cn := range s.conns {
		for cn.subscribed {
			p, err := s.srv.Read(context.Background(), replication.ReadRequest{Scope: replication.Scope{Tenant: simTenant, AllModels: true}, After: cn.sent, Limit: 2})
			var ce *replication.CursorError
			if errors.As(err, &ce) {
				cn.down = append(cn.down, msg{feedLost: true})
				cn.subscribed = false
				break
			}
			if err != nil {
				return err
			}
			if p.Next <= cn.sent {
				break
			}
			ch := &Changes{From: cn.sent, Next: p.Next}
			var gained []string
			for _, e := range p.Entries {
				switch deliver, evict := s.sees(cn.sess, e.Seq, e.Model); {
				case deliver:
					ch.Entries = append(ch.Entries, s.change(e.Seq, e.Record()))
				case evict:
					x := s.change(e.Seq, e.Record())
					x.Op, x.Value, x.Deleted, x.ScopeValue, x.Reason = syncproto.OpEvict, nil, false, "", syncproto.EvictMoved
					ch.Entries = append(ch.Entries, x)
				}
				if s.regrant(cn.sess, cn.client.id, e.Seq) {
					// The page ends at its reader's grant change.
					ch.Next = e.Seq
					ch.Evictions, gained = s.refollow(cn.sess, cn.client.id, e.Seq)
					break
				}
			}
			var id uint64
			if cn.sess != nil {
				id = cn.sess.id
			}
			cn.down = append(cn.down, msg{sub: id, changes: ch})
			cn.sent = ch.Next
			for _, v := range gained {
				s.backfill(cn, v, "")
			}
		}
	}
	return nil
}

func (s *sim) change(seq uint64, r replication.Record) syncproto.Change {
	c := syncproto.Change{Seq: seq, OpID: r.OpID, Model: r.Model, Key: r.Key, Value: r.Value, Version: r.Version, HLC: r.HLC, Deleted: r.Deleted}
	if simScoped(r.Model) {
		c.ScopeValue = s.scopeHist[seq].new
	}
	return c
}

// feed steps c's core with in and carries out the actions, answering
// local ones (queue reads) at once.
func (s *sim) feed(c *simClient, in Input) error {
	work := []Input{in}
	for len(work) > 0 {
		in := work[0]
		work = work[1:]
		acts := c.core.Step(in)
		if *simTrace {
			fmt.Printf("%s <- %T %+v\n", c.id, in, in)
			for _, a := range acts {
				fmt.Printf("%s    -> %T %+v\n", c.id, a, a)
			}
		}
		for _, a := range acts {
			next, err := s.act(c, a)
			if err != nil {
				return err
			}
			if next != nil {
				work = append(work, next)
			}
		}
	}
	return nil
}

func (s *sim) act(c *simClient, a Action) (Input, error) {
	switch a := a.(type) {
	case ReadQueue:
		p := Page{Read: a.Read}
		for _, it := range c.queue {
			if it.ID > a.After && len(p.Items) < a.Limit {
				p.Items = append(p.Items, it)
			}
		}
		p.End = len(p.Items) < a.Limit
		return p, nil
	case Send:
		muts := make([]syncproto.Mutation, len(a.Items))
		for i, it := range a.Items {
			muts[i] = it.Mutation
			if c.core.Status().Paused.Has(it.Mutation.Model) {
				return nil, fmt.Errorf("%s: op %s sent while its model %s is paused", c.id, it.Mutation.OpID, it.Mutation.Model)
			}
		}
		c.conn.up = append(c.conn.up, msg{push: a.Push, muts: muts})
	case Subscribe:
		c.subs++
		c.subID = c.subs
		c.conn.up = append(c.conn.up, msg{subscr: true, after: a.After, sub: c.subID, sub0: a})
	case Resync:
		c.resyncing = true
		c.conn.up = append(c.conn.up, msg{resync: true})
	case Apply:
		applyScoped(c, a)
	case ApplyBackfill:
		applyBackfill(c, a)
	case PassEnded:
	case SetTimer:
		wait := s.backoff.Wait(a.Failures, a.Hint)
		ceiling := s.backoff.Ceiling(a.Failures)
		if a.Failures < 1 || wait < a.Hint || wait < ceiling/2 || wait > max(ceiling, 2*a.Hint) {
			return nil, fmt.Errorf("%s: retry timer after %d failures with hint %v waits %v, outside the backoff's range", c.id, a.Failures, a.Hint, wait)
		}
		c.timer, c.due = a.Timer, s.now.Add(wait)
	case Report:
	case Settle:
		return nil, s.settle(c, a)
	default:
		return nil, fmt.Errorf("unknown action %T", a)
	}
	return nil, nil
}

func (s *sim) settle(c *simClient, a Settle) error {
	op := a.Item.Mutation.OpID
	if s.f.coreSkipsResult && op[0] < '4' {
		return nil
	}
	if a.Verdict.Action == Pause && !c.core.Status().Paused.Has(a.Item.Mutation.Model) {
		return fmt.Errorf("%s: op %s paused, but its model %s is not", c.id, op, a.Item.Mutation.Model)
	}
	i := slices.IndexFunc(c.queue, func(it Item) bool { return it.ID == a.Item.ID })
	if i < 0 {
		return fmt.Errorf("%s: settle of op %s, which is no longer queued", c.id, op)
	}
	switch a.Verdict.Action {
	case Done, Conflict: // the simulated conflict handler drops the write
		c.outcomes[op] = append(c.outcomes[op], a.Verdict)
		c.queue = slices.Delete(c.queue, i, i+1)
	case DeadLetter:
		c.outcomes[op] = append(c.outcomes[op], a.Verdict)
		c.dead[op] = a.Verdict.Reason
		c.queue = slices.Delete(c.queue, i, i+1)
	case Charge:
		if !s.f.queueForgetsAttempts {
			c.queue[i].Attempts = a.Verdict.Attempts
		}
	case Restamp:
		c.queue[i].Mutation.HLC = c.clock.Now()
	case Left, Pause:
	}
	return nil
}

// check asserts the invariants of a quiescent schedule.
func (s *sim) check() error {
	_, recs := s.srv.Snapshot(replication.Scope{Tenant: simTenant, AllModels: true})
	server := map[replication.RecordKey]replication.Record{}
	for _, r := range recs {
		server[replication.RecordKey{Model: r.Model, Key: r.Key}] = r
	}
	head := s.head()
	for op, es := range s.applied {
		if len(es) > 1 {
			return fmt.Errorf("op %s applied %d times", op, len(es))
		}
	}
	for _, c := range s.clients {
		if len(c.queue) > 0 {
			return fmt.Errorf("%s: queue not drained: %d items left, first %s", c.id, len(c.queue), c.queue[0].Mutation.OpID)
		}
		// Every replica equals the server's records filtered by what it
		// follows, at its cursor (the head, once quiescent).
		if c.cursor != head {
			return fmt.Errorf("%s: cursor %d, head %d", c.id, c.cursor, head)
		}
		if err := s.checkScopeStates(c, head); err != nil {
			return err
		}
		want, replica := s.filtered(c, recs), held(c)
		if len(replica) != len(want) {
			return fmt.Errorf("%s: replica holds %d records, server %d for follow set %v (want %v): %s", c.id, len(replica), len(want),
				followed(s.grants(c.id, head), c.want), c.want, diffKeys(replica, want))
		}
		for k, r := range want {
			got, ok := replica[k]
			if !ok || got.Version != r.Version || got.Deleted != r.Deleted || string(got.Value) != string(r.Value) {
				return fmt.Errorf("%s: replica %v = %+v, server %+v", c.id, k, got, r)
			}
		}
	}
	for op, m := range s.writes {
		var outs []Verdict
		for _, c := range s.clients {
			outs = append(outs, c.outcomes[op]...)
		}
		if len(outs) != 1 {
			return fmt.Errorf("op %s (%s) decided %d times at the client", op, m.Model, len(outs))
		}
		v := outs[0]
		applied := len(s.applied[op]) == 1
		if s.lost[op] {
			continue // decided, then lost with the server's history by a restore
		}
		switch v.Action {
		case DeadLetter:
			if applied {
				return fmt.Errorf("op %s dead-lettered (%s) but applied by the server", op, v.Reason)
			}
			if m.Model == "tasks" && strings.Contains(v.Reason, string(syncproto.CodeForbiddenScope)) {
				scopeStats.forbidden++
				continue // written to a value its writer was not granted
			}
			if strings.Contains(v.Reason, string(syncproto.CodeNeedsUpgrade)) {
				return fmt.Errorf("op %s on %s dead-lettered for a version reason (%s)", op, m.Model, v.Reason)
			}
			if m.Model == "notes" || m.Model == "tasks" || m.Model == "shapes" || (m.Model == "docs" && m.BaseVersion != nil) {
				return fmt.Errorf("op %s on %s dead-lettered (%s), though nothing refuses it for good", op, m.Model, v.Reason)
			}
		case Done:
			if (v.Status == syncproto.StatusApplied) != applied {
				return fmt.Errorf("op %s: client says %s, server applied it: %v", op, v.Status, applied)
			}
			if applied && v.Result.Seq != s.applied[op][0].Seq {
				return fmt.Errorf("op %s: client has seq %d, server %d", op, v.Result.Seq, s.applied[op][0].Seq)
			}
		case Conflict:
			if applied || m.Model != "docs" {
				return fmt.Errorf("op %s on %s: conflict, applied %v", op, m.Model, applied)
			}
		}
		if applied && m.Model == "docs" && s.applied[op][0].Version != *m.BaseVersion+1 {
			return fmt.Errorf("optimistic op %s based on version %d produced version %d", op, *m.BaseVersion, s.applied[op][0].Version)
		}
		if m.Model == "notes" && (v.Action == Done) {
			final := server[replication.RecordKey{Model: "notes", Key: m.Key}]
			if final.HLC.Compare(m.HLC) < 0 {
				return fmt.Errorf("lww: op %s with hlc %v decided, but the key stands at older %v", op, m.HLC, final.HLC)
			}
		}
	}
	return nil
}
