package replication

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/syncd-dev/syncd/ledger"
)

// Memory is the state machine's state held in memory: records, oplog,
// conflict log and a ledger.Memory. It decides batches with the same code
// as Store (Apply, Decide) and serves the change feed and snapshots with
// the same rules (Read, Snapshot), so a deterministic simulation can run
// the server's decisions without SQLite. Each Save is one atomic commit.
//
// A Memory is safe for concurrent use; Apply calls are serialized.
type Memory struct {
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

var _ Feed = (*Memory)(nil)

type memRecordKey struct{ tenant, model, key string }

// NewMemory returns an empty Memory whose ledger uses opts.
func NewMemory(opts ledger.Options) (*Memory, error) {
	l, err := ledger.NewMemory(opts)
	if err != nil {
		return nil, err
	}
	return &Memory{ledger: l, records: map[memRecordKey]Record{}, floors: map[string]uint64{}}, nil
}

// Ledger returns the memory's replay ledger (for pruning and inspection).
func (m *Memory) Ledger() *ledger.Memory { return m.ledger }

// Apply decides b and commits its effects atomically (see the package
// function Apply).
func (m *Memory) Apply(ctx context.Context, b *Batch) (Effects, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	tx, err := m.ledger.Begin(ctx)
	if err != nil {
		return Effects{}, err
	}
	fx, err := Apply(ctx, memState{m: m, tx: tx}, b)
	if err != nil {
		tx.Rollback()
		return Effects{}, err
	}
	if err := tx.Commit(); err != nil {
		return Effects{}, err
	}
	m.commit(&fx)
	return fx, nil
}

// memState is a Memory inside one Apply: reads see committed state; Save
// stages the ledger rows in the ledger transaction and checks the rest,
// which Apply commits once the ledger did.
type memState struct {
	m  *Memory
	tx *ledger.MemoryTx
}

func (st memState) Load(ctx context.Context, b *Batch) (View, error) {
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
func (st memState) memberCounts(_ context.Context, tenant, model string, values, users []string) (map[[2]string]int, error) {
	out := map[[2]string]int{}
	for k, rec := range st.m.records {
		if k.tenant == tenant && k.model == model && !rec.Deleted && slices.Contains(values, rec.ScopeValue) && slices.Contains(users, rec.Member) {
			out[[2]string{rec.ScopeValue, rec.Member}]++
		}
	}
	return out, nil
}

// founded implements memberSource over m's records.
func (st memState) founded(_ context.Context, tenant, model string, values []string) (map[string]bool, error) {
	out := map[string]bool{}
	for k, rec := range st.m.records {
		if k.tenant == tenant && k.model == model && slices.Contains(values, rec.ScopeValue) {
			out[rec.ScopeValue] = true
		}
	}
	return out, nil
}

func (st memState) Save(ctx context.Context, fx *Effects) error {
	head := st.m.head
	for _, e := range fx.Entries {
		unassigned := e
		unassigned.Seq = 0
		if err := unassigned.validate(); err != nil {
			return fmt.Errorf("save batch: %w", err)
		}
		if e.Seq != head+1 {
			return fmt.Errorf("save batch: %w: op %s decided as seq %d after head %d", ErrMalformedBatch, e.OpID, e.Seq, head)
		}
		head = e.Seq
	}
	if err := st.tx.RecordAll(ctx, fx.Decisions); err != nil {
		return fmt.Errorf("save batch: %w", err)
	}
	return nil
}

// commit makes fx's entries, records and conflicts visible.
func (m *Memory) commit(fx *Effects) {
	for _, e := range fx.Entries {
		m.entries = append(m.entries, e)
		m.head = e.Seq
		m.records[memRecordKey{e.Tenant, e.Model, e.Key}] = e.Record()
	}
	for _, c := range fx.Conflicts {
		c.ID = int64(len(m.conflicts) + 1)
		m.conflicts = append(m.conflicts, c)
	}
}

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

// Compact removes each tenant's oldest entries until at most keep of its
// entries remain, raises the floors of the tenants it removed entries of,
// and returns how many it removed. Readers of such a tenant whose cursor
// falls behind its floor get ErrCursorExpired, as with SQLiteLog.Compact;
// other tenants' readers are not affected.
func (m *Memory) Compact(keep int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	held := map[string]int{}
	for _, e := range m.entries {
		held[e.Tenant]++
	}
	// A new array: pages read before share the old one (PageOf).
	kept := make([]Entry, 0, len(m.entries))
	for _, e := range m.entries {
		if held[e.Tenant] > keep {
			held[e.Tenant]--
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
