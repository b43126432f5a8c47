package ledger

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"
)

// Memory is a ledger held in memory, with the semantics of SQL, for tests
// and for embedders without a database. It is safe for concurrent use.
//
// Like SQLite with BEGIN IMMEDIATE, it has a single writer: Begin waits
// while another transaction is open, and so does each chunk of Prune, so
// transactions are serializable. Get, Floor and Stats never wait for a
// transaction; they see committed state only. Pruning sorts the decisions
// of every scope it evicts from, which is fine for tests and small ledgers.
type Memory struct {
	opts Options
	// writer is a one-slot semaphore held by an open MemoryTx.
	writer chan struct{}

	mu     sync.Mutex // guards scopes
	scopes map[string]*memScope
}

// memScope is the committed state of one scope. A scope has an entry once
// it held a committed decision, and keeps it for its floor.
type memScope struct {
	decisions map[string]row // by op id
	floor     int64
}

// NewMemory returns an empty in-memory ledger. It fails only on invalid
// options.
func NewMemory(opts Options) (*Memory, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Memory{
		opts:   o,
		writer: make(chan struct{}, 1),
		scopes: make(map[string]*memScope),
	}, nil
}

// Begin starts a transaction, waiting while another one is open. It returns
// ctx's error if ctx is done first. The caller must end the transaction
// with Commit or Rollback; until then no other transaction can begin.
func (m *Memory) Begin(ctx context.Context) (*MemoryTx, error) {
	select {
	case m.writer <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("ledger: begin: %w", ctx.Err())
	}
	return &MemoryTx{m: m}, nil
}

// Get returns the committed decision for (scope, opID), for inspection
// outside any transaction. ok is false when there is none.
func (m *Memory) Get(ctx context.Context, scope, opID string) (d Decision, ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, false, fmt.Errorf("ledger: get %s: %w", opRef(scope, opID), err)
	}
	m.mu.Lock()
	var r row
	if sc := m.scopes[scope]; sc != nil {
		r, ok = sc.decisions[opID]
	}
	m.mu.Unlock()
	if !ok {
		return Decision{}, false, nil
	}
	return r.decision(), true, nil
}

// Floor returns scope's committed floor, as (*SQL).Floor does.
func (m *Memory) Floor(ctx context.Context, scope string) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, fmt.Errorf("ledger: floor of scope %q: %w", scope, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return floorTime(m.committedFloor(scope)), nil
}

// Stats returns the number of committed decisions, of scopes and the
// highest floor.
func (m *Memory) Stats(ctx context.Context) (Stats, error) {
	if err := ctx.Err(); err != nil {
		return Stats{}, fmt.Errorf("ledger: stats: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st, maxFloor := Stats{Scopes: len(m.scopes)}, int64(noFloor)
	for _, sc := range m.scopes {
		st.Entries += len(sc.decisions)
		maxFloor = max(maxFloor, sc.floor)
	}
	st.MaxFloor = floorTime(maxFloor)
	return st, nil
}

// Prune applies retention as of now, with the same rules, chunking and
// bounds as (*SQL).Prune, and returns how many decisions it evicted.
func (m *Memory) Prune(ctx context.Context, now time.Time) (evicted int, err error) {
	st, err := m.Stats(ctx)
	if err != nil {
		return 0, fmt.Errorf("ledger: prune: %w", err)
	}
	return pruneChunks(ctx, func(ctx context.Context) (chunkTx, error) { return m.Begin(ctx) }, st.Entries, m.opts, now)
}

// committedFloor is scope's committed floor; m.mu must be held.
func (m *Memory) committedFloor(scope string) int64 {
	if sc := m.scopes[scope]; sc != nil {
		return sc.floor
	}
	return noFloor
}

// MemoryTx is a transaction of a Memory ledger. Its records, evictions and
// floors are invisible outside it until Commit and are discarded by
// Rollback. It is not safe for concurrent use. After Commit or Rollback
// every method returns sql.ErrTxDone, so a deferred Rollback after Commit is
// harmless.
type MemoryTx struct {
	m *Memory
	// The transaction's changes over the committed state, which cannot
	// change while it holds the writer slot: decisions it recorded,
	// committed decisions it evicted, and floors it raised, by scope.
	added   map[string]map[string]row
	evicted map[string]map[string]bool
	floors  map[string]int64
	done    bool
}

var _ Tx = (*MemoryTx)(nil)

// Lookup implements Tx.
func (tx *MemoryTx) Lookup(ctx context.Context, scope, opID string, opTime time.Time) (Decision, Outcome, error) {
	skip, err := checkLookup(scope, opID, opTime)
	if skip || err != nil {
		return Decision{}, Miss, err
	}
	if err := tx.usable(ctx); err != nil {
		return Decision{}, Miss, fmt.Errorf("ledger: lookup %s: %w", opRef(scope, opID), err)
	}
	r, ok := tx.get(scope, opID)
	if ok {
		return r.decision(), Hit, nil
	}
	return Decision{}, classifyAbsent(opTime.UnixMilli(), tx.floor(scope)), nil
}

// LookupAll implements Tx.
func (tx *MemoryTx) LookupAll(ctx context.Context, scope string, ops []Op) ([]Answer, error) {
	answers := make([]Answer, len(ops))
	for i, op := range ops {
		d, o, err := tx.Lookup(ctx, scope, op.ID, op.Time)
		if err != nil {
			return nil, err
		}
		answers[i] = Answer{Decision: d, Outcome: o}
	}
	return answers, nil
}

// RecordAll implements Tx.
func (tx *MemoryTx) RecordAll(ctx context.Context, ds []Decision) error {
	if err := checkRecordAll(ds); err != nil {
		return err
	}
	if err := tx.usable(ctx); err != nil {
		return fmt.Errorf("ledger: record: %w", err)
	}
	for _, d := range ds {
		if _, err := newRow(d, tx.floor(d.Scope), tx.m.opts.Now); err != nil {
			return err
		}
		if _, held := tx.get(d.Scope, d.OpID); held {
			return alreadyDecided(d.Scope, d.OpID)
		}
	}
	for _, d := range ds {
		if err := tx.Record(ctx, d); err != nil {
			return err // unreachable: every check above passed
		}
	}
	return nil
}

// Record implements Tx.
func (tx *MemoryTx) Record(ctx context.Context, d Decision) error {
	if err := checkRecord(d); err != nil {
		return err
	}
	if err := tx.usable(ctx); err != nil {
		return fmt.Errorf("ledger: record %s: %w", opRef(d.Scope, d.OpID), err)
	}
	r, err := newRow(d, tx.floor(d.Scope), tx.m.opts.Now)
	if err != nil {
		return err
	}
	if _, held := tx.get(r.scope, r.opID); held {
		return alreadyDecided(r.scope, r.opID)
	}
	if tx.added == nil {
		tx.added = make(map[string]map[string]row)
	}
	if tx.added[r.scope] == nil {
		tx.added[r.scope] = make(map[string]row)
	}
	r.digest, r.result = cloneBytes(r.digest), cloneBytes(r.result)
	tx.added[r.scope][r.opID] = r
	return nil
}

// Prune implements Tx.
func (tx *MemoryTx) Prune(ctx context.Context, now time.Time, limit int) (int, bool, error) {
	if err := tx.usable(ctx); err != nil {
		return 0, false, fmt.Errorf("ledger: prune: %w", err)
	}
	return pruneTx(ctx, memEvictor{tx}, tx.m.opts, now, limit)
}

// Commit makes the transaction's records, evictions and floors visible to
// everyone and ends it.
func (tx *MemoryTx) Commit() error {
	if tx.done {
		return fmt.Errorf("ledger: commit: %w", sql.ErrTxDone)
	}
	m := tx.m
	m.mu.Lock()
	scope := func(name string) *memScope {
		sc := m.scopes[name]
		if sc == nil {
			sc = &memScope{decisions: make(map[string]row), floor: noFloor}
			m.scopes[name] = sc
		}
		return sc
	}
	for name, ids := range tx.evicted {
		for id := range ids {
			delete(m.scopes[name].decisions, id)
		}
	}
	for name, rows := range tx.added {
		maps.Copy(scope(name).decisions, rows)
	}
	for name, f := range tx.floors {
		sc := scope(name)
		sc.floor = max(sc.floor, f)
	}
	m.mu.Unlock()
	tx.end()
	return nil
}

// Rollback discards the transaction's changes and ends it.
func (tx *MemoryTx) Rollback() error {
	if tx.done {
		return fmt.Errorf("ledger: rollback: %w", sql.ErrTxDone)
	}
	tx.end()
	return nil
}

func (tx *MemoryTx) end() {
	tx.done = true
	tx.added, tx.evicted, tx.floors = nil, nil, nil
	<-tx.m.writer
}

func (tx *MemoryTx) usable(ctx context.Context) error {
	if tx.done {
		return sql.ErrTxDone
	}
	return ctx.Err()
}

// get returns the decision (scope, opID) as the transaction sees it.
func (tx *MemoryTx) get(scope, opID string) (row, bool) {
	if r, ok := tx.added[scope][opID]; ok {
		return r, true
	}
	if tx.evicted[scope][opID] {
		return row{}, false
	}
	tx.m.mu.Lock()
	defer tx.m.mu.Unlock()
	if sc := tx.m.scopes[scope]; sc != nil {
		r, ok := sc.decisions[opID]
		return r, ok
	}
	return row{}, false
}

// floor returns scope's floor as the transaction sees it.
func (tx *MemoryTx) floor(scope string) int64 {
	tx.m.mu.Lock()
	f := tx.m.committedFloor(scope)
	tx.m.mu.Unlock()
	if raised, ok := tx.floors[scope]; ok {
		f = max(f, raised)
	}
	return f
}

// rows returns scope's decisions as the transaction sees them, in eviction
// order: by decision time, then op id.
func (tx *MemoryTx) rows(scope string) []row {
	rs := tx.unordered(scope)
	slices.SortFunc(rs, func(a, b row) int {
		return cmp.Or(cmp.Compare(a.decidedMs, b.decidedMs), cmp.Compare(a.opID, b.opID))
	})
	return rs
}

// unordered returns scope's decisions as the transaction sees them.
func (tx *MemoryTx) unordered(scope string) []row {
	var rs []row
	tx.m.mu.Lock()
	if sc := tx.m.scopes[scope]; sc != nil {
		for id, r := range sc.decisions {
			if !tx.evicted[scope][id] {
				rs = append(rs, r)
			}
		}
	}
	tx.m.mu.Unlock()
	for _, r := range tx.added[scope] {
		rs = append(rs, r)
	}
	return rs
}

// scopeNames returns, in byte order, every scope with decisions as the
// transaction sees it or with a committed entry.
func (tx *MemoryTx) scopeNames() []string {
	tx.m.mu.Lock()
	names := slices.Collect(maps.Keys(tx.m.scopes))
	for name := range tx.added {
		if _, committed := tx.m.scopes[name]; !committed {
			names = append(names, name)
		}
	}
	tx.m.mu.Unlock()
	slices.Sort(names)
	return names
}

// memEvictor keeps the scopeEvictor methods off MemoryTx's method set.
type memEvictor struct{ tx *MemoryTx }

func (e memEvictor) nextCandidate(_ context.Context, from string, inclusive bool, cutoff int64, maxEntries int) (string, bool, error) {
	for _, name := range e.tx.scopeNames() {
		if name < from || (name == from && !inclusive) {
			continue
		}
		rs := e.tx.unordered(name)
		if len(rs) > maxEntries || slices.ContainsFunc(rs, func(r row) bool { return r.decidedMs <= cutoff }) {
			return name, true, nil
		}
	}
	return "", false, nil
}

func (e memEvictor) evictScope(_ context.Context, scope string, cutoff int64, maxEntries, limit int) (int, error) {
	tx := e.tx
	rs := tx.rows(scope)
	victims := rs[:min(limit, evictable(rs, cutoff, maxEntries))]
	if len(victims) == 0 {
		return 0, nil
	}
	newest := int64(noFloor)
	for _, r := range victims {
		newest = max(newest, r.opMs)
		if _, mine := tx.added[scope][r.opID]; mine {
			delete(tx.added[scope], r.opID)
			continue
		}
		if tx.evicted == nil {
			tx.evicted = make(map[string]map[string]bool)
		}
		if tx.evicted[scope] == nil {
			tx.evicted[scope] = make(map[string]bool)
		}
		tx.evicted[scope][r.opID] = true
	}
	if tx.floors == nil {
		tx.floors = make(map[string]int64)
	}
	if f, ok := tx.floors[scope]; !ok || f < newest {
		tx.floors[scope] = newest
	}
	return len(victims), nil
}

// evictable is the length of the evictable prefix of rs, a scope's
// decisions in eviction order: those decided at or before cutoff, or beyond
// the newest maxEntries, whichever prefix is longer.
func evictable(rs []row, cutoff int64, maxEntries int) int {
	aged := sort.Search(len(rs), func(i int) bool { return rs[i].decidedMs > cutoff })
	return max(aged, len(rs)-maxEntries)
}
