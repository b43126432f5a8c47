package ledgertest

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/ledger"
)

// model is the ledger's specification written as plainly as possible,
// with no transactions of its own (a test clones it per transaction):
// decisions per scope, each scope's floor, retention per scope by decision
// time in (decided at, op id) order, scopes visited in byte order.
type model struct {
	maxAge     time.Duration
	maxEntries int
	scopes     map[string]*modelScope
	// evicted is every op ever evicted, with its op time.
	evicted map[key]int64
}

type key struct{ scope, opID string }

type modelScope struct {
	held  map[string]ledger.Decision // in stored form
	floor int64                      // unix ms; math.MinInt64 for none
}

func newModel(maxAge time.Duration, maxEntries int) *model {
	return &model{maxAge: maxAge, maxEntries: maxEntries, scopes: map[string]*modelScope{}, evicted: map[key]int64{}}
}

func (m *model) clone() *model {
	c := &model{maxAge: m.maxAge, maxEntries: m.maxEntries, scopes: map[string]*modelScope{}, evicted: maps.Clone(m.evicted)}
	for name, sc := range m.scopes {
		c.scopes[name] = &modelScope{held: maps.Clone(sc.held), floor: sc.floor}
	}
	return c
}

func (m *model) scope(name string) *modelScope {
	sc := m.scopes[name]
	if sc == nil {
		sc = &modelScope{held: map[string]ledger.Decision{}, floor: math.MinInt64}
		m.scopes[name] = sc
	}
	return sc
}

func (m *model) floor(scope string) int64 {
	if sc := m.scopes[scope]; sc != nil {
		return sc.floor
	}
	return math.MinInt64
}

func (m *model) lookup(d ledger.Decision) (ledger.Decision, ledger.Outcome) {
	if sc := m.scopes[d.Scope]; sc != nil {
		if got, ok := sc.held[d.OpID]; ok {
			return got, ledger.Hit
		}
	}
	if d.OpTime.UnixMilli() <= m.floor(d.Scope) {
		return ledger.Decision{}, ledger.Expired
	}
	return ledger.Decision{}, ledger.Miss
}

func (m *model) record(d ledger.Decision) error {
	if d.OpTime.UnixMilli() <= m.floor(d.Scope) {
		return ledger.ErrExpired
	}
	sc := m.scope(d.Scope)
	if _, ok := sc.held[d.OpID]; ok {
		return ledger.ErrAlreadyDecided
	}
	sc.held[d.OpID] = stored(d)
	return nil
}

// prune is Tx.Prune: it returns what it evicted, in order.
func (m *model) prune(now time.Time, limit int) (evicted []key, more bool) {
	cutoff := now.Add(-m.maxAge).UnixMilli()
	for _, name := range slices.Sorted(maps.Keys(m.scopes)) {
		sc := m.scopes[name]
		rows := slices.SortedFunc(maps.Values(sc.held), func(a, b ledger.Decision) int {
			return cmp.Or(a.DecidedAt.Compare(b.DecidedAt), cmp.Compare(a.OpID, b.OpID))
		})
		aged := 0
		for aged < len(rows) && rows[aged].DecidedAt.UnixMilli() <= cutoff {
			aged++
		}
		due := max(aged, len(rows)-m.maxEntries)
		if due <= 0 {
			continue
		}
		if len(evicted) == limit {
			return evicted, true
		}
		take := min(due, limit-len(evicted))
		for _, d := range rows[:take] {
			delete(sc.held, d.OpID)
			sc.floor = max(sc.floor, d.OpTime.UnixMilli())
			m.evicted[key{name, d.OpID}] = d.OpTime.UnixMilli()
			evicted = append(evicted, key{name, d.OpID})
		}
		if take < due {
			return evicted, true
		}
	}
	return evicted, false
}

func (m *model) stats() ledger.Stats {
	st, maxFloor := ledger.Stats{Scopes: len(m.scopes)}, int64(math.MinInt64)
	for _, sc := range m.scopes {
		st.Entries += len(sc.held)
		maxFloor = max(maxFloor, sc.floor)
	}
	st.MaxFloor = msTime(maxFloor)
	return st
}

func msTime(ms int64) time.Time {
	if ms == math.MinInt64 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// requireMatches requires st's committed state to be m's, for every op in
// ops: held decisions, floors and stats.
func requireMatches(t *testing.T, st Store, m *model, ops []ledger.Decision) {
	t.Helper()
	ctx := t.Context()
	scopes := map[string]bool{}
	for _, d := range ops {
		scopes[d.Scope] = true
		got, ok, err := st.Get(ctx, d.Scope, d.OpID)
		require.NoError(t, err)
		want, o := m.lookup(d)
		require.Equal(t, o == ledger.Hit, ok, "scope %q op %q held", d.Scope, d.OpID)
		if ok {
			requireSame(t, want, got)
		}
	}
	for scope := range scopes {
		requireFloor(t, st, scope, msTime(m.floor(scope)))
	}
	requireStats(t, st, m.stats())
}

// history drives a Store and a model through the same seeded random
// history, checking every answer against the model and the floor rule.
type history struct {
	t     *testing.T
	st    Store
	m     *model
	rng   *rand.Rand
	clock time.Time         // the server's clock, deciding ops
	pool  []ledger.Decision // every op ever offered, each with one op time
	byKey map[key]int
}

// op returns an op of scope to offer: a resend of a known one, or a new one
// whose op time is the client's: mostly near the server's clock, sometimes
// days behind, at wall time zero, or far ahead.
func (h *history) op() ledger.Decision {
	scope := []string{"", "a", "a\x00", "ab", "b", "é"}[h.rng.IntN(6)]
	k := key{scope, fmt.Sprintf("op-%02d", h.rng.IntN(30))}
	if i, ok := h.byKey[k]; ok {
		return h.pool[i]
	}
	var opTime time.Time
	switch r := h.rng.IntN(200); {
	case r < 8:
		opTime = h.clock.Add(-8 * 24 * time.Hour)
	case r < 14:
		opTime = time.UnixMilli(int64(h.rng.IntN(2)))
	case r < 15:
		opTime = h.clock.Add(365 * 24 * time.Hour)
	default:
		opTime = h.clock.Add(time.Duration(h.rng.IntN(40_000)-30_000) * time.Millisecond)
	}
	d := ledger.Decision{
		Scope: scope, OpID: k.opID, OpTime: opTime,
		Digest: []byte("digest " + k.opID), Result: []byte(fmt.Sprintf("result %q/%s", scope, k.opID)),
	}
	h.byKey[k] = len(h.pool)
	h.pool = append(h.pool, d)
	return d
}

// decidedAt is when the server decides the next op: its clock, often in the
// same millisecond as the last, sometimes a few seconds behind (a clock
// stepped back), rarely an hour ahead.
func (h *history) decidedAt() time.Time {
	switch r := h.rng.IntN(100); {
	case r < 10:
		return h.clock.Add(-time.Duration(h.rng.IntN(5000)) * time.Millisecond)
	case r < 12:
		return h.clock.Add(time.Hour)
	default:
		return h.clock
	}
}

// pruneNow is a prune's now: around the clock, sometimes behind it.
func (h *history) pruneNow() time.Time {
	return h.clock.Add(time.Duration(h.rng.IntN(90)-60) * time.Second)
}

// decide offers d in tx the way a caller does, checking the answers against
// m, the model as tx sees it.
func (h *history) decide(tx Txn, m *model, d ledger.Decision) {
	t, ctx := h.t, h.t.Context()
	got, o, err := tx.Lookup(ctx, d.Scope, d.OpID, d.OpTime)
	require.NoError(t, err)
	want, wantO := m.lookup(d)
	require.Equal(t, wantO, o, "lookup scope %q op %q at %s", d.Scope, d.OpID, d.OpTime)
	opMs := d.OpTime.UnixMilli()
	switch o {
	case ledger.Hit:
		requireSame(t, want, got)
		return
	case ledger.Miss:
		_, evicted := m.evicted[key{d.Scope, d.OpID}]
		require.False(t, evicted, "an evicted op was a miss")
	case ledger.Expired:
		require.LessOrEqual(t, opMs, m.floor(d.Scope), "expired above its scope's floor")
		evictedMax := int64(math.MinInt64)
		for k, at := range m.evicted {
			if k.scope == d.Scope {
				evictedMax = max(evictedMax, at)
			}
		}
		require.Equal(t, evictedMax, m.floor(d.Scope), "a floor is the newest op time evicted from its scope")
	}
	d.DecidedAt = h.decidedAt()
	wantErr := m.record(d)
	err = tx.Record(ctx, d)
	if wantErr == nil {
		require.NoError(t, err)
	} else {
		require.ErrorIs(t, err, wantErr)
	}
}

// txPrune runs Tx.Prune in tx and m and requires the same answer.
func (h *history) txPrune(tx Txn, m *model, now time.Time, limit int) {
	n, more, err := tx.Prune(h.t.Context(), now, limit)
	require.NoError(h.t, err)
	evicted, wantMore := m.prune(now, limit)
	require.Equal(h.t, len(evicted), n, "evicted as of %s, limit %d", now, limit)
	require.Equal(h.t, wantMore, more, "more as of %s, limit %d", now, limit)
}

// step runs one random transaction, or one Store.Prune.
func (h *history) step() {
	t := h.t
	h.clock = h.clock.Add(time.Duration(h.rng.IntN(4000)) * time.Millisecond)
	if h.rng.IntN(10) == 0 {
		now := h.pruneNow()
		want := 0
		for {
			evicted, more := h.m.prune(now, modelChunk)
			want += len(evicted)
			if !more {
				break
			}
		}
		prune(t, h.st, now, want)
		return
	}
	tx := begin(t, h.st)
	m := h.m.clone()
	for range 1 + h.rng.IntN(4) {
		if h.rng.IntN(5) == 0 {
			h.txPrune(tx, m, h.pruneNow(), 1+h.rng.IntN(6))
		}
		h.decide(tx, m, h.op())
	}
	if h.rng.IntN(8) == 0 {
		require.NoError(t, tx.Rollback())
		return
	}
	require.NoError(t, tx.Commit())
	h.m = m
}

// modelChunk is Options.PruneChunk in the model test, small so Store.Prune
// runs several chunks.
const modelChunk = 3

// matchesModel runs seeded random histories of decisions, rollbacks and
// prunes (in transactions and by Store.Prune) against the model: every
// lookup, record, prune count and "more", and after every step the held
// decisions, floors and stats. It also checks the floor rule on its own
// terms: an evicted op is never a Miss, and an op is Expired only at or
// below the newest op time evicted from its scope.
func (s suite) matchesModel(t *testing.T) {
	const steps = 120
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			opts := ledger.Options{MaxAge: 2 * time.Minute, MaxEntries: 12, PruneChunk: modelChunk}
			h := &history{
				t: t, st: s.open(t, opts), m: newModel(opts.MaxAge, opts.MaxEntries),
				rng: rand.New(rand.NewPCG(seed, 0x1ed9e7)), clock: base, byKey: map[key]int{},
			}
			for i := range steps {
				h.step()
				requireMatches(t, h.st, h.m, h.pool)
				if t.Failed() {
					t.Fatalf("seed %d diverged at step %d", seed, i)
				}
			}
			require.NotEmpty(t, h.m.evicted, "the history evicted nothing: it proves nothing of the floor")
		})
	}
}

// pruneIsDeterministic feeds two ledgers the same decisions, in different
// orders and transactions, and prunes both in transactions with the same
// nows and limits: they evict the same op ids, the ones the model names.
func (s suite) pruneIsDeterministic(t *testing.T) {
	opts := ledger.Options{MaxAge: time.Hour, MaxEntries: 5}
	one, two := s.open(t, opts), s.open(t, opts)
	m := newModel(opts.MaxAge, opts.MaxEntries)
	rng := rand.New(rand.NewPCG(7, 7))
	var ds []ledger.Decision
	for _, scope := range []string{"tenant-b", "tenant-a", "tenant-c"} {
		for range 12 {
			// Few distinct decision times, so most decisions tie.
			decided := base.Add(time.Duration(rng.IntN(4)) * 20 * time.Minute)
			id := fmt.Sprintf("%016x", rng.Uint64())
			d := at(scope, id, base.Add(time.Duration(rng.IntN(3600))*time.Second), decided)
			require.NoError(t, m.record(d))
			ds = append(ds, d)
		}
	}
	shuffled := slices.Clone(ds)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	recordIn := func(st Store, ds []ledger.Decision, per int) {
		for len(ds) > 0 {
			n := min(per, len(ds))
			record(t, st, ds[:n]...)
			ds = ds[n:]
		}
	}
	recordIn(one, ds, 7)
	recordIn(two, shuffled, 3)
	requireMatches(t, one, m, ds)
	requireMatches(t, two, m, ds)

	heldBy := func(st Store) []key {
		var ks []key
		for _, d := range ds {
			_, ok, err := st.Get(t.Context(), d.Scope, d.OpID)
			require.NoError(t, err)
			if ok {
				ks = append(ks, key{d.Scope, d.OpID})
			}
		}
		return ks
	}
	for round := range 12 {
		now := base.Add(time.Duration(round) * 10 * time.Minute)
		limit := 1 + rng.IntN(4)
		before := heldBy(one)
		want, wantMore := m.prune(now, limit)
		for _, st := range []Store{one, two} {
			tx := begin(t, st)
			txPrune(t, tx, now, limit, len(want), wantMore)
			require.NoError(t, tx.Commit())
		}
		after := heldBy(one)
		gone := slices.DeleteFunc(before, func(k key) bool { return slices.Contains(after, k) })
		slices.SortFunc(want, compareKeys)
		slices.SortFunc(gone, compareKeys)
		require.Equal(t, want, gone, "round %d: evicted op ids", round)
		require.Equal(t, after, heldBy(two), "round %d: the two ledgers differ", round)
		requireMatches(t, one, m, ds)
		requireMatches(t, two, m, ds)
	}
	require.Less(t, m.stats().Entries, len(ds)/2, "the rounds evicted too little to prove anything")
}

func compareKeys(a, b key) int {
	return cmp.Or(cmp.Compare(a.scope, b.scope), cmp.Compare(a.opID, b.opID))
}
