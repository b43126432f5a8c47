package client

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// stmtCache holds the replica's write statements, each prepared once on
// the database (and by database/sql once per connection) instead of once
// per execution: a settled batch runs four statements per write.
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func (c *stmtCache) get(ctx context.Context, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.m[query]; ok {
		return s, nil
	}
	s, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = map[string]*sql.Stmt{}
	}
	c.m[query] = s
	return s, nil
}

func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, s := range c.m {
		errs = append(errs, s.Close())
	}
	c.m = nil
	return errors.Join(errs...)
}

// queryRow runs a cached read statement on the pool. It is for point
// reads (an index lookup, microseconds): they are not cancelled, since a
// cancellable context costs each of them a goroutine in database/sql and
// a hand-off in the driver, more than the read itself.
func (r *replica) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	ctx = context.WithoutCancel(ctx)
	s, err := r.stmts.get(ctx, query)
	if err != nil {
		// A statement that does not prepare fails the same way unprepared;
		// its error then comes from Scan.
		return r.db.QueryRowContext(ctx, query, args...)
	}
	return s.QueryRowContext(ctx, args...)
}

// txStmts runs cached statements in one transaction, binding each to it
// once.
type txStmts struct {
	ctx   context.Context
	tx    *sql.Tx
	cache *stmtCache
	bound map[string]*sql.Stmt
	// fields are the scope declarations the records' scope values are
	// read by (nil: none known).
	fields *scopeFields
	// cursor is the stored feed cursor, read on first use (keepsRow).
	cursor *uint64
}

func (r *replica) inTx(ctx context.Context, tx *sql.Tx) *txStmts {
	return &txStmts{ctx: ctx, tx: tx, cache: &r.stmts, bound: map[string]*sql.Stmt{}, fields: r.fields.Load()}
}

func (x *txStmts) exec(query string, args ...any) error {
	s, ok := x.bound[query]
	if !ok {
		prepared, err := x.cache.get(x.ctx, query)
		if err != nil {
			return err
		}
		s = x.tx.StmtContext(x.ctx, prepared)
		x.bound[query] = s
	}
	_, err := s.ExecContext(x.ctx, args...)
	return err
}
