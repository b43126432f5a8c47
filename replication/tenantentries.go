package replication

import (
	"context"
	"database/sql"
	"fmt"
)

// TenantEntries is one tenant's retained oplog entries and its floor.
type TenantEntries struct {
	Tenant string
	// Entries counts the tenant's retained entries: oplog_tenants' count
	// plus the entries appended since compaction last counted.
	Entries uint64
	// Floor is the newest of its seqs compaction removed (0: none).
	Floor uint64
}

// TenantEntries returns at most limit tenants that ever appended, with a
// name after after, sorted by name: one read of the per-tenant counts
// retention keeps, plus the tenant's entries appended since they were last
// counted (through the index on (tenant, seq)), never a scan of the oplog.
// Its cost grows with the entries appended since compaction last ran, so
// with retention off (no compaction) it reads each listed tenant's whole
// tail.
func (l *SQLiteLog) TenantEntries(ctx context.Context, after string, limit int) ([]TenantEntries, error) {
	var out []TenantEntries
	err := readTx(ctx, l.db, func(conn *sql.Conn) error {
		rows, err := conn.QueryContext(ctx, `SELECT t.tenant,
			t.entries + (SELECT count(*) FROM oplog AS o WHERE o.tenant = t.tenant AND o.seq > (SELECT counted FROM oplog_meta WHERE id = 1)),
			t.floor
			FROM oplog_tenants AS t WHERE t.tenant > ? ORDER BY t.tenant LIMIT ?`, after, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var t TenantEntries
			if err := rows.Scan(&t.Tenant, &t.Entries, &t.Floor); err != nil {
				return err
			}
			out = append(out, t)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("read oplog tenant counts: %w", err)
	}
	return out, nil
}
