package ledger

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Memory is a ledger held in memory, with the semantics of SQL, for tests
// and for embedders without a database. It is safe for concurrent use.
//
// Like SQLite with BEGIN IMMEDIATE, it has a single writer: Begin waits
// while another transaction is open, and so does each eviction chunk of
// Prune, so transactions are serializable. Get and Stats never wait for a
// transaction; they see committed state only. Prune sorts the held
// decisions once per chunk, which is fine for tests and small ledgers.
type Memory struct {
	opts Options
	// writer is a one-slot semaphore held by an open MemoryTx or by one
	// eviction chunk.
	writer chan struct{}

	// pruneMu serializes Prune calls, as in SQL.
	pruneMu sync.Mutex

	mu        sync.Mutex // guards decisions and floor
	decisions map[memKey]row
	floor     int64
}

type memKey struct{ scope, opID string }

// NewMemory returns an empty in-memory ledger. It fails only on invalid
// options.
func NewMemory(opts Options) (*Memory, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Memory{
		opts:      o,
		writer:    make(chan struct{}, 1),
		decisions: make(map[memKey]row),
		floor:     noFloor,
	}, nil
}

// Begin starts a transaction, waiting while another one is open. It returns
// ctx's error if ctx is done first. The caller must end the transaction
// with Commit or Rollback; until then no other transaction can begin.
func (m *Memory) Begin(ctx context.Context) (*MemoryTx, error) {
	if err := m.acquire(ctx); err != nil {
		return nil, fmt.Errorf("ledger: begin: %w", err)
	}
	return &MemoryTx{m: m, pending: make(map[memKey]row)}, nil
}

// Get returns the committed decision for (scope, opID), for inspection
// outside any transaction. ok is false when there is none.
func (m *Memory) Get(ctx context.Context, scope, opID string) (d Decision, ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, false, fmt.Errorf("ledger: get %s: %w", opRef(scope, opID), err)
	}
	m.mu.Lock()
	r, ok := m.decisions[memKey{scope, opID}]
	m.mu.Unlock()
	if !ok {
		return Decision{}, false, nil
	}
	return r.decision(), true, nil
}

// Stats returns the number of committed decisions and the coverage floor.
func (m *Memory) Stats(ctx context.Context) (Stats, error) {
	if err := ctx.Err(); err != nil {
		return Stats{}, fmt.Errorf("ledger: stats: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return Stats{Entries: len(m.decisions), Floor: floorTime(m.floor)}, nil
}

// Prune applies retention as of now, with the same rules and chunking as
// (*SQL).Prune, and returns how many decisions it evicted.
func (m *Memory) Prune(ctx context.Context, now time.Time) (evicted int, err error) {
	m.pruneMu.Lock()
	defer m.pruneMu.Unlock()
	return prune(ctx, memEvictor{m}, m.opts, now)
}

func (m *Memory) acquire(ctx context.Context) error {
	select {
	case m.writer <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *Memory) release() { <-m.writer }

// memEvictor keeps evictOldest and count off Memory's method set.
type memEvictor struct{ m *Memory }

func (e memEvictor) evictOldest(ctx context.Context, cutoff int64, limit int, raise int64) (int, error) {
	m := e.m
	if err := m.acquire(ctx); err != nil {
		return 0, err
	}
	defer m.release()
	m.mu.Lock()
	defer m.mu.Unlock()

	var old []row
	for _, r := range m.decisions {
		if r.opMs <= cutoff {
			old = append(old, r)
		}
	}
	slices.SortFunc(old, func(a, b row) int { return cmp.Compare(a.opMs, b.opMs) })
	old = old[:min(limit, len(old))]
	newest := raise
	for _, r := range old {
		delete(m.decisions, memKey{r.scope, r.opID})
		newest = max(newest, r.opMs)
	}
	m.floor = max(m.floor, newest)
	return len(old), nil
}

func (e memEvictor) count(ctx context.Context) (int, error) {
	st, err := e.m.Stats(ctx)
	return st.Entries, err
}

// MemoryTx is a transaction of a Memory ledger. Its records are invisible
// outside it until Commit and are discarded by Rollback. It is not safe for
// concurrent use. After Commit or Rollback every method returns
// sql.ErrTxDone, so a deferred Rollback after Commit is harmless.
type MemoryTx struct {
	m       *Memory
	pending map[memKey]row
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
	k := memKey{scope, opID}
	if r, ok := tx.pending[k]; ok {
		return r.decision(), Hit, nil
	}
	tx.m.mu.Lock()
	r, ok := tx.m.decisions[k]
	floor := tx.m.floor
	tx.m.mu.Unlock()
	if ok {
		return r.decision(), Hit, nil
	}
	return Decision{}, classifyAbsent(opTime.UnixMilli(), floor), nil
}

// Record implements Tx.
func (tx *MemoryTx) Record(ctx context.Context, d Decision) error {
	if err := checkRecord(d); err != nil {
		return err
	}
	if err := tx.usable(ctx); err != nil {
		return fmt.Errorf("ledger: record %s: %w", opRef(d.Scope, d.OpID), err)
	}
	// The floor cannot move while this transaction holds the writer slot.
	tx.m.mu.Lock()
	floor := tx.m.floor
	_, committed := tx.m.decisions[memKey{d.Scope, d.OpID}]
	tx.m.mu.Unlock()
	r, err := newRow(d, floor, tx.m.opts.Now)
	if err != nil {
		return err
	}
	k := memKey{r.scope, r.opID}
	if _, pending := tx.pending[k]; pending || committed {
		return alreadyDecided(r.scope, r.opID)
	}
	tx.pending[k] = r
	return nil
}

// Commit makes the transaction's records visible to everyone and ends it.
func (tx *MemoryTx) Commit() error {
	if tx.done {
		return fmt.Errorf("ledger: commit: %w", sql.ErrTxDone)
	}
	tx.m.mu.Lock()
	for k, r := range tx.pending {
		tx.m.decisions[k] = r
	}
	tx.m.mu.Unlock()
	tx.end()
	return nil
}

// Rollback discards the transaction's records and ends it.
func (tx *MemoryTx) Rollback() error {
	if tx.done {
		return fmt.Errorf("ledger: rollback: %w", sql.ErrTxDone)
	}
	tx.end()
	return nil
}

func (tx *MemoryTx) end() {
	tx.done = true
	tx.pending = nil
	tx.m.release()
}

func (tx *MemoryTx) usable(ctx context.Context) error {
	if tx.done {
		return sql.ErrTxDone
	}
	return ctx.Err()
}
