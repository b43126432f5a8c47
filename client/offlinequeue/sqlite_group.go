package offlinequeue

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
)

// maxMultiRow bounds the rows of one multi-row statement of a group (a
// key lookup or an insert): a group of up to maxBatch enqueues is written
// in chunks of at most maxMultiRow, so the queue never prepares more than
// 2*maxMultiRow such statements, and one statement binds at most
// 3*maxMultiRow variables, far below SQLite's bound (32,766).
const maxMultiRow = 32

// multiStmts are the multi-row statements of plain groups, prepared on
// the pool on first use and kept until Close. They are owned by the holder
// of s.writer.
type multiStmts struct {
	find   [maxMultiRow]*sql.Stmt // find[n-1] looks up n keys
	insert [maxMultiRow]*sql.Stmt // insert[n-1] inserts n items
}

// sqlFindKeys returns the lookup of n keys: the id and key of each that is
// pending. Like sqlFindKey it repeats the partial index's WHERE term.
func sqlFindKeys(n int) string {
	return `SELECT id, key FROM items WHERE length(key) > 0 AND key IN (` +
		strings.TrimSuffix(strings.Repeat("?,", n), ",") + `)`
}

// sqlInsertRows returns the insert of n items, in the order of their rows.
func sqlInsertRows(n int) string {
	return `INSERT INTO items (payload, key, attempts, enqueued_at) VALUES ` +
		strings.TrimSuffix(strings.Repeat("(?, ?, 0, ?),", n), ",")
}

// stmt returns (*set)[n-1], preparing it with query(n) on first use.
func (m *multiStmts) stmt(ctx context.Context, db *sql.DB, set *[maxMultiRow]*sql.Stmt, n int, query func(int) string) (*sql.Stmt, error) {
	if set[n-1] == nil {
		stmt, err := db.PrepareContext(ctx, query(n))
		if err != nil {
			return nil, fmt.Errorf("prepare a statement of %d rows: %w", n, err)
		}
		set[n-1] = stmt
	}
	return set[n-1], nil
}

// close closes every statement prepared. The caller holds s.writer or has
// stopped every writer.
func (m *multiStmts) close() {
	for _, set := range []*[maxMultiRow]*sql.Stmt{&m.find, &m.insert} {
		for i, stmt := range set {
			if stmt != nil {
				_ = stmt.Close()
				set[i] = nil
			}
		}
	}
}

// plainGroup says whether group can be written by insertGroup: no member
// has an EnqueueWith hook, and there is room for every member, so no
// member can be refused (s.pending is written only by the holder of
// s.writer, the caller).
func (s *SQLite) plainGroup(group []*writeRequest) bool {
	if s.pending+len(group) > s.opts.MaxDepth {
		return false
	}
	for _, r := range group {
		if r.with != nil {
			return false
		}
	}
	return true
}

// insertGroup writes a plain group (plainGroup) in tx with a few
// statements whatever its size: one lookup of the group's keys, then one
// insert of every item to add, each in chunks of at most maxMultiRow. A
// member whose key is pending gets that item's id; a member whose key an
// earlier member of the group carries gets that member's id; every other
// member is inserted, in the group's order. It returns the members
// inserted.
//
// The ids of one insert are consecutive: the holder of s.writer is the
// only writer, and AUTOINCREMENT gives each row one more than the largest
// id the table ever had, in the order of the VALUES rows. So the last
// insert id and the count of rows name every row's id.
func (s *SQLite) insertGroup(ctx context.Context, tx *sql.Tx, group []*writeRequest) ([]*writeRequest, error) {
	pendingIDs, err := s.findKeys(ctx, tx, group)
	if err != nil {
		return nil, err
	}
	var rows []*writeRequest
	var repeats []*writeRequest // keyed like an earlier member
	first := make(map[string]*writeRequest)
	for _, r := range group {
		r.id, r.err = 0, nil
		if r.key != "" {
			if id, ok := pendingIDs[r.key]; ok {
				r.id = id
				continue
			}
			if _, ok := first[r.key]; ok {
				repeats = append(repeats, r)
				continue
			}
			first[r.key] = r
		}
		rows = append(rows, r)
	}
	now := s.opts.now().UnixNano()
	for chunk := range slices.Chunk(rows, maxMultiRow) {
		stmt, err := s.multi.stmt(ctx, s.db, &s.multi.insert, len(chunk), sqlInsertRows)
		if err != nil {
			return nil, err
		}
		args := make([]any, 0, 3*len(chunk))
		for _, r := range chunk {
			args = append(args, r.payload, blob(r.key), now)
		}
		res, err := tx.StmtContext(ctx, stmt).ExecContext(ctx, args...)
		if err != nil {
			return nil, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return nil, err
		}
		last, err := res.LastInsertId()
		if err != nil {
			return nil, err
		}
		if n != int64(len(chunk)) {
			return nil, fmt.Errorf("insert of %d items added %d", len(chunk), n)
		}
		for i, r := range chunk {
			r.id = ID(last - n + 1 + int64(i))
		}
	}
	for _, r := range repeats {
		r.id = first[r.key].id
	}
	return rows, nil
}

// findKeys looks up the distinct non-empty keys of group and returns the
// id of each that is pending.
func (s *SQLite) findKeys(ctx context.Context, tx *sql.Tx, group []*writeRequest) (map[string]ID, error) {
	seen := make(map[string]bool, len(group))
	var keys []string
	for _, r := range group {
		if r.key != "" && !seen[r.key] {
			seen[r.key] = true
			keys = append(keys, r.key)
		}
	}
	found := make(map[string]ID)
	for chunk := range slices.Chunk(keys, maxMultiRow) {
		stmt, err := s.multi.stmt(ctx, s.db, &s.multi.find, len(chunk), sqlFindKeys)
		if err != nil {
			return nil, err
		}
		args := make([]any, len(chunk))
		for i, k := range chunk {
			args[i] = blob(k)
		}
		if err := scanKeys(ctx, tx.StmtContext(ctx, stmt), args, found); err != nil {
			return nil, err
		}
	}
	return found, nil
}

// scanKeys runs the key lookup find with args and adds each row to found.
func scanKeys(ctx context.Context, find *sql.Stmt, args []any, found map[string]ID) error {
	rows, err := find.QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var key []byte
		if err := rows.Scan(&id, &key); err != nil {
			return err
		}
		found[string(key)] = ID(id)
	}
	return rows.Err()
}
