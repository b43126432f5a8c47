package replication

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// readTx runs fn inside one deferred read transaction on a dedicated
// connection of db, so every query fn makes sees the same snapshot. It
// issues BEGIN DEFERRED itself rather than db.BeginTx, so that a handle
// opened with _txlock=immediate (the usual choice for the apply path) does
// not make readers take the write lock. It always ends with ROLLBACK: a
// read has nothing to commit. setup runs on the connection first, outside
// the transaction (connection settings such as PRAGMA mmap_size).
func readTx(ctx context.Context, db *sql.DB, fn func(conn *sql.Conn) error, setup ...string) (err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if closeErr := conn.Close(); err == nil {
			err = closeErr
		}
	}()
	for _, stmt := range setup {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return err
		}
	}
	if _, err := conn.ExecContext(ctx, "BEGIN DEFERRED"); err != nil {
		return err
	}
	defer func() {
		// Roll back even when ctx is done; if that fails, the connection
		// may still be inside the transaction, so it must not return to
		// the pool.
		if _, rbErr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			err = errors.Join(err, fmt.Errorf("end read transaction: %w", rbErr))
		}
	}()
	return fn(conn)
}

// scopeWhere returns the SQL condition (with a leading " AND ") and
// arguments selecting scope in a table with tenant and model columns.
func scopeWhere(scope Scope) (string, []any) {
	var b strings.Builder
	var args []any
	if !scope.AllTenants {
		b.WriteString(" AND tenant = ?")
		args = append(args, scope.Tenant)
	}
	switch {
	case scope.AllModels:
	case len(scope.Models) == 0:
		b.WriteString(" AND 0 = 1")
	default:
		b.WriteString(" AND model IN (?")
		b.WriteString(strings.Repeat(",?", len(scope.Models)-1))
		b.WriteString(")")
		for _, m := range scope.Models {
			args = append(args, m)
		}
	}
	return b.String(), args
}

// recordsSelect returns the statement selecting cols of the records scope
// holds (scopeWhere, and Follow for scoped models) that meet cond. When
// scope follows scope values it is a UNION ALL of one branch for the
// models no scope covers and one per declared scope with values followed,
// so that each branch reads an index (the primary key, or records_scope
// for the values followed) instead of scanning the tenant; the rows come
// in no particular order.
func recordsSelect(cols, cond string, scope Scope) (string, []any) {
	where, args := scopeWhere(scope)
	base := `SELECT ` + cols + ` FROM records WHERE ` + cond + where
	if scope.Follow == nil || scope.Scopes.Empty() {
		return base, args
	}
	in := func(n int) string { return "(?" + strings.Repeat(",?", n-1) + ")" }
	var (
		branches []string
		all      []any
		covered  []any
	)
	for _, name := range scope.Scopes.Names() {
		d := scope.Scopes.Named(name)
		models := make([]any, 0, len(d.Fields))
		for _, m := range slices.Sorted(maps.Keys(d.Fields)) {
			models = append(models, m)
		}
		covered = append(covered, models...)
		values := scope.Follow[name]
		switch {
		case len(values) == 0:
		case scope.Follow.All(name):
			branches = append(branches, base+` AND model IN `+in(len(models)))
			all = append(append(all, args...), models...)
		default:
			branches = append(branches, base+` AND scope_value IN `+in(len(values))+` AND model IN `+in(len(models)))
			all = append(all, args...)
			for _, v := range values {
				all = append(all, v)
			}
			all = append(all, models...)
		}
	}
	// The models no scope covers: the ranges of model names between the
	// covered ones, each a range of the primary key (a NOT IN would read
	// every covered row of the tenant only to skip it).
	slices.SortFunc(covered, func(a, b any) int { return strings.Compare(a.(string), b.(string)) })
	var gaps []string
	var gapArgs []any
	for i := 0; i <= len(covered); i++ {
		cond := base
		if i > 0 {
			cond += ` AND model > ?`
		}
		if i < len(covered) {
			cond += ` AND model < ?`
		}
		gaps = append(gaps, cond)
		gapArgs = append(gapArgs, args...)
		if i > 0 {
			gapArgs = append(gapArgs, covered[i-1])
		}
		if i < len(covered) {
			gapArgs = append(gapArgs, covered[i])
		}
	}
	return strings.Join(append(gaps, branches...), " UNION ALL "), append(gapArgs, all...)
}

// Retention bounds a table that grows with every write (the oplog, the
// conflict log). Pruning removes the oldest rows first, in bounded chunks
// so that no single statement holds the write lock long.
type Retention struct {
	// MaxEntries keeps at most this many of each tenant's newest rows: one
	// tenant's writes never push another's rows out. 0 means the store's
	// default; a negative value means no count bound.
	MaxEntries int64
	// MaxAge removes rows older than this. 0 means the store's default; a
	// negative value means no age bound.
	MaxAge time.Duration
	// Chunk is the most rows one chunk of pruning removes (one statement
	// of the conflict log's, one transaction of the oplog's compaction);
	// 0 means DefaultPruneChunk.
	Chunk int
}

// DefaultPruneChunk is the rows removed per statement when Retention.Chunk
// is 0.
const DefaultPruneChunk = 1000

// withDefaults fills zero fields from def and DefaultPruneChunk.
func (r Retention) withDefaults(def Retention) Retention {
	if r.MaxEntries == 0 {
		r.MaxEntries = def.MaxEntries
	}
	if r.MaxAge == 0 {
		r.MaxAge = def.MaxAge
	}
	if r.Chunk <= 0 {
		r.Chunk = DefaultPruneChunk
	}
	return r
}

// execer runs a statement: the database handle, or a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}
