package ledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mattn/go-sqlite3"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/ledger"
	"github.com/syncd-dev/syncd/ledger/ledgertest"
)

// Connection settings the tests open SQLite with. immediate is the setup
// the package documentation asks of callers; deferred leaves BEGIN deferred
// to show what that setup guards against.
const (
	dsnDurable = "?_busy_timeout=10000&_synchronous=FULL&_journal_mode=WAL"
	immediate  = dsnDurable + "&_txlock=immediate"
	deferred   = dsnDurable + "&_txlock=deferred"
)

func openDB(t testing.TB, dir, settings string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "syncd.db")+settings)
	require.NoError(t, err)
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// openSQL runs the ledger's migrations on db the way a caller does, as
// steps of its database's own list (sqlitedb.Migrate), then opens the
// ledger.
func openSQL(t testing.TB, db *sql.DB, opts ledger.Options) *ledger.SQL {
	t.Helper()
	migrate(t, db)
	l, err := ledger.NewSQL(context.Background(), db, opts)
	require.NoError(t, err)
	return l
}

// migrate brings db to the ledger's layout: ledger.Migrations as the
// database's list of migrations.
func migrate(t testing.TB, db *sql.DB) {
	t.Helper()
	_, err := sqlitedb.Migrate(context.Background(), db, ledgerSteps())
	require.NoError(t, err)
}

func ledgerSteps() []sqlitedb.Migration {
	var steps []sqlitedb.Migration
	for _, step := range ledger.Migrations() {
		steps = append(steps, func(ctx context.Context, tx sqlitedb.Execer) error { return step(ctx, tx) })
	}
	return steps
}

// sqlStore adapts a *ledger.SQL and its database to the suite's Store.
type sqlStore struct {
	*ledger.SQL
	db *sql.DB
}

func (s sqlStore) Begin(ctx context.Context) (ledgertest.Txn, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return sqlTxn{Tx: s.In(tx), tx: tx}, nil
}

func (s sqlStore) Close() error { return s.db.Close() }

type sqlTxn struct {
	ledger.Tx
	tx *sql.Tx
}

func (t sqlTxn) Commit() error   { return t.tx.Commit() }
func (t sqlTxn) Rollback() error { return t.tx.Rollback() }

func TestSQLConformance(t *testing.T) {
	ledgertest.Run(t, ledgertest.Harness{
		Durable: true,
		Open: func(t *testing.T, dir string, opts ledger.Options) ledgertest.Store {
			db := openDB(t, dir, immediate)
			return sqlStore{SQL: openSQL(t, db, opts), db: db}
		},
		Legacy: writeSchema1,
	})
}

// schema1 is the ledger's tables as schema version 1 created them: one
// ledger-wide floor, eviction by op time.
var schema1 = []string{
	`CREATE TABLE ledger_decisions (
		scope      TEXT    NOT NULL,
		op_id      TEXT    NOT NULL,
		op_time    INTEGER NOT NULL,
		digest     BLOB    NOT NULL,
		result     BLOB    NOT NULL,
		decided_at INTEGER NOT NULL,
		PRIMARY KEY (scope, op_id)
	)`,
	`CREATE INDEX ledger_decisions_by_op_time ON ledger_decisions (op_time)`,
	`CREATE TABLE ledger_meta (
		id             INTEGER PRIMARY KEY CHECK (id = 1),
		schema_version INTEGER NOT NULL,
		floor_ms       INTEGER
	)`,
	`INSERT INTO ledger_meta (id, schema_version, floor_ms) VALUES (1, 1, NULL)`,
}

// writeSchema1 writes ds and floor into dir in schema version 1.
func writeSchema1(t *testing.T, dir string, ds []ledger.Decision, floor time.Time) {
	db := openDB(t, dir, immediate)
	for _, stmt := range schema1 {
		_, err := db.Exec(stmt)
		require.NoError(t, err)
	}
	for _, d := range ds {
		_, err := db.Exec(`INSERT INTO ledger_decisions (scope, op_id, op_time, digest, result, decided_at) VALUES (?, ?, ?, ?, ?, ?)`,
			d.Scope, d.OpID, d.OpTime.UnixMilli(), d.Digest, d.Result, d.DecidedAt.UnixMilli())
		require.NoError(t, err)
	}
	if !floor.IsZero() {
		_, err := db.Exec(`UPDATE ledger_meta SET floor_ms = ? WHERE id = 1`, floor.UnixMilli())
		require.NoError(t, err)
	}
	require.NoError(t, db.Close())
}

func TestSQLTablesArePrefixed(t *testing.T) {
	db := openDB(t, t.TempDir(), immediate)
	openSQL(t, db, ledger.Options{})
	openSQL(t, db, ledger.Options{}) // a second open finds the tables in place

	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name`)
	require.NoError(t, err)
	var names []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		names = append(names, n)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"ledger_decisions", "ledger_decisions_by_decided_at", "ledger_meta", "ledger_scopes"}, names)
}

// NewSQL refuses a database its migrations did not run on, new or of an
// earlier release, and changes nothing; a ledger_meta no release wrote is
// refused by the migration, which then rolls back.
func TestSQLRefusesTablesNotMigrated(t *testing.T) {
	ctx := t.Context()
	db := openDB(t, t.TempDir(), immediate)
	_, err := ledger.NewSQL(ctx, db, ledger.Options{})
	require.ErrorIs(t, err, ledger.ErrNotMigrated)

	dir := t.TempDir()
	writeSchema1(t, dir, nil, time.Time{})
	db = openDB(t, dir, immediate)
	_, err = ledger.NewSQL(ctx, db, ledger.Options{})
	require.ErrorIs(t, err, ledger.ErrNotMigrated)

	_, err = db.Exec(`UPDATE ledger_meta SET schema_version = 3`)
	require.NoError(t, err)
	_, err = sqlitedb.Migrate(ctx, db, ledgerSteps())
	require.ErrorContains(t, err, "ledger_meta.schema_version is 3")
	var v int
	require.NoError(t, db.QueryRow(`SELECT schema_version FROM ledger_meta`).Scan(&v))
	require.Equal(t, 3, v, "the refused migration changed nothing")
}

// A ledger of the last release that versioned it in ledger_meta (schema
// version 2: floors and counts per scope) keeps its decisions, counts and
// floors through the migration, and loses its version column.
func TestSQLMigratesSchema2(t *testing.T) {
	ctx := t.Context()
	db := openDB(t, t.TempDir(), immediate)
	for _, stmt := range []string{
		`CREATE TABLE ledger_meta (
			id             INTEGER PRIMARY KEY CHECK (id = 1),
			schema_version INTEGER NOT NULL,
			floor_ms       INTEGER,
			counted_ms     INTEGER NOT NULL DEFAULT -9223372036854775808
		)`,
		`INSERT INTO ledger_meta (id, schema_version, floor_ms, counted_ms) VALUES (1, 2, 500, 2000)`,
		schema1[0], // ledger_decisions, the same at both versions
		`CREATE INDEX ledger_decisions_by_decided_at ON ledger_decisions (scope, decided_at)`,
		`CREATE TABLE ledger_scopes (scope TEXT NOT NULL PRIMARY KEY, entries INTEGER NOT NULL, floor_ms INTEGER) WITHOUT ROWID`,
		`INSERT INTO ledger_decisions VALUES ('a', 'op-1', 1000, x'01', x'02', 1500), ('a', 'op-2', 1100, x'', x'', 3000)`,
		`INSERT INTO ledger_scopes VALUES ('a', 1, 900)`,
	} {
		_, err := db.Exec(stmt)
		require.NoError(t, err)
	}
	l := openSQL(t, db, ledger.Options{})
	st, err := l.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, ledger.Stats{Entries: 2, Scopes: 1, MaxFloor: time.UnixMilli(900).UTC()}, st)
	d, ok, err := l.Get(ctx, "a", "op-1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []byte{1}, d.Digest)
	floor, err := l.Floor(ctx, "other")
	require.NoError(t, err)
	require.Equal(t, time.UnixMilli(500).UTC(), floor, "the base floor is kept")
	var counted int64
	require.NoError(t, db.QueryRow(`SELECT counted_ms FROM ledger_meta`).Scan(&counted))
	require.Equal(t, int64(2000), counted)
	var versioned int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM pragma_table_info('ledger_meta') WHERE name = 'schema_version'`).Scan(&versioned))
	require.Zero(t, versioned)
}

// The decision commits and rolls back together with the caller's own
// writes in the same transaction.
func TestSQLDecisionSharesCallerTransaction(t *testing.T) {
	ctx := t.Context()
	db := openDB(t, t.TempDir(), immediate)
	l := openSQL(t, db, ledger.Options{})
	_, err := db.Exec(`CREATE TABLE records (k TEXT PRIMARY KEY, v TEXT)`)
	require.NoError(t, err)
	d := ledger.Decision{Scope: "tenant-a", OpID: "op-1", OpTime: time.UnixMilli(1_900_000_000_000), Result: []byte("applied")}

	apply := func(commit bool) {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer tx.Rollback() // a no-op after Commit
		_, err = tx.Exec(`INSERT INTO records (k, v) VALUES ('k', 'v')`)
		require.NoError(t, err)
		require.NoError(t, l.In(tx).Record(ctx, d))
		if commit {
			require.NoError(t, tx.Commit())
		}
	}
	count := func() (records int, decided bool) {
		require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM records`).Scan(&records))
		_, decided, err := l.Get(ctx, d.Scope, d.OpID)
		require.NoError(t, err)
		return records, decided
	}

	apply(false)
	records, decided := count()
	require.Equal(t, 0, records)
	require.False(t, decided)

	apply(true)
	records, decided = count()
	require.Equal(t, 1, records)
	require.True(t, decided)
}

// A deferred transaction reads its scope's floor on its first lookup. If a
// Prune raises that floor before the transaction writes, SQLite refuses the
// write (the read snapshot is stale), so no op is recorded under an
// outdated floor.
func TestSQLStaleFloorCannotRecord(t *testing.T) {
	ctx := t.Context()
	db := openDB(t, t.TempDir(), deferred)
	l := openSQL(t, db, ledger.Options{MaxAge: time.Hour})
	opTime := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	decided := ledger.Decision{Scope: "tenant-a", OpID: "decided", OpTime: opTime, DecidedAt: opTime}
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, l.In(tx).Record(ctx, decided))
	require.NoError(t, tx.Commit())
	late := ledger.Decision{Scope: "tenant-a", OpID: "late", OpTime: opTime.Add(-time.Minute)}

	tx, err = db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() // a no-op after Commit
	lt := l.In(tx)
	_, o, err := lt.Lookup(ctx, late.Scope, late.OpID, late.OpTime)
	require.NoError(t, err)
	require.Equal(t, ledger.Miss, o)

	n, err := l.Prune(ctx, opTime.Add(2*time.Hour)) // floor: opTime, committed on another connection
	require.NoError(t, err)
	require.Equal(t, 1, n)

	err = lt.Record(ctx, late)
	var serr sqlite3.Error
	require.True(t, errors.As(err, &serr), "want a SQLite error, got %v", err)
	require.Equal(t, sqlite3.ErrBusySnapshot, serr.ExtendedCode)
	require.NoError(t, tx.Rollback())

	check, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer check.Rollback() // read-only
	_, o, err = l.In(check).Lookup(ctx, late.Scope, late.OpID, late.OpTime)
	require.NoError(t, err)
	require.Equal(t, ledger.Expired, o)
}

// BenchmarkSQLRecord measures Lookup+Record per op in transactions of 100
// ops (group commit, synchronous=FULL), and, in the same run, a raw INSERT
// of the same row into a table of the same shape and indexes as the
// ceiling. ledger/raw is the ratio of the two.
func BenchmarkSQLRecord(b *testing.B) {
	const batch = 100
	ctx := context.Background()
	db := openDB(b, b.TempDir(), immediate)
	l := openSQL(b, db, ledger.Options{})
	raw := openDB(b, b.TempDir(), immediate)
	_, err := raw.Exec(`CREATE TABLE raw (
		scope TEXT NOT NULL, op_id TEXT NOT NULL, op_time INTEGER NOT NULL,
		digest BLOB NOT NULL, result BLOB NOT NULL, decided_at INTEGER NOT NULL,
		PRIMARY KEY (scope, op_id))`)
	require.NoError(b, err)
	_, err = raw.Exec(`CREATE INDEX raw_by_decided_at ON raw (scope, decided_at)`)
	require.NoError(b, err)

	ds := make([]ledger.Decision, b.N)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range ds {
		ds[i] = ledger.Decision{
			Scope:     "tenant-a",
			OpID:      uuid.Must(uuid.NewV7()).String(),
			OpTime:    start.Add(time.Duration(i) * time.Millisecond),
			Digest:    make([]byte, 32),
			Result:    []byte(`{"status":"applied","version":1}`),
			DecidedAt: start,
		}
	}
	inBatches := func(db *sql.DB, each func(tx *sql.Tx, ops []ledger.Decision) error) {
		for from := 0; from < len(ds); from += batch {
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(b, err)
			require.NoError(b, each(tx, ds[from:min(from+batch, len(ds))]))
			require.NoError(b, tx.Commit())
		}
	}

	b.ResetTimer()
	began := time.Now()
	inBatches(db, func(tx *sql.Tx, ops []ledger.Decision) error {
		lt := l.In(tx)
		for _, d := range ops {
			if _, o, err := lt.Lookup(ctx, d.Scope, d.OpID, d.OpTime); err != nil || o != ledger.Miss {
				return errors.Join(err, errors.New("unexpected outcome "+o.String()))
			}
			if err := lt.Record(ctx, d); err != nil {
				return err
			}
		}
		return nil
	})
	ledgerTook := time.Since(began)
	b.StopTimer()

	began = time.Now()
	inBatches(raw, func(tx *sql.Tx, ops []ledger.Decision) error {
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO raw (scope, op_id, op_time, digest, result, decided_at) VALUES (?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		for _, d := range ops {
			if _, err := stmt.ExecContext(ctx, d.Scope, d.OpID, d.OpTime.UnixMilli(), d.Digest, d.Result, d.DecidedAt.UnixMilli()); err != nil {
				return err
			}
		}
		return nil
	})
	rawTook := time.Since(began)
	b.ReportMetric(float64(rawTook.Nanoseconds())/float64(b.N), "raw-ns/op")
	b.ReportMetric(float64(ledgerTook)/float64(rawTook), "ledger/raw")
}

// BenchmarkSQLPrune measures eviction per decision: Tx.Prune in chunks of
// 1000, each in its own transaction, over b.N aged decisions spread over 10
// scopes, decided 100 to the millisecond (as a busy group commit decides
// them), beside as many decisions of 10 other scopes that stay.
func BenchmarkSQLPrune(b *testing.B) {
	const chunk = 1000
	ctx := context.Background()
	db := openDB(b, b.TempDir(), immediate)
	l := openSQL(b, db, ledger.Options{MaxAge: time.Hour})
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	recordAll := func(from time.Time, prefix string) {
		for i := 0; i < b.N; i += chunk {
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(b, err)
			lt := l.In(tx)
			for j := i; j < min(i+chunk, b.N); j++ {
				require.NoError(b, lt.Record(ctx, ledger.Decision{
					Scope: fmt.Sprintf("%s-%d", prefix, j%10), OpID: uuid.Must(uuid.NewV7()).String(),
					OpTime: from.Add(time.Duration(j) * time.Millisecond), DecidedAt: from.Add(time.Duration(j/100) * time.Millisecond),
					Digest: make([]byte, 32), Result: []byte(`{"status":"applied","version":1}`),
				}))
			}
			require.NoError(b, tx.Commit())
		}
	}
	recordAll(start, "aged")
	recordAll(start.Add(2*time.Hour), "kept")

	b.ResetTimer()
	evicted := 0
	for more := true; more; {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(b, err)
		var n int
		n, more, err = l.In(tx).Prune(ctx, start.Add(2*time.Hour), chunk)
		require.NoError(b, err)
		require.NoError(b, tx.Commit())
		evicted += n
	}
	b.StopTimer()
	require.Equal(b, b.N, evicted)
}

// Database failures surface as errors, never as outcomes.
func TestSQLReportsDatabaseErrors(t *testing.T) {
	ctx := t.Context()
	db := openDB(t, t.TempDir(), immediate)
	l := openSQL(t, db, ledger.Options{})
	require.NoError(t, db.Close())

	_, err := l.Prune(ctx, time.Now())
	require.ErrorContains(t, err, "ledger: prune")
	_, _, err = l.Get(ctx, "tenant-a", "op-1")
	require.ErrorContains(t, err, "ledger: get")
	_, err = l.Stats(ctx)
	require.ErrorContains(t, err, "ledger: stats")
	_, err = l.Floor(ctx, "tenant-a")
	require.ErrorContains(t, err, "ledger: floor")
	_, err = ledger.NewSQL(ctx, db, ledger.Options{})
	require.ErrorContains(t, err, "ledger: open")
}
