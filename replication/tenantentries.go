package replication

import (
	"context"
	"database/sql"
	"fmt"
)

// TenantEntries is one tenant's retained oplog entries and its floor.
type TenantEntries struct {
	Tenant string
	// Entries counts the tenant's retained entries (kept exact by Append
	// and Compact).
	Entries uint64
	// Floor is the newest of its seqs compaction removed (0: none).
	Floor uint64
}

// TenantEntries returns at most limit tenants that ever appended, with a
// name after after, sorted by name: one read of the per-tenant counts
// retention keeps, never a scan of the oplog.
func (l *SQLiteLog) TenantEntries(ctx context.Context, after string, limit int) ([]TenantEntries, error) {
	var out []TenantEntries
	err := readTx(ctx, l.db, func(conn *sql.Conn) error {
		rows, err := conn.QueryContext(ctx, `SELECT tenant, entries, floor FROM oplog_tenants WHERE tenant > ? ORDER BY tenant LIMIT ?`, after, limit)
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
