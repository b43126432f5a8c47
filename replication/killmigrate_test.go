package replication_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mattn/go-sqlite3"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/crashpoint/crashtest"
	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/replication"
)

// Environment of the child process of TestKillDuringMigration.
const (
	childDB     = "SYNCD_MIGRATION_CHILD_DB"
	childStopAt = "SYNCD_MIGRATION_CHILD_STOP_AT"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(childDB); path != "" {
		os.Exit(migrateUntil(path, os.Getenv(childStopAt)))
	}
	os.Exit(m.Run())
}

// migrateUntil is the child: it opens the store at path, so the migration
// runs, and at the point stopAt names it prints "stopped at <point>" and
// waits to be killed. The points: "ledger" (the ledger's tables migrated,
// the oplog's not yet), "oplog" (every table migrated) and "commit" (the
// migration's transaction about to commit). It returns 1 if the migration
// ran to its end instead.
func migrateUntil(path, stopAt string) int {
	var ledgerDone, oplogDone atomic.Bool
	stop := crashtest.Stop // until killed
	db, err := sqlitedb.Open(context.Background(), path, sqlitedb.Options{Configure: func(c *sqlite3.SQLiteConn) error {
		c.RegisterUpdateHook(func(_ int, _, table string, _ int64) {
			switch table {
			case "ledger_meta": // rebuilt once the ledger's tables are
				ledgerDone.Store(true)
				if stopAt == "ledger" {
					stop(stopAt)
				}
			case "oplog_meta": // the last table the migration writes
				oplogDone.Store(true)
				if stopAt == "oplog" {
					stop(stopAt)
				}
			}
		})
		c.RegisterCommitHook(func() int {
			if stopAt == "commit" && ledgerDone.Load() && oplogDone.Load() {
				stop(stopAt)
			}
			return 0
		})
		return nil
	}})
	if err != nil {
		fmt.Println(err)
		return 2
	}
	_, err = replication.OpenStore(context.Background(), db, replication.StoreOptions{})
	fmt.Println("migration ended:", err)
	return 1
}

// largeLegacy makes a file of the first release's layout (one floor for
// the oplog and one for the ledger: the layout whose migration does the
// most) holding, besides the golden's rows, n oplog entries of 500 tenants
// and n ledger decisions.
func largeLegacy(t testing.TB, path string, n int) {
	t.Helper()
	db := loadLegacy(t, "1_first_release.sql", path)
	defer db.Close()
	_, err := db.Exec(fmt.Sprintf(`
		WITH RECURSIVE i(n) AS (SELECT 9 UNION ALL SELECT n + 1 FROM i WHERE n < %[1]d + 8)
		INSERT INTO oplog (seq, tenant, model, key, op_id, op, value, version, wall, logical, origin, client_id, applied_at)
		SELECT n, 'tenant-' || (n %% 500), 'notes', 'k' || n, printf('0193a1f0-5c1e-7a4b-9d2e-%%012d', n), 'put',
			CAST('{"n":' || n || '}' AS BLOB), 1, 1793534880000 + n, 0, 'dev', 'dev', 1793534880000 + n FROM i;
		WITH RECURSIVE i(n) AS (SELECT 9 UNION ALL SELECT n + 1 FROM i WHERE n < %[1]d + 8)
		INSERT INTO ledger_decisions (scope, op_id, op_time, digest, result, decided_at)
		SELECT 'tenant-' || (n %% 500), printf('0193a1f0-5c1e-7a4b-9d2e-%%012d', n), 1793534880000 + n, x'01', x'02', 1793534880000 + n FROM i;`, n))
	require.NoError(t, err)
}

// fileFacts is what a kill must not change of a database: its version, its
// layout's marks, and how many entries and decisions it holds.
type fileFacts struct {
	Version          int
	LegacyLedgerMeta bool // ledger_meta still has schema_version
	OplogMeta        bool
	Oplog, Decisions int
}

func factsOf(t *testing.T, db *sql.DB) fileFacts {
	t.Helper()
	var f fileFacts
	var err error
	f.Version, err = sqlitedb.SchemaVersion(context.Background(), db)
	require.NoError(t, err)
	require.NoError(t, db.QueryRow(`SELECT
		(SELECT count(*) FROM pragma_table_info('ledger_meta') WHERE name = 'schema_version'),
		(SELECT count(*) FROM sqlite_master WHERE name = 'oplog_meta'),
		(SELECT count(*) FROM oplog), (SELECT count(*) FROM ledger_decisions)`).Scan(&f.LegacyLedgerMeta, &f.OplogMeta, &f.Oplog, &f.Decisions))
	return f
}

// TestKillDuringMigration: a syncd process killed with SIGKILL in the
// middle of migrating a large file of the first release (after the
// ledger's tables were rewritten, after every table was, just before the
// commit) leaves the file at the old version with nothing of the
// migration applied; the next open migrates it whole, losing nothing, and
// its per-tenant counts match the rows.
func TestKillDuringMigration(t *testing.T) {
	const n = 100_000
	for _, point := range []string{"ledger", "oplog", "commit"} {
		t.Run(point, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "syncd.db")
			largeLegacy(t, path, n)
			db := openFile(t, path)
			before := factsOf(t, db)
			require.Equal(t, fileFacts{Version: 0, LegacyLedgerMeta: true, Oplog: n + 4, Decisions: n + 4}, before)
			require.NoError(t, db.Close())

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			r := crashtest.Run(t, ctx, []string{childDB + "=" + path, childStopAt + "=" + point})
			require.True(t, r.Stopped, "the migration ran to its end: %s", r.Output)
			require.Equal(t, point, r.Point)

			db = openFile(t, path)
			defer db.Close()
			require.Equal(t, before, factsOf(t, db), "the killed migration left nothing of itself")
			s, err := replication.OpenStore(context.Background(), db, replication.StoreOptions{})
			require.NoError(t, err)
			require.Equal(t, 0, s.MigratedFrom)
			require.Equal(t, fileFacts{Version: replication.SchemaVersion(), OplogMeta: true, Oplog: n + 4, Decisions: n + 4}, factsOf(t, db))
			var mismatched int
			require.NoError(t, db.QueryRow(`SELECT count(*) FROM oplog_tenants AS t
				WHERE entries != (SELECT count(*) FROM oplog AS o WHERE o.tenant = t.tenant)`).Scan(&mismatched))
			require.Zero(t, mismatched, "every tenant's count is its rows")
			st, err := s.Ledger.Stats(context.Background())
			require.NoError(t, err)
			require.Equal(t, n+4, st.Entries)
		})
	}
}

// BenchmarkMigrateFirstRelease measures migration 1 of a first-release
// file of 100,000 oplog entries and 100,000 ledger decisions: the time a
// large upgrade adds to syncd's start (docs/operations.md, section 5).
func BenchmarkMigrateFirstRelease(b *testing.B) {
	const n = 100_000
	for i := range b.N {
		b.StopTimer()
		path := filepath.Join(b.TempDir(), fmt.Sprintf("syncd-%d.db", i))
		largeLegacy(b, path, n)
		db, err := sqlitedb.Open(context.Background(), path, sqlitedb.Options{})
		require.NoError(b, err)
		b.StartTimer()
		_, err = replication.Migrate(context.Background(), db)
		b.StopTimer()
		require.NoError(b, err)
		require.NoError(b, db.Close())
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/migration")
}
