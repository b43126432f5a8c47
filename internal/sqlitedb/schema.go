package sqlitedb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Schema returns the on-disk format of the database db holds, as text that
// is the same for every file the same code wrote: its PRAGMA user_version
// on the first line, then the SQL of every table, index, view and trigger
// in sqlite_master, sorted by type and name, each ending in ";". SQLite's
// own objects (sqlite_*) and autoindexes, which have no SQL, are left out.
// Golden tests compare it with testdata, so a change of a file's format
// cannot go unnoticed.
func Schema(ctx context.Context, db *sql.DB) (string, error) {
	var version int64
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return "", fmt.Errorf("read schema: %w", err)
	}
	rows, err := db.QueryContext(ctx, `SELECT sql FROM sqlite_master
		WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite\_%' ESCAPE '\'
		ORDER BY type, name`)
	if err != nil {
		return "", fmt.Errorf("read schema: %w", err)
	}
	defer rows.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "-- user_version %d\n", version)
	for rows.Next() {
		var stmt string
		if err := rows.Scan(&stmt); err != nil {
			return "", fmt.Errorf("read schema: %w", err)
		}
		b.WriteString(stmt)
		b.WriteString(";\n")
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("read schema: %w", err)
	}
	return b.String(), nil
}
