package soak

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// FaultKind names one kind of fault the scheduler injects.
type FaultKind string

// Network faults (flaps), each on one client's proxy.
const (
	// FaultBlackhole: the client's path goes silent for a while; live
	// connections that lose bytes stay dead until reset.
	FaultBlackhole FaultKind = "blackhole"
	// FaultOutage: connections are refused and reset for a while.
	FaultOutage FaultKind = "outage"
	// FaultReset: every live connection is reset at once.
	FaultReset FaultKind = "reset"
	// FaultDelay: latency in both directions for a while.
	FaultDelay FaultKind = "delay"
	// FaultThrottle: a bandwidth cap for a while.
	FaultThrottle FaultKind = "throttle"
	// FaultAckLost: the next server-to-client byte resets the connection,
	// so a push is committed and its acknowledgement lost.
	FaultAckLost FaultKind = "ack-lost"
	// FaultCutNext: the next connection is cut after a few bytes, in a
	// random direction (handshakes and probes die half-way).
	FaultCutNext FaultKind = "cut-next"
	// FaultCutUp: a live connection's requests are cut after a few bytes.
	FaultCutUp FaultKind = "cut-up"
)

// Process faults.
const (
	// FaultClientCrash: a client is killed with SIGKILL and restarted on
	// its queue, replica and journal after a short pause.
	FaultClientCrash FaultKind = "client-crash"
	// FaultOfflineCrash: a client is cut off, keeps writing into its
	// queue, is killed with SIGKILL while offline and restarted.
	FaultOfflineCrash FaultKind = "offline-crash"
	// FaultSyncdCrash: syncd is killed with SIGKILL and restarted on the
	// same database and port.
	FaultSyncdCrash FaultKind = "syncd-crash"
	// FaultSyncdRestart: syncd is stopped with SIGTERM (a graceful drain)
	// and restarted.
	FaultSyncdRestart FaultKind = "syncd-restart"
)

// Cluster faults (Nodes > 1). There, syncd-crash and syncd-restart hit
// one node at a time, which restarts on its own disk.
const (
	// FaultRouteCut: every NATS route to and from one node is refused
	// and reset for a while, then healed.
	FaultRouteCut FaultKind = "route-cut"
)

// NetworkFaults are the flap kinds, AllFaults every kind.
var (
	NetworkFaults = []FaultKind{FaultBlackhole, FaultOutage, FaultReset, FaultDelay, FaultThrottle, FaultAckLost, FaultCutNext, FaultCutUp}
	AllFaults     = append(slices.Clone(NetworkFaults), FaultClientCrash, FaultOfflineCrash, FaultSyncdCrash, FaultSyncdRestart)
	// ClusterFaults are the kinds only a cluster run has; a cluster run's
	// default is AllFaults and these.
	ClusterFaults = []FaultKind{FaultRouteCut}
	knownFaults   = append(slices.Clone(AllFaults), ClusterFaults...)
)

func (k FaultKind) network() bool { return slices.Contains(NetworkFaults, k) }

// Break deliberately breaks one component, to show that the checker
// catches it. It exists for the checker's own tests; a real run uses
// BreakNone.
type Break string

const (
	BreakNone Break = ""
	// BreakForgetAttempts wraps every client's queue in one whose
	// SetAttempts does nothing, so a poison write is dead-lettered charged
	// nothing (invariant 5); a write refused transiently would be retried
	// forever.
	BreakForgetAttempts Break = "forget-attempts"
	// BreakVolatileQueue gives client c00 a memory queue: a crash loses
	// the writes it had not delivered (invariant 1).
	BreakVolatileQueue Break = "volatile-queue"
	// BreakLedgerAmnesia makes every ack-lost fault also wipe syncd's
	// replay ledger before the client can resend, so a resend is decided
	// again instead of answered from the ledger (invariant 2).
	BreakLedgerAmnesia Break = "ledger-amnesia"
)

var breaks = []Break{BreakNone, BreakForgetAttempts, BreakVolatileQueue, BreakLedgerAmnesia}

// Config configures one soak run. The zero value of every field means its
// default.
type Config struct {
	// Duration is how long the churn phase runs (default 10m); quiescence
	// and the check follow it.
	Duration time.Duration
	// Nodes is how many syncd processes run (default 1). More than one
	// makes a cluster (--cluster, embedded NATS, routes through fault
	// proxies): every client reaches every node through its own proxies,
	// node kills and route cuts join the faults, and at the end every
	// node must hold the same records (same applied sequence and digest).
	Nodes int
	// Clients is how many client processes run (default 20).
	Clients int
	// Seed seeds every random choice of the run; 0 takes one from the
	// clock. The report states it, so a run can be replayed.
	Seed int64
	// Dir is where run directories are created (default var/soak); each
	// run writes Dir/<UTC timestamp>/ with report.md beside its state.
	Dir string
	// SyncdBinary is the syncd to run; "" builds ./cmd/syncd of this
	// module with go build (with -race when BuildRace).
	SyncdBinary string
	BuildRace   bool
	// Faults lists the fault kinds on (default AllFaults).
	Faults []FaultKind
	// FlapEvery is the mean time between two network faults, over all
	// clients (default 1s: about 600 in ten minutes).
	FlapEvery time.Duration
	// ClientCrashEvery and SyncdCrashEvery are the mean times between two
	// client crashes (default 15s) and two syncd kills or restarts
	// (default 60s); in a cluster, SyncdCrashEvery is also the mean time
	// between two route cuts.
	ClientCrashEvery time.Duration
	SyncdCrashEvery  time.Duration
	// WriteEvery is the mean time between two writes of one client
	// (default 400ms).
	WriteEvery time.Duration
	// Keys is the size of the shared key space per model, HotKeys how
	// many of them take a third of the writes (defaults 200 and 4).
	Keys, HotKeys int
	// MaxClockSkew is syncd's bound on how far ahead a client's clock may
	// be (default 30s); some clients run ahead within it, one beyond it.
	MaxClockSkew time.Duration
	// QuiesceTimeout bounds the wait for every client to drain and catch
	// up after the churn (default 3m). A run that does not quiesce is still
	// checked: the checker then says what was left.
	QuiesceTimeout time.Duration
	// MinFlaps is the fewest network faults the run must inject to count
	// as covered (default 0: only "every enabled kind at least once").
	MinFlaps int
	// Break deliberately breaks a component (tests of the checker only).
	Break Break
	// Progress receives a progress line every ProgressEvery (default
	// 10s); nil prints nothing.
	Progress      io.Writer
	ProgressEvery time.Duration
}

func (c *Config) setDefaults() error {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Duration, 10*time.Minute)
	def(&c.FlapEvery, time.Second)
	def(&c.ClientCrashEvery, 15*time.Second)
	def(&c.SyncdCrashEvery, time.Minute)
	def(&c.WriteEvery, 400*time.Millisecond)
	def(&c.MaxClockSkew, 30*time.Second)
	def(&c.QuiesceTimeout, 3*time.Minute)
	def(&c.ProgressEvery, 10*time.Second)
	if c.Clients == 0 {
		c.Clients = 20
	}
	if c.Nodes == 0 {
		c.Nodes = 1
	}
	if c.Keys == 0 {
		c.Keys = 200
	}
	if c.HotKeys == 0 {
		c.HotKeys = 4
	}
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano()
	}
	if c.Dir == "" {
		c.Dir = "var/soak"
	}
	if c.Faults == nil {
		c.Faults = AllFaults
		if c.Nodes > 1 {
			c.Faults = knownFaults
		}
	}
	switch {
	case c.Duration < 0 || c.FlapEvery < 0 || c.ClientCrashEvery < 0 || c.SyncdCrashEvery < 0 || c.WriteEvery < 0 ||
		c.MaxClockSkew < 0 || c.QuiesceTimeout < 0 || c.ProgressEvery < 0:
		return errors.New("durations must not be negative")
	case c.Clients < 1 || c.Clients > 100:
		return fmt.Errorf("clients: %d, want 1 to 100", c.Clients)
	case c.HotKeys < 1 || c.Keys < c.HotKeys:
		return fmt.Errorf("keys %d, hot keys %d: want 1 <= hot keys <= keys", c.Keys, c.HotKeys)
	case c.Nodes < 1 || c.Nodes > MaxNodes:
		return fmt.Errorf("nodes: %d, want 1 to %d", c.Nodes, MaxNodes)
	case c.Nodes > 1 && c.Break == BreakLedgerAmnesia:
		return errors.New("break ledger-amnesia needs one node")
	case c.MinFlaps < 0:
		return errors.New("min flaps must not be negative")
	case !slices.Contains(breaks, c.Break):
		return fmt.Errorf("unknown break %q", c.Break)
	}
	for _, k := range c.Faults {
		if !slices.Contains(knownFaults, k) {
			return fmt.Errorf("unknown fault kind %q", k)
		}
		if c.Nodes == 1 && slices.Contains(ClusterFaults, k) {
			return fmt.Errorf("fault kind %q needs more than one node", k)
		}
	}
	return nil
}

// ParseFaults parses a comma-separated list of fault kinds; "all" is every
// kind of a single node (AllFaults) and "none" no kind.
func ParseFaults(s string) ([]FaultKind, error) {
	switch s {
	case "all":
		return AllFaults, nil
	case "none", "":
		return []FaultKind{}, nil
	}
	var out []FaultKind
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		k := FaultKind(part)
		if !slices.Contains(knownFaults, k) {
			return nil, fmt.Errorf("unknown fault kind %q (known: %v)", part, knownFaults)
		}
		out = append(out, k)
	}
	return out, nil
}
