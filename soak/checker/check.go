package checker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/soak/journal"
	"github.com/syncd-dev/syncd/syncproto"
)

// Invariant numbers the promises of issue 5, in its order.
type Invariant int

const (
	// Accounted (1): every write a client made is applied, superseded,
	// resolved by the app's conflict handler, or dead-lettered with a
	// reason; none is missing, and nothing applied comes from nowhere.
	Accounted Invariant = iota + 1
	// ExactlyOnce (2): no op id appears twice in the oplog, and every
	// answer a client holds is the ledger's first decision, so every
	// duplicate resend was answered from the ledger.
	ExactlyOnce
	// ReferenceModel (3): the server's records equal a model recomputed
	// from the oplog with the declared policies.
	ReferenceModel
	// Converged (4): every replica equals the server's records for what
	// its token may read, filtered, in scoped models, by the scope values
	// it follows (granted by its token or its user's membership rows, and
	// requested); a row of a value it does not follow is a leak.
	Converged
	// Drained (5): queues hold only dead letters, the oplog has no gaps,
	// every database passes its integrity check.
	Drained
	// NoLeaks (6): syncd's goroutines and open files return to baseline.
	NoLeaks
)

// Invariants lists every invariant in order.
var Invariants = []Invariant{Accounted, ExactlyOnce, ReferenceModel, Converged, Drained, NoLeaks}

// String is the invariant's short name.
func (i Invariant) String() string {
	switch i {
	case Accounted:
		return "every write accounted for"
	case ExactlyOnce:
		return "applied exactly once"
	case ReferenceModel:
		return "records match the reference model"
	case Converged:
		return "replicas converged"
	case Drained:
		return "queues drained, oplog whole, databases sound"
	case NoLeaks:
		return "syncd back to baseline"
	}
	return fmt.Sprintf("invariant %d", int(i))
}

// MaxEvidence is how many violations a verdict quotes.
const MaxEvidence = 8

// Verdict is the checker's answer for one invariant.
type Verdict struct {
	Invariant  Invariant
	Holds      bool
	Checked    int      // items examined (writes, entries, keys, files)
	Violations int      // items that broke the invariant
	Evidence   []string // the first MaxEvidence violations
	Notes      []string // what limited the check, if anything
}

// Result is the checker's report: a verdict per invariant and the numbers
// the soak report quotes.
type Result struct {
	Verdicts []Verdict
	Stats    Stats
}

// Holds reports whether every invariant holds.
func (r Result) Holds() bool {
	for _, v := range r.Verdicts {
		if !v.Holds {
			return false
		}
	}
	return len(r.Verdicts) > 0
}

// Verdict returns the verdict for i.
func (r Result) Verdict(i Invariant) Verdict {
	for _, v := range r.Verdicts {
		if v.Invariant == i {
			return v
		}
	}
	return Verdict{Invariant: i}
}

// Stats are counts and latencies over the judged state.
type Stats struct {
	Made        map[journal.Class]int // writes made, by class
	Failed      int                   // calls that returned an error (no write made)
	CrashWindow int                   // intents a crash left unanswered
	Outcomes    map[string]int        // client outcomes by status
	Rebased     int                   // conflicts the handler rebased
	Dropped     int                   // conflicts the handler dropped
	DeadLetters int
	Oplog       int
	Records     int
	Conflicts   int
	// Received counts the rows of scoped models clients journaled as
	// received from the server and the checker judged at their seq.
	Received int
	// Latency is Put-return to outcome-recorded, over every decided write
	// (both instants by the writing client's clock).
	Latency Percentiles
}

// Percentiles summarize a latency distribution.
type Percentiles struct {
	N                  int
	P50, P90, P99, Max time.Duration
}

// Check judges s against every invariant. It never modifies s.
func Check(s *State) Result {
	ix := newIndex(s)
	var res Result
	acc := checkAccounted(s, ix)
	converged, wire := checkConverged(s, ix)
	res.Verdicts = []Verdict{
		acc.verdict,
		checkExactlyOnce(s, ix),
		checkReferenceModel(s, ix, acc),
		converged,
		checkDrained(s),
		checkNoLeaks(s),
	}
	res.Stats = acc.stats
	res.Stats.Received = wire
	res.Stats.Oplog, res.Stats.Records, res.Stats.Conflicts = len(s.Server.Oplog), len(s.Server.Records), len(s.Server.Conflicts)
	for _, c := range s.Clients {
		res.Stats.DeadLetters += len(c.Queue.DeadLetters)
	}
	return res
}

// verdict collects violations for one invariant.
type verdict struct{ v Verdict }

func newVerdict(i Invariant) *verdict { return &verdict{v: Verdict{Invariant: i}} }

func (b *verdict) check() { b.v.Checked++ }
func (b *verdict) note(format string, a ...any) {
	b.v.Notes = append(b.v.Notes, fmt.Sprintf(format, a...))
}
func (b *verdict) fail(format string, a ...any) {
	b.v.Violations++
	if len(b.v.Evidence) < MaxEvidence {
		b.v.Evidence = append(b.v.Evidence, fmt.Sprintf(format, a...))
	}
}
func (b *verdict) done() Verdict { b.v.Holds = b.v.Violations == 0; return b.v }

type tenantOp struct{ tenant, op string }
type recordKey struct{ tenant, model, key string }

// index holds the lookups every check shares.
type index struct {
	oplogByOp  map[tenantOp][]*OplogEntry
	oplogByKey map[recordKey][]*OplogEntry
	ledger     map[tenantOp]*Decision
	records    map[recordKey]*Record
	oldestSeq  uint64
}

func newIndex(s *State) *index {
	ix := &index{
		oplogByOp:  map[tenantOp][]*OplogEntry{},
		oplogByKey: map[recordKey][]*OplogEntry{},
		ledger:     map[tenantOp]*Decision{},
		records:    map[recordKey]*Record{},
	}
	for i := range s.Server.Oplog {
		e := &s.Server.Oplog[i]
		ix.oplogByOp[tenantOp{e.Tenant, e.OpID}] = append(ix.oplogByOp[tenantOp{e.Tenant, e.OpID}], e)
		k := recordKey{e.Tenant, e.Model, e.Key}
		ix.oplogByKey[k] = append(ix.oplogByKey[k], e)
		if ix.oldestSeq == 0 || e.Seq < ix.oldestSeq {
			ix.oldestSeq = e.Seq
		}
	}
	for _, entries := range ix.oplogByKey {
		sort.Slice(entries, func(i, j int) bool { return entries[i].Seq < entries[j].Seq })
	}
	for i := range s.Server.Ledger {
		d := &s.Server.Ledger[i]
		ix.ledger[tenantOp{d.Tenant, d.OpID}] = d
	}
	for i := range s.Server.Records {
		r := &s.Server.Records[i]
		ix.records[recordKey{r.Tenant, r.Model, r.Key}] = r
	}
	return ix
}

// ledgerCovers reports whether the ledger still holds tenant's decisions
// for an op stamped at wall (Unix ms).
func (s *State) ledgerCovers(tenant string, wall int64) bool {
	floor := s.Server.LedgerFloor(tenant)
	return floor.IsZero() || wall > floor.UnixMilli()
}

// policy is a model's declared policy.
func (s *State) policy(model string) string {
	if p, ok := s.Server.Policies[model]; ok {
		return p
	}
	return string(syncproto.PolicyLWW)
}

// sameJSON compares two values as JSON documents (whitespace aside).
func sameJSON(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// short quotes a value for evidence, truncated.
func short(v []byte) string {
	if v == nil {
		return "<none>"
	}
	s := string(v)
	if len(s) > 60 {
		s = s[:60] + "..."
	}
	return s
}

// percentiles summarizes ds (nearest rank).
func percentiles(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(ds))+0.5) - 1
		return ds[min(max(i, 0), len(ds)-1)]
	}
	return Percentiles{N: len(ds), P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: ds[len(ds)-1]}
}

func join(ss []string) string { return strings.Join(ss, ", ") }
