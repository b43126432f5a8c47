package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// tailSQL counts the decisions of scope s decided after :W.
const tailSQL = `(SELECT COUNT(*) FROM ledger_decisions AS d WHERE d.scope = s.scope AND d.decided_at > :W)`

const (
	lookupSQL = `SELECT op_time, digest, result, decided_at FROM ledger_decisions
		WHERE scope = ? AND op_id = ?`
	insertSQL = `INSERT INTO ledger_decisions (scope, op_id, op_time, digest, result, decided_at)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (scope, op_id) DO NOTHING`
	floorSQL     = `SELECT floor_ms FROM ledger_scopes WHERE scope = ?`
	newScopeSQL  = `INSERT INTO ledger_scopes (scope, entries) VALUES (?, ?)`
	countOneSQL  = `UPDATE ledger_scopes SET entries = entries + 1 WHERE scope = ?`
	countSomeSQL = `UPDATE ledger_scopes SET entries = entries + ? WHERE scope = ?`

	countedSQL = `SELECT counted_ms FROM ledger_meta WHERE id = 1`
	foldSQL    = `UPDATE ledger_scopes AS s SET entries = entries + (
			SELECT COUNT(*) FROM ledger_decisions AS d WHERE d.scope = s.scope AND d.decided_at > :W AND d.decided_at <= :to)
		WHERE EXISTS (SELECT 1 FROM ledger_decisions AS d WHERE d.scope = s.scope AND d.decided_at > :W AND d.decided_at <= :to)`
	setCountedSQL = `UPDATE ledger_meta SET counted_ms = ? WHERE id = 1`

	// candidateSQL finds the first scope at or after (>=) or after (>)
	// :from with a decision decided at or before :cutoff or more than :max
	// decisions.
	candidateSQL = `SELECT scope FROM ledger_scopes AS s WHERE scope %s :from AND (
			entries + ` + tailSQL + ` > :max
			OR EXISTS (SELECT 1 FROM ledger_decisions AS d WHERE d.scope = s.scope AND d.decided_at <= :cutoff))
		ORDER BY scope LIMIT 1`
	totalSQL     = `SELECT entries + ` + tailSQL + ` FROM ledger_scopes AS s WHERE scope = :scope`
	evictAgedSQL = `DELETE FROM ledger_decisions WHERE rowid IN (
			SELECT rowid FROM ledger_decisions WHERE scope = ?1 AND decided_at <= ?2
			ORDER BY decided_at, op_id LIMIT ?3)
		RETURNING op_time, decided_at`
	evictOldestSQL = `DELETE FROM ledger_decisions WHERE rowid IN (
			SELECT rowid FROM ledger_decisions WHERE scope = ?1
			ORDER BY decided_at, op_id LIMIT ?2)
		RETURNING op_time, decided_at`
	// evictedSQL uncounts ?2 evicted decisions of scope ?1 and raises its
	// floor to ?3.
	evictedSQL = `UPDATE ledger_scopes SET entries = entries - ?2, floor_ms = max(coalesce(floor_ms, ?3), ?3)
		WHERE scope = ?1`

	statsSQL = `SELECT COALESCE(SUM(s.entries + (SELECT COUNT(*) FROM ledger_decisions AS d
			WHERE d.scope = s.scope AND d.decided_at > m.counted_ms)), 0), COUNT(s.scope), MAX(s.floor_ms)
		FROM ledger_meta AS m LEFT JOIN ledger_scopes AS s ON 1 WHERE m.id = 1`
)

var (
	candidateFromSQL  = fmt.Sprintf(candidateSQL, ">=")
	candidateAfterSQL = fmt.Sprintf(candidateSQL, ">")
)

// SQL is a ledger kept in tables of the caller's SQLite database (tables
// named ledger_*), written inside the caller's transactions. It is safe for
// concurrent use; see the package documentation for the database settings
// the caller must provide.
type SQL struct {
	db   *sql.DB
	opts Options
	// baseFloor is the floor every scope has at least (ledger_meta.floor_ms,
	// noFloor when NULL), fixed since the migration from a version-1 ledger.
	baseFloor int64
}

// NewSQL returns the ledger kept in db, whose tables Migrations made (the
// caller runs them in its database's migrations first; ErrNotMigrated
// otherwise). It refuses invalid options. db must be a SQLite database
// (driver "sqlite3", github.com/mattn/go-sqlite3) opened as the package
// documentation describes; the ledger never closes it.
func NewSQL(ctx context.Context, db *sql.DB, opts Options) (*SQL, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	base, err := checkMigrated(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("ledger: open: %w", err)
	}
	return &SQL{db: db, opts: o, baseFloor: base}, nil
}

// In binds the ledger to the caller's transaction tx, which must be a
// transaction on the database the ledger was opened on: lookups and records
// go through tx and commit or roll back with it. Bind once per transaction and
// use the result only until tx ends; it is not safe for concurrent use.
func (l *SQL) In(tx *sql.Tx) Tx { return &sqlTx{l: l, tx: tx} }

// Get returns the committed decision for (scope, opID), for inspection
// outside any transaction. ok is false when there is none.
func (l *SQL) Get(ctx context.Context, scope, opID string) (d Decision, ok bool, err error) {
	r, ok, err := scanRow(l.db.QueryRowContext(ctx, lookupSQL, scope, opID), scope, opID)
	if err != nil {
		return Decision{}, false, fmt.Errorf("ledger: get %s: %w", opRef(scope, opID), err)
	}
	if !ok {
		return Decision{}, false, nil
	}
	return r.decision(), true, nil
}

// Stats returns the number of committed decisions, of scopes and the
// highest floor, read in one statement: it costs one row per scope plus
// the decisions recorded since the last prune, so call it at a
// metrics-scrape pace, not per request.
func (l *SQL) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	var maxFloor sql.NullInt64
	if err := l.db.QueryRowContext(ctx, statsSQL).Scan(&st.Entries, &st.Scopes, &maxFloor); err != nil {
		return Stats{}, fmt.Errorf("ledger: stats: %w", err)
	}
	st.MaxFloor = floorTime(max(storedFloor(maxFloor), l.baseFloor))
	return st, nil
}

// Floor returns scope's committed floor: an op of scope that is not held
// and whose op time is at or before it is Expired. It is zero while the
// scope never had a decision evicted (and the ledger was not migrated from
// a version-1 floor). It reads one row.
func (l *SQL) Floor(ctx context.Context, scope string) (time.Time, error) {
	var f sql.NullInt64
	err := l.db.QueryRowContext(ctx, floorSQL, scope).Scan(&f)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, fmt.Errorf("ledger: floor of scope %q: %w", scope, err)
	}
	return floorTime(max(storedFloor(f), l.baseFloor)), nil
}

// Prune applies retention as of now and returns how many decisions it
// evicted: Tx.Prune with Options.PruneChunk, in transactions of its own
// committed one by one, until nothing evictable remains. Each chunk raises
// the floors of the scopes it evicts from in the same transaction. When ctx
// is done it stops between chunks and returns the count so far with ctx's
// error; what it evicted stays evicted and covered by the floors. It also
// returns once it has evicted more decisions than the ledger held when it
// began, leaving what a busy scope recorded meanwhile to the next call.
//
// Prune may run beside other Prunes, on this *SQL or in another process:
// every chunk evicts what the state it sees calls for, never more. Its
// transactions follow the database's settings: with BEGIN deferred, a
// chunk may fail with SQLITE_BUSY when another writer commits between its
// first read and its first write (that chunk evicts nothing; call Prune
// again).
func (l *SQL) Prune(ctx context.Context, now time.Time) (evicted int, err error) {
	st, err := l.Stats(ctx)
	if err != nil {
		return 0, fmt.Errorf("ledger: prune: %w", err)
	}
	return pruneChunks(ctx, l.beginChunk, st.Entries, l.opts, now)
}

func (l *SQL) beginChunk(ctx context.Context) (chunkTx, error) {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return sqlChunk{Tx: l.In(tx), tx: tx}, nil
}

// sqlChunk is one transaction of (*SQL).Prune.
type sqlChunk struct {
	Tx
	tx *sql.Tx
}

func (c sqlChunk) Commit() error   { return c.tx.Commit() }
func (c sqlChunk) Rollback() error { return c.tx.Rollback() }

// sqlTx is the ledger bound to one caller transaction. It prepares its
// lookup and record statements on first use (they close with the
// transaction) and reads each scope's row, and counted_ms, at most once
// between its own prunes: under SQLite's snapshot isolation they cannot
// change within a transaction that goes on to write. A deferred transaction
// that read a floor before a Prune elsewhere committed fails its first
// write with SQLITE_BUSY (snapshot) instead of recording under the stale
// floor.
type sqlTx struct {
	l       *SQL
	tx      *sql.Tx
	lookup  *sql.Stmt
	insert  *sql.Stmt
	scopes  map[string]scopeRow // rows read or written by this transaction
	counted int64               // ledger_meta.counted_ms, once read
	read    bool                // counted holds counted_ms
}

// scopeRow is what a transaction knows of a scope's ledger_scopes row.
type scopeRow struct {
	exists bool
	floor  int64 // with the base floor applied
}

func (s *sqlTx) Lookup(ctx context.Context, scope, opID string, opTime time.Time) (Decision, Outcome, error) {
	skip, err := checkLookup(scope, opID, opTime)
	if skip || err != nil {
		return Decision{}, Miss, err
	}
	d, o, err := s.lookupRow(ctx, scope, opID, opTime)
	if err != nil {
		return Decision{}, Miss, fmt.Errorf("ledger: lookup %s: %w", opRef(scope, opID), err)
	}
	return d, o, nil
}

// lookupChunk is how many op ids one LookupAll query names, and
// recordChunk how many rows one RecordAll INSERT holds: both well under
// SQLite's bound on bind variables.
const (
	lookupChunk = 500
	recordChunk = 100
)

func (s *sqlTx) LookupAll(ctx context.Context, scope string, ops []Op) ([]Answer, error) {
	answers := make([]Answer, len(ops))
	found := make(map[string]row, len(ops))
	ids := make([]any, 0, 1+min(len(ops), lookupChunk))
	for start := 0; start < len(ops); start += lookupChunk {
		ids = append(ids[:0], scope)
		for _, op := range ops[start:min(start+lookupChunk, len(ops))] {
			if skip, err := checkLookup(scope, op.ID, op.Time); err != nil {
				return nil, err
			} else if !skip {
				ids = append(ids, op.ID)
			}
		}
		if len(ids) == 1 {
			continue
		}
		if err := s.lookupRows(ctx, scope, ids, found); err != nil {
			return nil, fmt.Errorf("ledger: lookup %d ops in scope %q: %w", len(ops), scope, err)
		}
	}
	for i, op := range ops {
		if op.ID == "" {
			continue // Miss
		}
		if r, ok := found[op.ID]; ok {
			answers[i] = Answer{Decision: r.decision(), Outcome: Hit}
			continue
		}
		sc, err := s.scope(ctx, scope)
		if err != nil {
			return nil, fmt.Errorf("ledger: lookup %s: %w", opRef(scope, op.ID), err)
		}
		answers[i].Outcome = classifyAbsent(op.Time.UnixMilli(), sc.floor)
	}
	return answers, nil
}

// lookupRows adds to found the stored rows of args[0]'s scope among the
// op ids args[1:].
func (s *sqlTx) lookupRows(ctx context.Context, scope string, args []any, found map[string]row) error {
	query := `SELECT op_id, op_time, digest, result, decided_at FROM ledger_decisions
		WHERE scope = ? AND op_id IN (?` + strings.Repeat(", ?", len(args)-2) + `)`
	rows, err := s.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		r := row{scope: scope}
		if err := rows.Scan(&r.opID, &r.opMs, &r.digest, &r.result, &r.decidedMs); err != nil {
			return err
		}
		r.digest, r.result = nilIfEmpty(r.digest), nilIfEmpty(r.result)
		found[r.opID] = r
	}
	return rows.Err()
}

func (s *sqlTx) RecordAll(ctx context.Context, ds []Decision) error {
	if err := checkRecordAll(ds); err != nil {
		return err
	}
	rows := make([]row, len(ds))
	for i, d := range ds {
		sc, err := s.scope(ctx, d.Scope)
		if err != nil {
			return fmt.Errorf("ledger: record %s: %w", opRef(d.Scope, d.OpID), err)
		}
		if rows[i], err = newRow(d, sc.floor, s.l.opts.Now); err != nil {
			return err
		}
	}
	if err := s.readCounted(ctx); err != nil {
		return fmt.Errorf("ledger: record: %w", err)
	}
	if s.oneStatement(rows) {
		// One INSERT and no count to change: SQLite undoes a failed
		// statement whole, so no savepoint is needed around it.
		if err := s.insertAll(ctx, rows); err != nil {
			return s.explainRefusal(ctx, rows, err)
		}
		return nil
	}
	// One savepoint makes the chunks and the scope counts all or none.
	if _, err := s.tx.ExecContext(ctx, `SAVEPOINT ledger_record_all`); err != nil {
		return fmt.Errorf("ledger: record: %w", err)
	}
	err := s.insertAll(ctx, rows)
	if err != nil {
		if _, rbErr := s.tx.ExecContext(ctx, `ROLLBACK TO ledger_record_all`); rbErr != nil {
			return fmt.Errorf("ledger: record: %w (and rolling back: %v)", err, rbErr)
		}
		clear(s.scopes) // forget scope rows the rolled-back part created
		err = s.explainRefusal(ctx, rows, err)
	}
	if _, relErr := s.tx.ExecContext(ctx, `RELEASE ledger_record_all`); relErr != nil && err == nil {
		err = fmt.Errorf("ledger: record: %w", relErr)
	}
	return err
}

// oneStatement reports whether insertAll writes rows in one statement:
// they fit one chunk, every scope of theirs has its row, and none is
// counted now (decided after counted_ms, as every decision of a clock that
// did not go back is). The caller has read counted_ms.
func (s *sqlTx) oneStatement(rows []row) bool {
	if len(rows) > recordChunk {
		return false
	}
	for _, r := range rows {
		if !s.scopes[r.scope].exists || r.decidedMs <= s.counted {
			return false
		}
	}
	return true
}

// insertAll inserts rows in chunks, then counts them per scope. A row whose
// op is already held fails its whole INSERT.
func (s *sqlTx) insertAll(ctx context.Context, rows []row) error {
	args := make([]any, 0, 6*min(len(rows), recordChunk))
	for start := 0; start < len(rows); start += recordChunk {
		chunk := rows[start:min(start+recordChunk, len(rows))]
		args = args[:0]
		for _, r := range chunk {
			args = append(args, r.scope, r.opID, r.opMs, blob(r.digest), blob(r.result), r.decidedMs)
		}
		query := `INSERT INTO ledger_decisions (scope, op_id, op_time, digest, result, decided_at)
			VALUES (?, ?, ?, ?, ?, ?)` + strings.Repeat(", (?, ?, ?, ?, ?, ?)", len(chunk)-1)
		if _, err := s.tx.ExecContext(ctx, query, args...); err != nil {
			return err
		}
	}
	counted := map[string]int{} // per scope: rows decided at or before counted_ms
	var order []string
	for _, r := range rows {
		if _, ok := counted[r.scope]; !ok {
			order = append(order, r.scope)
		}
		counted[r.scope] += btoi(r.decidedMs <= s.counted)
	}
	for _, scope := range order {
		sc, err := s.scope(ctx, scope)
		if err != nil {
			return err
		}
		if !sc.exists {
			_, err = s.tx.ExecContext(ctx, newScopeSQL, scope, counted[scope])
			sc.exists = true
			s.scopes[scope] = sc
		} else if n := counted[scope]; n > 0 {
			_, err = s.tx.ExecContext(ctx, countSomeSQL, n, scope)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// explainRefusal turns insertAll's failure into ErrAlreadyDecided naming
// the first of rows the ledger already holds, or wraps err when it holds
// none of them.
func (s *sqlTx) explainRefusal(ctx context.Context, rows []row, err error) error {
	for _, r := range rows {
		var held int
		qerr := s.tx.QueryRowContext(ctx, `SELECT count(*) FROM ledger_decisions WHERE scope = ? AND op_id = ?`,
			r.scope, r.opID).Scan(&held)
		if qerr != nil {
			return fmt.Errorf("ledger: record: %w", err)
		}
		if held > 0 {
			return alreadyDecided(r.scope, r.opID)
		}
	}
	return fmt.Errorf("ledger: record: %w", err)
}

func (s *sqlTx) lookupRow(ctx context.Context, scope, opID string, opTime time.Time) (Decision, Outcome, error) {
	stmt, err := s.stmt(ctx, &s.lookup, lookupSQL)
	if err != nil {
		return Decision{}, Miss, err
	}
	r, ok, err := scanRow(stmt.QueryRowContext(ctx, scope, opID), scope, opID)
	if err != nil {
		return Decision{}, Miss, err
	}
	if ok {
		return r.decision(), Hit, nil
	}
	sc, err := s.scope(ctx, scope)
	if err != nil {
		return Decision{}, Miss, err
	}
	return Decision{}, classifyAbsent(opTime.UnixMilli(), sc.floor), nil
}

func (s *sqlTx) Record(ctx context.Context, d Decision) error {
	if err := checkRecord(d); err != nil {
		return err
	}
	sc, err := s.scope(ctx, d.Scope)
	if err != nil {
		return fmt.Errorf("ledger: record %s: %w", opRef(d.Scope, d.OpID), err)
	}
	r, err := newRow(d, sc.floor, s.l.opts.Now)
	if err != nil {
		return err
	}
	inserted, err := s.insertRow(ctx, r, sc)
	if err != nil {
		return fmt.Errorf("ledger: record %s: %w", opRef(d.Scope, d.OpID), err)
	}
	if !inserted {
		return alreadyDecided(r.scope, r.opID)
	}
	return nil
}

func (s *sqlTx) Prune(ctx context.Context, now time.Time, limit int) (int, bool, error) {
	if err := checkPrune(now, limit); err != nil {
		return 0, false, err
	}
	clear(s.scopes) // evictions raise floors
	if err := s.fold(ctx, now.UnixMilli()); err != nil {
		return 0, false, fmt.Errorf("ledger: prune: %w", err)
	}
	return pruneTx(ctx, sqlEvictor{s}, s.l.opts, now, limit)
}

// insertRow inserts r, whose scope's row is sc, and counts it.
func (s *sqlTx) insertRow(ctx context.Context, r row, sc scopeRow) (inserted bool, err error) {
	stmt, err := s.stmt(ctx, &s.insert, insertSQL)
	if err != nil {
		return false, err
	}
	res, err := stmt.ExecContext(ctx, r.scope, r.opID, r.opMs, blob(r.digest), blob(r.result), r.decidedMs)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return false, err
	}
	if err := s.readCounted(ctx); err != nil {
		return false, err
	}
	counted := r.decidedMs <= s.counted
	switch {
	case !sc.exists:
		_, err = s.tx.ExecContext(ctx, newScopeSQL, r.scope, btoi(counted))
		sc.exists = true
		s.scopes[r.scope] = sc
	case counted:
		_, err = s.tx.ExecContext(ctx, countOneSQL, r.scope)
	}
	return err == nil, err
}

// scope returns scope's row as this transaction sees it.
func (s *sqlTx) scope(ctx context.Context, scope string) (scopeRow, error) {
	if sc, ok := s.scopes[scope]; ok {
		return sc, nil
	}
	var floor sql.NullInt64
	err := s.tx.QueryRowContext(ctx, floorSQL, scope).Scan(&floor)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return scopeRow{}, err
	}
	sc := scopeRow{exists: err == nil, floor: max(storedFloor(floor), s.l.baseFloor)}
	if s.scopes == nil {
		s.scopes = make(map[string]scopeRow, 1)
	}
	s.scopes[scope] = sc
	return sc, nil
}

// readCounted reads counted_ms, once per transaction.
func (s *sqlTx) readCounted(ctx context.Context) error {
	if s.read {
		return nil
	}
	if err := s.tx.QueryRowContext(ctx, countedSQL).Scan(&s.counted); err != nil {
		return err
	}
	s.read = true
	return nil
}

// fold counts the tail up to to into entries and raises counted_ms to it.
func (s *sqlTx) fold(ctx context.Context, to int64) error {
	if err := s.readCounted(ctx); err != nil {
		return err
	}
	if to <= s.counted {
		return nil
	}
	if _, err := s.tx.ExecContext(ctx, foldSQL, sql.Named("W", s.counted), sql.Named("to", to)); err != nil {
		return err
	}
	if _, err := s.tx.ExecContext(ctx, setCountedSQL, to); err != nil {
		return err
	}
	s.counted = to
	return nil
}

// sqlEvictor keeps the scopeEvictor methods off sqlTx's method set. It
// runs after sqlTx.fold, so counted_ms is read.
type sqlEvictor struct{ s *sqlTx }

func (e sqlEvictor) nextCandidate(ctx context.Context, from string, inclusive bool, cutoff int64, maxEntries int) (string, bool, error) {
	query := candidateAfterSQL
	if inclusive {
		query = candidateFromSQL
	}
	var scope string
	err := e.s.tx.QueryRowContext(ctx, query, sql.Named("from", from), sql.Named("max", maxEntries),
		sql.Named("cutoff", cutoff), sql.Named("W", e.s.counted)).Scan(&scope)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return scope, err == nil, err
}

func (e sqlEvictor) evictScope(ctx context.Context, scope string, cutoff int64, maxEntries, limit int) (int, error) {
	var total int
	err := e.s.tx.QueryRowContext(ctx, totalSQL, sql.Named("scope", scope), sql.Named("W", e.s.counted)).Scan(&total)
	if err != nil {
		return 0, err
	}
	aged, err := e.evict(ctx, evictAgedSQL, scope, cutoff, limit)
	if err != nil {
		return 0, err
	}
	gone := aged
	if excess := total - aged.n - maxEntries; excess > 0 && aged.n < limit {
		oldest, err := e.evict(ctx, evictOldestSQL, scope, min(excess, limit-aged.n))
		if err != nil {
			return 0, err
		}
		gone = eviction{n: aged.n + oldest.n, counted: aged.counted + oldest.counted, newest: max(aged.newest, oldest.newest)}
	}
	if gone.n > 0 {
		if _, err := e.s.tx.ExecContext(ctx, evictedSQL, scope, gone.counted, gone.newest); err != nil {
			return 0, err
		}
	}
	return gone.n, nil
}

// eviction is what one eviction DELETE removed: n decisions, counted of
// them decided at or before counted_ms, the highest op time newest.
type eviction struct {
	n, counted int
	newest     int64
}

func (e sqlEvictor) evict(ctx context.Context, query string, args ...any) (eviction, error) {
	rows, err := e.s.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return eviction{}, err
	}
	defer rows.Close()
	ev := eviction{newest: noFloor}
	for rows.Next() {
		var opMs, decidedMs int64
		if err := rows.Scan(&opMs, &decidedMs); err != nil {
			return eviction{}, err
		}
		ev.n++
		ev.counted += btoi(decidedMs <= e.s.counted)
		ev.newest = max(ev.newest, opMs)
	}
	if err := rows.Close(); err != nil {
		return eviction{}, err
	}
	return ev, rows.Err()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// stmt returns *slot, preparing query in the transaction on first use.
func (s *sqlTx) stmt(ctx context.Context, slot **sql.Stmt, query string) (*sql.Stmt, error) {
	if *slot == nil {
		st, err := s.tx.PrepareContext(ctx, query)
		if err != nil {
			return nil, err
		}
		*slot = st
	}
	return *slot, nil
}

// scanRow reads one lookupSQL result; ok is false when there was no row.
func scanRow(sc *sql.Row, scope, opID string) (r row, ok bool, err error) {
	r = row{scope: scope, opID: opID}
	err = sc.Scan(&r.opMs, &r.digest, &r.result, &r.decidedMs)
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, false, nil
	}
	if err != nil {
		return row{}, false, err
	}
	r.digest, r.result = nilIfEmpty(r.digest), nilIfEmpty(r.result)
	return r, true, nil
}

func storedFloor(f sql.NullInt64) int64 {
	if !f.Valid {
		return noFloor
	}
	return f.Int64
}

// blob is b as a bind argument for a NOT NULL BLOB column: the driver binds
// a nil slice as NULL.
func blob(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
