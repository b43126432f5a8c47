package replication_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/fakeclock"
	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// openDB opens a fresh database file in tb's temporary directory the way
// syncd opens its own (internal/sqlitedb: WAL, synchronous=FULL, a busy
// timeout, IMMEDIATE write transactions), so the tests and benchmarks run
// under the server's pragmas, and readTx's deferred reads are exercised
// against a handle whose transactions would otherwise take the write lock.
func openDB(tb testing.TB) *sql.DB {
	tb.Helper()
	db, err := sqlitedb.Open(context.Background(), filepath.Join(tb.TempDir(), "syncd.db"), sqlitedb.Options{})
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, db.Close()) })
	return db
}

// store is the replication state of one database, as the server wires it.
type store struct {
	db        *sql.DB
	log       *replication.SQLiteLog
	records   *replication.Records
	conflicts *replication.ConflictLog
	clock     *fakeclock.Clock
}

func openStore(tb testing.TB, logRet, conflictRet replication.Retention) *store {
	tb.Helper()
	ctx := context.Background()
	s := &store{db: openDB(tb), clock: fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	_, err := replication.Migrate(ctx, s.db)
	require.NoError(tb, err)
	s.log, err = replication.NewSQLiteLog(ctx, s.db, replication.LogOptions{Retention: logRet, Now: s.clock.Now})
	require.NoError(tb, err)
	s.records, err = replication.NewRecords(ctx, s.db)
	require.NoError(tb, err)
	s.conflicts, err = replication.NewConflictLog(ctx, s.db, replication.ConflictLogOptions{Retention: conflictRet, Now: s.clock.Now})
	require.NoError(tb, err)
	return s
}

// inTx runs fn in a write transaction and commits it, failing tb on error.
func inTx(tb testing.TB, db *sql.DB, fn func(tx *sql.Tx) error) {
	tb.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	require.NoError(tb, err)
	if err := fn(tx); err != nil {
		require.NoError(tb, tx.Rollback())
		require.NoError(tb, err)
	}
	require.NoError(tb, tx.Commit())
}

func ts(wall int64, logical uint32, origin string) syncproto.Timestamp {
	return syncproto.Timestamp{Wall: wall, Logical: logical, Origin: origin}
}

func ptr[T any](v T) *T { return &v }

// mutationOf is p as a client sends it.
func mutationOf(p replication.Proposal) syncproto.Mutation {
	return syncproto.Mutation{
		OpID: p.OpID, Model: p.Model, Key: p.Key, Op: p.Op, Value: p.Value, HLC: p.HLC,
		BaseVersion: p.BaseVersion, SeenVersion: p.SeenVersion,
	}
}

func mustJSON(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	require.NoError(tb, err)
	return string(b)
}
