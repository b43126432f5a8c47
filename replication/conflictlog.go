package replication

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/syncd-dev/syncd/syncproto"
)

// ConflictEntry is one row of the conflict log: a write that lost (or was
// merged), the state that won, and which policy decided.
type ConflictEntry struct {
	// ID is assigned by Insert; ids only grow and are never reused.
	ID     int64
	Tenant string
	Model  string
	Key    string
	Policy syncproto.Policy
	// Reason is why the loser lost (see the Reason constants).
	Reason string
	// Loser is the proposal that was not applied as sent (for a hook's
	// merge, the incoming write that was merged).
	Loser Side
	// Winner is the state that stands; a zero Side when the key does not
	// exist.
	Winner Side
	// DecidedAt is stamped by Insert, millisecond precision.
	DecidedAt time.Time
}

// DefaultConflictRetention is the conflict log's retention when
// ConflictLogOptions.Retention leaves a field zero: each tenant's newest
// 10,000 rows, none older than seven days.
var DefaultConflictRetention = Retention{MaxEntries: 10_000, MaxAge: 7 * 24 * time.Hour}

// List limits.
const (
	// DefaultConflictListLimit is the page size when ConflictFilter.Limit
	// is 0.
	DefaultConflictListLimit = 100
	// MaxConflictListLimit caps ConflictFilter.Limit.
	MaxConflictListLimit = 1000
)

// ConflictLogOptions configures a ConflictLog. The zero value means
// DefaultConflictRetention and time.Now.
type ConflictLogOptions struct {
	// Retention bounds the log for Prune; zero fields take
	// DefaultConflictRetention's.
	Retention Retention
	// Now stamps DecidedAt and is the reference for age-based pruning; nil
	// means time.Now.
	Now func() time.Time
}

// ConflictFilter selects conflict-log rows, newest first.
type ConflictFilter struct {
	// Scope selects the tenant (or all tenants) and models.
	Scope Scope
	// Since, when not zero, selects rows decided at or after it.
	Since time.Time
	// BeforeID, when not zero, selects rows with a smaller id: pass the
	// last id of a page to get the next (older) page.
	BeforeID int64
	// Limit is the most rows returned; 0 means DefaultConflictListLimit,
	// values above MaxConflictListLimit are lowered to it.
	Limit int
}

// ConflictLog records losers of conflicts in a table (conflicts) of the
// server's SQLite database, in the same transaction as the decision. It is
// bounded by Prune. A ConflictLog is safe for concurrent use.
type ConflictLog struct {
	db        *sql.DB
	retention Retention
	now       func() time.Time
}

// NewConflictLog returns the conflict log kept in db, whose table Migrate
// made (OpenStore runs it). db must be a go-sqlite3 ("sqlite3") handle.
func NewConflictLog(ctx context.Context, db *sql.DB, opts ConflictLogOptions) (*ConflictLog, error) {
	c := &ConflictLog{
		db:        db,
		retention: opts.Retention.withDefaults(DefaultConflictRetention),
		now:       opts.Now,
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

const conflictColumns = `tenant, model, key, policy, reason,
	loser_op_id, loser_version, loser_value, loser_hlc, loser_deleted,
	winner_op_id, winner_version, winner_value, winner_hlc, winner_deleted, decided_at`

// Insert adds c within tx (the transaction applying the decision) and
// returns its id; c.ID is ignored, and a zero c.DecidedAt is stamped from
// the log's clock. On error the caller rolls tx back.
func (l *ConflictLog) Insert(ctx context.Context, tx *sql.Tx, c ConflictEntry) (int64, error) {
	decidedAt := c.DecidedAt
	if decidedAt.IsZero() {
		decidedAt = l.now()
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO conflicts (`+conflictColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		c.Tenant, c.Model, c.Key, c.Policy, c.Reason,
		c.Loser.OpID, int64(c.Loser.Version), c.Loser.Value, c.Loser.HLC.String(), c.Loser.Deleted,
		c.Winner.OpID, int64(c.Winner.Version), c.Winner.Value, c.Winner.HLC.String(), c.Winner.Deleted,
		decidedAt.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("insert conflict %s/%s: %w", c.Model, c.Key, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("insert conflict %s/%s: %w", c.Model, c.Key, err)
	}
	return id, nil
}

// List returns the committed rows selected by f, newest first.
func (l *ConflictLog) List(ctx context.Context, f ConflictFilter) ([]ConflictEntry, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultConflictListLimit
	}
	limit = min(limit, MaxConflictListLimit)
	where, args := scopeWhere(f.Scope)
	if !f.Since.IsZero() {
		where += " AND decided_at >= ?"
		args = append(args, f.Since.UnixMilli())
	}
	if f.BeforeID > 0 {
		where += " AND id < ?"
		args = append(args, f.BeforeID)
	}
	rows, err := l.db.QueryContext(ctx, `SELECT id, `+conflictColumns+` FROM conflicts
		WHERE 1 = 1`+where+` ORDER BY id DESC LIMIT ?`, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("list conflicts: %w", err)
	}
	defer rows.Close()
	var out []ConflictEntry
	for rows.Next() {
		c, err := scanConflict(rows)
		if err != nil {
			return nil, fmt.Errorf("list conflicts: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list conflicts: %w", err)
	}
	return out, nil
}

// scanConflict reads one row of the List query.
func scanConflict(rows *sql.Rows) (ConflictEntry, error) {
	var (
		c                   ConflictEntry
		loserHLC, winnerHLC string
		decidedAt           int64
	)
	err := rows.Scan(&c.ID, &c.Tenant, &c.Model, &c.Key, &c.Policy, &c.Reason,
		&c.Loser.OpID, &c.Loser.Version, &c.Loser.Value, &loserHLC, &c.Loser.Deleted,
		&c.Winner.OpID, &c.Winner.Version, &c.Winner.Value, &winnerHLC, &c.Winner.Deleted, &decidedAt)
	if err != nil {
		return ConflictEntry{}, err
	}
	c.DecidedAt = time.UnixMilli(decidedAt).UTC()
	if c.Loser.HLC, err = syncproto.ParseTimestamp(loserHLC); err != nil {
		return ConflictEntry{}, fmt.Errorf("conflict %d loser: %w", c.ID, err)
	}
	if c.Winner.HLC, err = syncproto.ParseTimestamp(winnerHLC); err != nil {
		return ConflictEntry{}, fmt.Errorf("conflict %d winner: %w", c.ID, err)
	}
	return c, nil
}

// Prune removes the rows beyond the retention, in bounded chunks each
// committed on its own, and returns how many it removed (also when ctx
// ends midway). The count bound is per tenant: one tenant's conflicts never
// push another's out. Run it periodically; Insert never prunes.
func (l *ConflictLog) Prune(ctx context.Context) (int64, error) {
	var total int64
	now := l.now()
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("prune conflicts: %w", err)
		}
		n, err := l.prune(ctx, l.db, now, l.retention.Chunk)
		total += n
		if err != nil {
			return total, fmt.Errorf("prune conflicts: %w", err)
		}
		if n < int64(l.retention.Chunk) {
			return total, nil
		}
	}
}

// PruneIn removes, inside tx, at most limit rows beyond the retention as
// of now, and returns how many it removed. It reads no clock: replicas
// that run it with the same now on the same rows remove the same rows (a
// replicated pruning job).
func (l *ConflictLog) PruneIn(ctx context.Context, tx *sql.Tx, now time.Time, limit int) (int64, error) {
	n, err := l.prune(ctx, tx, now, limit)
	if err != nil {
		return 0, fmt.Errorf("prune conflicts: %w", err)
	}
	return n, nil
}

// prune deletes at most limit rows, oldest first: those older than the age
// bound, then those beyond the count bound of their tenant.
func (l *ConflictLog) prune(ctx context.Context, q execer, now time.Time, limit int) (int64, error) {
	var total int64
	if l.retention.MaxAge >= 0 {
		res, err := q.ExecContext(ctx, `DELETE FROM conflicts WHERE id IN
			(SELECT id FROM conflicts WHERE decided_at < ? ORDER BY id LIMIT ?)`,
			now.Add(-l.retention.MaxAge).UnixMilli(), limit)
		if err != nil {
			return 0, err
		}
		if total, err = res.RowsAffected(); err != nil || total >= int64(limit) {
			return total, err
		}
	}
	if l.retention.MaxEntries >= 0 {
		res, err := q.ExecContext(ctx, `DELETE FROM conflicts WHERE id IN
			(SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY tenant ORDER BY id DESC) AS newer FROM conflicts)
			 WHERE newer > ? ORDER BY id LIMIT ?)`,
			l.retention.MaxEntries, int64(limit)-total)
		if err != nil {
			return total, err
		}
		n, err := res.RowsAffected()
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
