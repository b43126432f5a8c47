package ledger

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Decision is what the ledger remembers about one decided op.
//
// Times are kept at millisecond precision: a Decision read back carries
// OpTime and DecidedAt truncated to the millisecond, in UTC. Digest and Result
// are opaque to the ledger; an empty slice and nil are not told apart, and an
// empty value reads back as nil.
type Decision struct {
	// Scope is the namespace the op id is unique in: the tenant id. Any
	// string, the empty string included, is an ordinary scope.
	Scope string
	// OpID is the op's idempotency key. Never empty in a stored decision.
	OpID string
	// OpTime is the op's own time: the wall part of the mutation's HLC. It
	// is compared with the scope's floor, and an eviction raises the floor
	// to it; it never orders eviction.
	OpTime time.Time
	// Digest identifies the op's content, so a caller can tell a resend of
	// the same op from a different op reusing its id.
	Digest []byte
	// Result is the answer the caller gave for the op, replayed on a hit.
	Result []byte
	// DecidedAt is when the op was decided, by the server's clock. It orders
	// eviction. Record fills a zero DecidedAt from Options.Now; a replicated
	// caller passes it explicitly, so every replica stores the same value.
	DecidedAt time.Time
}

// Outcome is the answer of a Lookup.
type Outcome int

const (
	// Miss: the op was never decided. The caller may apply it and must then
	// Record the decision in the same transaction.
	Miss Outcome = iota
	// Hit: the op was decided before; the returned Decision holds the stored
	// answer. The caller must not apply the op again; it answers with the
	// stored Result (response replay) or just skips the op (skip-only).
	Hit
	// Expired: the op is not in the ledger and its op time is at or before
	// its scope's floor, so it may have been decided and then evicted. The
	// caller must refuse the op as expired and never apply it.
	Expired
)

// String returns "miss", "hit" or "expired".
func (o Outcome) String() string {
	switch o {
	case Miss:
		return "miss"
	case Hit:
		return "hit"
	case Expired:
		return "expired"
	default:
		return fmt.Sprintf("Outcome(%d)", int(o))
	}
}

// Tx is the ledger inside one transaction of the caller. Lookups see the
// transaction's own records and evictions; what it records and evicts
// becomes visible to others when the caller's transaction commits and
// vanishes if it rolls back.
//
// A Tx is not safe for concurrent use, and it is valid only until its
// transaction ends; after that, every call that needs the transaction fails.
type Tx interface {
	// Lookup reports whether the op opID of scope was decided. On Hit it
	// returns the stored decision; on Miss and Expired a zero Decision.
	// An empty opID is never decided: Lookup returns Miss for it. A zero
	// opTime is refused with ErrMissingOpTime (the Expired rule needs it).
	Lookup(ctx context.Context, scope, opID string, opTime time.Time) (Decision, Outcome, error)
	// LookupAll answers Lookup for every op of scope at once: answers[i] is
	// what Lookup(ctx, scope, ops[i].ID, ops[i].Time) returns. It is how a
	// caller deciding a batch reads the ledger in one round trip. On error
	// it returns no answers.
	LookupAll(ctx context.Context, scope string, ops []Op) ([]Answer, error)
	// Record stores d as the decision for (d.Scope, d.OpID). It refuses an
	// empty op id (ErrEmptyOpID), a zero op time (ErrMissingOpTime), an op
	// at or before its scope's floor (ErrExpired) and an op already
	// recorded in the scope (ErrAlreadyDecided); a refused Record stores
	// nothing and leaves the transaction usable.
	Record(ctx context.Context, d Decision) error
	// RecordAll stores every decision of ds, all or none: it refuses ds
	// for any reason Record would refuse one of them (or for two decisions
	// with the same scope and op id) and then stores nothing, leaving the
	// transaction usable. It is Record for a batch, in fewer statements.
	RecordAll(ctx context.Context, ds []Decision) error
	// Prune applies retention as of now inside the transaction, evicting
	// at most limit decisions, and reports how many it evicted and whether
	// evictable decisions remain (call it again, in this transaction or a
	// later one, until more is false). What it evicts depends only on the
	// ledger's state as this transaction sees it, now and limit: two
	// ledgers holding the same decisions and floors evict the same ones,
	// whatever order the decisions were recorded in. See the package
	// documentation for the order. It refuses a limit below 1 or a zero now
	// with ErrInvalidPrune, evicting nothing; after any other error the
	// transaction may hold an eviction without its floor, so roll it back,
	// never commit it.
	Prune(ctx context.Context, now time.Time, limit int) (evicted int, more bool, err error)
}

// Op names an op to look up: its idempotency key and its op time (the wall
// part of its HLC), as Lookup takes them.
type Op struct {
	ID   string
	Time time.Time
}

// Answer is what Lookup returns for one op.
type Answer struct {
	Decision Decision // the stored decision on Hit, zero otherwise
	Outcome  Outcome
}

// Stats is a snapshot of a ledger's committed state.
type Stats struct {
	// Entries is the number of decisions held, over every scope.
	Entries int
	// Scopes is the number of scopes the ledger keeps state for: every
	// scope that ever held a committed decision (a scope keeps its floor
	// after its last decision is evicted).
	Scopes int
	// MaxFloor is the highest floor of any scope: an op time after it is
	// above every scope's floor, so no op stamped later is Expired. Zero
	// while nothing was ever evicted.
	MaxFloor time.Time
}

// Errors returned by the ledger. Each says what the caller may do next.
var (
	// ErrEmptyOpID: the op has no identity, so the ledger cannot remember
	// it. Refuse the op as invalid; nothing was stored.
	ErrEmptyOpID = errors.New("ledger: empty op id")
	// ErrMissingOpTime: the caller passed a zero op time, a wiring error.
	// Pass the wall part of the op's HLC; nothing was stored.
	ErrMissingOpTime = errors.New("ledger: missing op time")
	// ErrAlreadyDecided: the op is already recorded in its scope (by an
	// earlier transaction or this one). It must not be applied again: look
	// it up and answer with the stored decision. Nothing was stored.
	ErrAlreadyDecided = errors.New("ledger: op already decided")
	// ErrExpired: the op's time is at or before its scope's floor, so the
	// ledger can no longer tell whether it was applied. Refuse it as
	// expired, never apply it. Nothing was stored.
	ErrExpired = errors.New("ledger: op older than the ledger's coverage")
	// ErrInvalidPrune: Tx.Prune was called with a limit below 1 or a zero
	// now, a wiring error. Nothing was evicted.
	ErrInvalidPrune = errors.New("ledger: invalid prune arguments")
)

// Defaults for the zero fields of Options.
const (
	DefaultMaxAge     = 7 * 24 * time.Hour
	DefaultMaxEntries = 1_000_000
	DefaultPruneChunk = 1000
)

// Options configure a ledger. The zero value means the defaults; a negative
// value is refused by NewSQL and NewMemory. The bounds apply to each scope
// on its own: one scope's volume never evicts another scope's decisions.
type Options struct {
	// MaxAge bounds retention by decision time: pruning as of now evicts
	// every decision decided at or before now-MaxAge. Default
	// DefaultMaxAge.
	MaxAge time.Duration
	// MaxEntries bounds retention by count: pruning evicts a scope's
	// oldest decisions (by decision time) beyond this many. Default
	// DefaultMaxEntries.
	MaxEntries int
	// PruneChunk is the most decisions one transaction of the ledger's own
	// Prune evicts, so it never holds the write lock for long. Default
	// DefaultPruneChunk.
	PruneChunk int
	// Now stamps DecidedAt when Record gets a zero one. Default time.Now.
	Now func() time.Time
	// OnPruneChunk, when set, is called after each committed chunk of the
	// ledger's own Prune with the number of decisions it removed, on the
	// goroutine running Prune (for progress logs and metrics). It must not
	// call Prune.
	OnPruneChunk func(evicted int)
}

// withDefaults validates o and fills its zero fields.
func (o Options) withDefaults() (Options, error) {
	switch {
	case o.MaxAge < 0:
		return o, fmt.Errorf("ledger: invalid options: MaxAge %v is negative", o.MaxAge)
	case o.MaxEntries < 0:
		return o, fmt.Errorf("ledger: invalid options: MaxEntries %d is negative", o.MaxEntries)
	case o.PruneChunk < 0:
		return o, fmt.Errorf("ledger: invalid options: PruneChunk %d is negative", o.PruneChunk)
	}
	if o.MaxAge == 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.MaxEntries == 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.PruneChunk == 0 {
		o.PruneChunk = DefaultPruneChunk
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}

// noFloor is the stored form of "nothing evicted yet": no op time is at or
// before it.
const noFloor = math.MinInt64

// checkPrune validates Tx.Prune's arguments.
func checkPrune(now time.Time, limit int) error {
	switch {
	case limit < 1:
		return fmt.Errorf("ledger: prune: limit %d: %w", limit, ErrInvalidPrune)
	case now.IsZero():
		return fmt.Errorf("ledger: prune: zero now: %w", ErrInvalidPrune)
	}
	return nil
}

// classifyAbsent is the outcome for an op that is not in the ledger.
func classifyAbsent(opMs, floor int64) Outcome {
	if opMs <= floor {
		return Expired
	}
	return Miss
}

// checkLookup validates Lookup's arguments; skip is true for an empty op id,
// which is a Miss without looking.
func checkLookup(scope, opID string, opTime time.Time) (skip bool, err error) {
	if opID == "" {
		return true, nil
	}
	if opTime.IsZero() {
		return false, fmt.Errorf("ledger: lookup %s: %w", opRef(scope, opID), ErrMissingOpTime)
	}
	return false, nil
}

// checkRecordAll validates what RecordAll can check without the ledger's
// state: each decision, and no (scope, op id) twice.
func checkRecordAll(ds []Decision) error {
	seen := make(map[[2]string]bool, len(ds))
	for _, d := range ds {
		if err := checkRecord(d); err != nil {
			return err
		}
		id := [2]string{d.Scope, d.OpID}
		if seen[id] {
			return alreadyDecided(d.Scope, d.OpID)
		}
		seen[id] = true
	}
	return nil
}

// row is a decision in its stored form: times in unix milliseconds, empty
// byte slices as nil.
type row struct {
	scope, opID string
	opMs        int64
	digest      []byte
	result      []byte
	decidedMs   int64
}

// checkRecord validates what Record can check without the ledger's state.
func checkRecord(d Decision) error {
	switch {
	case d.OpID == "":
		return fmt.Errorf("ledger: record in scope %q: %w", d.Scope, ErrEmptyOpID)
	case d.OpTime.IsZero():
		return fmt.Errorf("ledger: record %s: %w", opRef(d.Scope, d.OpID), ErrMissingOpTime)
	}
	return nil
}

// newRow returns d, already checked by checkRecord, in its stored form
// (sharing d's byte slices), or ErrExpired when its op time is at or before
// floor.
func newRow(d Decision, floor int64, now func() time.Time) (row, error) {
	r := row{
		scope:  d.Scope,
		opID:   d.OpID,
		opMs:   d.OpTime.UnixMilli(),
		digest: nilIfEmpty(d.Digest),
		result: nilIfEmpty(d.Result),
	}
	if r.opMs <= floor {
		return row{}, fmt.Errorf("ledger: record %s at %s: %w", opRef(d.Scope, d.OpID),
			fromMs(r.opMs).Format(time.RFC3339Nano), ErrExpired)
	}
	decided := d.DecidedAt
	if decided.IsZero() {
		decided = now()
	}
	r.decidedMs = decided.UnixMilli()
	return r, nil
}

// decision returns r as a Decision that shares no memory with r.
func (r row) decision() Decision {
	return Decision{
		Scope:     r.scope,
		OpID:      r.opID,
		OpTime:    fromMs(r.opMs),
		Digest:    cloneBytes(r.digest),
		Result:    cloneBytes(r.result),
		DecidedAt: fromMs(r.decidedMs),
	}
}

func alreadyDecided(scope, opID string) error {
	return fmt.Errorf("ledger: record %s: %w", opRef(scope, opID), ErrAlreadyDecided)
}

func opRef(scope, opID string) string { return fmt.Sprintf("scope %q op %q", scope, opID) }

func fromMs(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// floorTime is the exported form of a stored floor: zero for noFloor.
func floorTime(floor int64) time.Time {
	if floor == noFloor {
		return time.Time{}
	}
	return fromMs(floor)
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// cloneBytes copies b; an empty b becomes nil.
func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}
