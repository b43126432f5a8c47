package replication

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// readTx runs fn inside one deferred read transaction on a dedicated
// connection of db, so every query fn makes sees the same snapshot. It
// issues BEGIN DEFERRED itself rather than db.BeginTx, so that a handle
// opened with _txlock=immediate (the usual choice for the apply path) does
// not make readers take the write lock. It always ends with ROLLBACK: a
// read has nothing to commit.
func readTx(ctx context.Context, db *sql.DB, fn func(conn *sql.Conn) error) (err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if closeErr := conn.Close(); err == nil {
			err = closeErr
		}
	}()
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

// Retention bounds a table that grows with every write (the oplog, the
// conflict log). Pruning removes the oldest rows first, always a prefix, in
// bounded chunks so that no single statement holds the write lock long.
type Retention struct {
	// MaxEntries keeps at most this many of the newest rows. 0 means the
	// store's default; a negative value means no count bound.
	MaxEntries int64
	// MaxAge removes rows older than this. 0 means the store's default; a
	// negative value means no age bound.
	MaxAge time.Duration
	// Chunk is the most rows one delete statement removes; 0 means
	// DefaultPruneChunk.
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

// pruneTable names the columns pruneOldest works on: an integer id that
// only grows (rows are never removed except as a prefix, so ids are
// contiguous) and a time in Unix milliseconds.
type pruneTable struct {
	table, id, at string
}

// execer runs a statement: the database handle, or a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// pruneOldest deletes, chunk by chunk each in its own statement, the
// oldest rows of t that exceed ret (already defaulted) as of now (see
// pruneChunk). It stops at the first chunk that removes less than a full
// chunk, or when ctx ends.
func pruneOldest(ctx context.Context, db *sql.DB, t pruneTable, ret Retention, now time.Time) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := pruneChunk(ctx, db, t, ret, now, ret.Chunk)
		total += n
		if err != nil || n < int64(ret.Chunk) {
			return total, err
		}
	}
}

// pruneChunk deletes, in one statement through q, the longest prefix of
// the oldest limit rows of t in which every row is beyond the count bound
// or older than the age bound of ret as of now, so a row with an
// out-of-order time stops the prune rather than leaving a hole. It reads
// nothing but the table, so replicas holding the same rows delete the
// same rows.
func pruneChunk(ctx context.Context, q execer, t pruneTable, ret Retention, now time.Time, limit int) (int64, error) {
	keep := int64(math.MaxInt64)
	if ret.MaxEntries >= 0 {
		keep = ret.MaxEntries
	}
	olderThan := int64(math.MinInt64)
	if ret.MaxAge >= 0 {
		olderThan = now.Add(-ret.MaxAge).UnixMilli()
	}
	// keeper is the first row of the chunk that must stay; everything
	// before it (or the whole chunk when there is none) goes.
	query := fmt.Sprintf(`
WITH chunk AS (SELECT %[2]s AS id, %[3]s AS at FROM %[1]s ORDER BY %[2]s LIMIT ?1),
     bound AS (SELECT coalesce(max(%[2]s), 0) - ?2 AS last FROM %[1]s),
     keeper AS (SELECT min(chunk.id) AS id FROM chunk, bound WHERE chunk.id > bound.last AND chunk.at >= ?3)
DELETE FROM %[1]s WHERE %[2]s <= coalesce((SELECT id - 1 FROM keeper), (SELECT max(id) FROM chunk))`,
		t.table, t.id, t.at)
	res, err := q.ExecContext(ctx, query, limit, keep, olderThan)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
