package replication

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/ledger"
)

// Memory is the state machine's state held in memory: records, oplog,
// conflict log and a ledger.Memory. It decides batches with the same code
// as Store (Apply, Decide) and serves the change feed and snapshots with
// the same rules (Read, Snapshot), so a deterministic simulation can run
// the server's decisions without SQLite. Each Apply is one atomic commit,
// which it reports to the log's waiters itself (Committed).
//
// Its oplog is a Log held to the same conformance suite as SQLiteLog
// (package logtest): the same seqs, pages, cursor errors, wake-ups and
// per-tenant retention. It is not durable: a process that ends loses it.
//
// A Memory is safe for concurrent use; Apply calls are serialized.
type Memory struct {
	notifier  *headNotifier
	retention Retention
	now       func() time.Time

	mu        sync.Mutex
	ledger    *ledger.Memory
	records   map[memRecordKey]Record
	entries   []Entry           // seq order; entries[i].Seq > entries[i-1].Seq
	head      uint64            // the newest seq ever assigned
	floors    map[string]uint64 // each tenant's newest seq compacted away
	conflicts []ConflictEntry
	scopes    *Scopes
}

// DeclareScopes makes m check and stamp writes of the models scopes cover,
// as a Store with StoreOptions.Scopes does. Call it before the first Apply.
func (m *Memory) DeclareScopes(scopes *Scopes) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.scopes = scopes
}

var _ Log = (*Memory)(nil)

type memRecordKey struct{ tenant, model, key string }

// MemoryOptions configures a Memory. The zero value means the ledger's
// defaults, DefaultLogRetention and time.Now.
type MemoryOptions struct {
	// Ledger configures the replay ledger (ledger.NewMemory).
	Ledger ledger.Options
	// Log bounds the oplog for Compact, each tenant on its own, as
	// SQLiteLog's LogOptions.Retention does; zero fields take
	// DefaultLogRetention's. Chunk has no effect: a Memory compacts under
	// one lock.
	Log Retention
	// Now stamps AppliedAt where an entry has none and is the reference
	// for Compact's age bound; nil means Ledger.Now, then time.Now.
	Now func() time.Time
}

// NewMemory returns an empty Memory.
func NewMemory(opts MemoryOptions) (*Memory, error) {
	l, err := ledger.NewMemory(opts.Ledger)
	if err != nil {
		return nil, err
	}
	now := opts.Now
	if now == nil {
		now = opts.Ledger.Now
	}
	if now == nil {
		now = time.Now
	}
	return &Memory{
		notifier: newHeadNotifier(0), retention: opts.Log.withDefaults(DefaultLogRetention), now: now,
		ledger: l, records: map[memRecordKey]Record{}, floors: map[string]uint64{},
	}, nil
}

// Ledger returns the memory's replay ledger (for pruning and inspection).
func (m *Memory) Ledger() *ledger.Memory { return m.ledger }

// Apply decides b and commits its effects atomically (see the package
// function Apply), then reports the commit to the log's waiters.
func (m *Memory) Apply(ctx context.Context, b *Batch) (Effects, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	tx, err := m.ledger.Begin(ctx)
	if err != nil {
		return Effects{}, err
	}
	st := &memState{m: m, tx: tx}
	fx, err := Apply(ctx, st, b)
	if err != nil {
		tx.Rollback()
		return Effects{}, err
	}
	if err := tx.Commit(); err != nil {
		return Effects{}, err
	}
	m.commit(st.logged, fx.Conflicts)
	m.notifier.Committed(m.head)
	return fx, nil
}

// memState is a Memory inside one Apply: reads see committed state; Save
// stages the ledger rows in the ledger transaction and checks the
// entries, which Apply commits once the ledger did.
type memState struct {
	m      *Memory
	tx     *ledger.MemoryTx
	logged []Entry // Save's entries as the log keeps them
}

func (st *memState) Load(ctx context.Context, b *Batch) (View, error) {
	v := View{Records: map[RecordKey]Record{}, Head: st.m.head}
	var err error
	if v.Ledger, err = lookupBatch(ctx, st.tx, b); err != nil {
		return View{}, err
	}
	for _, m := range b.admitted() {
		if rec, ok := st.m.records[memRecordKey{b.Tenant, m.Model, m.Key}]; ok {
			v.Records[RecordKey{m.Model, m.Key}] = rec
		}
	}
	if err := loadScopes(ctx, st.m.scopes, &v, b, st); err != nil {
		return View{}, err
	}
	return v, nil
}

// memberCounts implements memberSource over m's records.
func (st *memState) memberCounts(_ context.Context, tenant, model string, values, users []string) (map[[2]string]int, error) {
	out := map[[2]string]int{}
	for k, rec := range st.m.records {
		if k.tenant == tenant && k.model == model && !rec.Deleted && slices.Contains(values, rec.ScopeValue) && slices.Contains(users, rec.Member) {
			out[[2]string{rec.ScopeValue, rec.Member}]++
		}
	}
	return out, nil
}

// founded implements memberSource over m's records.
func (st *memState) founded(_ context.Context, tenant, model string, values []string) (map[string]bool, error) {
	out := map[string]bool{}
	for k, rec := range st.m.records {
		if k.tenant == tenant && k.model == model && slices.Contains(values, rec.ScopeValue) {
			out[rec.ScopeValue] = true
		}
	}
	return out, nil
}

func (st *memState) Save(ctx context.Context, fx *Effects) error {
	logged, err := nextEntries(fx.Entries, st.m.head, st.m.now)
	if err != nil {
		return fmt.Errorf("save batch: %w", err)
	}
	if err := st.tx.RecordAll(ctx, fx.Decisions); err != nil {
		return fmt.Errorf("save batch: %w", err)
	}
	st.logged = logged
	return nil
}

// commit makes logged entries, their records and conflicts visible. m.mu
// is held.
func (m *Memory) commit(logged []Entry, conflicts []ConflictEntry) {
	for _, e := range logged {
		m.entries = append(m.entries, e)
		m.head = e.Seq
		m.records[memRecordKey{e.Tenant, e.Model, e.Key}] = e.Record()
	}
	for _, c := range conflicts {
		c.ID = int64(len(m.conflicts) + 1)
		m.conflicts = append(m.conflicts, c)
	}
}

// Committed reports that appends up to head were committed and wakes the
// waiters (see Log.Committed). Apply reports its own commits.
func (m *Memory) Committed(head uint64) { m.notifier.Committed(head) }

// Notify returns a channel closed once a commit beyond after was reported
// (see Log.Notify).
func (m *Memory) Notify(after uint64) <-chan struct{} { return m.notifier.Notify(after) }

// Wait blocks until a commit beyond after was reported, or ctx ends (see
// Log.Wait).
func (m *Memory) Wait(ctx context.Context, after uint64) error { return m.notifier.Wait(ctx, after) }

// Read returns the entries after req.After in req.Scope, with the same
// paging, per-tenant cursor checks and errors as SQLiteLog.Read.
func (m *Memory) Read(ctx context.Context, req ReadRequest) (Page, error) {
	if err := ctx.Err(); err != nil {
		return Page{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.bounds(req.Scope)
	if err := b.Check(req.After); err != nil {
		return Page{}, fmt.Errorf("read oplog after %d: %w", req.After, err)
	}
	return req.PageOf(m.entries, b.Head), nil
}

// Bounds returns the retained range of the oplog as a reader of scope sees
// it (see Bounds). It never fails.
func (m *Memory) Bounds(_ context.Context, scope Scope) (Bounds, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bounds(scope), nil
}

func (m *Memory) bounds(scope Scope) Bounds {
	b := Bounds{Head: m.head, Oldest: m.head + 1, Floor: Floors{Tenants: m.floors}.Of(scope)}
	if len(m.entries) > 0 {
		b.Oldest = m.entries[0].Seq
	}
	return b
}

// Floors returns the tenants' floors above seq. It never fails.
func (m *Memory) Floors(_ context.Context, above uint64) (Floors, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := Floors{Tenants: map[string]uint64{}}
	for t, floor := range m.floors {
		if floor > above {
			f.Tenants[t] = floor
		}
	}
	return f, nil
}

// Compact removes the oldest entries beyond the retention
// MemoryOptions.Log set, by the rules of SQLiteLog.Compact: first the
// longest run of the log's oldest entries applied before the age bound,
// then each tenant's oldest entries beyond the count bound. It raises the
// floor of each tenant it removed entries of, and no other, and returns
// how many it removed. It never fails.
func (m *Memory) Compact(ctx context.Context) (int64, error) {
	var cutoff int64 = math.MinInt64
	if m.retention.MaxAge >= 0 {
		cutoff = m.now().Add(-m.retention.MaxAge).UnixMilli()
	}
	keep := m.retention.MaxEntries
	if keep < 0 {
		keep = math.MaxInt64
	}
	return int64(m.compact(cutoff, keep)), nil
}

// CompactTo removes each tenant's oldest entries until at most keep of its
// entries remain, whatever the retention, raises the floors of the tenants
// it removed entries of, and returns how many it removed: a compaction job
// with a bound of its own, as the simulation's server runs. Readers of
// such a tenant whose cursor falls behind its floor get ErrCursorExpired,
// as with Compact; other tenants' readers are not affected.
func (m *Memory) CompactTo(keep int) int {
	return m.compact(math.MinInt64, int64(max(keep, 0)))
}

// compact removes the longest run of the oldest entries applied before
// cutoff (Unix milliseconds), then each tenant's oldest entries beyond
// keep, raising the floors of the tenants it removed entries of.
func (m *Memory) compact(cutoff, keep int64) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	aged := 0
	for aged < len(m.entries) && m.entries[aged].AppliedAt.UnixMilli() < cutoff {
		aged++
	}
	held := map[string]int64{}
	for _, e := range m.entries[aged:] {
		held[e.Tenant]++
	}
	// A new array: pages read before share the old one (PageOf).
	kept := make([]Entry, 0, len(m.entries)-aged)
	for i, e := range m.entries {
		if i < aged || held[e.Tenant] > keep {
			if i >= aged {
				held[e.Tenant]--
			}
			m.floors[e.Tenant] = e.Seq
			continue
		}
		kept = append(kept, e)
	}
	n := len(m.entries) - len(kept)
	m.entries = kept
	return n
}

// Snapshot returns every record in scope, ordered by tenant, model and key
// (tombstones included), and the head it reflects, like Records.Snapshot.
func (m *Memory) Snapshot(scope Scope) (uint64, []Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Record
	for _, rec := range m.records {
		if scope.Holds(rec) {
			out = append(out, rec)
		}
	}
	slices.SortFunc(out, func(a, b Record) int {
		switch {
		case a.Tenant != b.Tenant:
			return cmp.Compare(a.Tenant, b.Tenant)
		case a.Model != b.Model:
			return cmp.Compare(a.Model, b.Model)
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return m.head, out
}

// Conflicts returns the conflict-log rows in scope, oldest first.
func (m *Memory) Conflicts(scope Scope) []ConflictEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []ConflictEntry
	for _, c := range m.conflicts {
		if scope.Selects(c.Tenant, c.Model) {
			out = append(out, c)
		}
	}
	return out
}

// Selects reports whether s selects a row of tenant and model (the rule
// scopeWhere writes in SQL).
func (s Scope) Selects(tenant, model string) bool {
	if !s.AllTenants && tenant != s.Tenant {
		return false
	}
	return s.AllModels || slices.Contains(s.Models, model)
}
