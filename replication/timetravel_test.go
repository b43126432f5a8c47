package replication_test

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// legacyTables are the tables every earlier layout shares with the current
// one, whose rows a migration must leave exactly as they were.
var legacyTables = []string{"records", "records_state", "oplog", "conflicts", "ledger_decisions", "syncd_meta", "sqlite_sequence"}

// loadLegacy makes a database file from a golden of testdata/legacy (a
// database an earlier release wrote, as SQL) and returns it open.
func loadLegacy(t testing.TB, golden, path string) *sql.DB {
	t.Helper()
	dump, err := os.ReadFile(filepath.Join("testdata", "legacy", golden))
	require.NoError(t, err)
	db, err := sqlitedb.Open(context.Background(), path, sqlitedb.Options{})
	require.NoError(t, err)
	_, err = db.Exec(string(dump))
	require.NoError(t, err)
	return db
}

// rawRows returns every row of table as text (its columns cols, all when
// cols is empty), in the order of their first two columns, or nil when
// the table does not exist.
func rawRows(t testing.TB, db *sql.DB, table string, cols ...string) []string {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&n))
	if n == 0 {
		return nil
	}
	list := "*"
	if len(cols) > 0 {
		list = `"` + strings.Join(cols, `", "`) + `"`
	}
	rows, err := db.Query(`SELECT ` + list + ` FROM "` + table + `" ORDER BY 1, 2`)
	require.NoError(t, err)
	defer rows.Close()
	cols, err = rows.Columns()
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		for i, v := range vals {
			if b, ok := v.([]byte); ok {
				vals[i] = "x" + hex.EncodeToString(b)
			}
		}
		out = append(out, fmt.Sprint(vals...))
	}
	require.NoError(t, rows.Err())
	return out
}

// columnsOf returns the names of table's columns, in order.
func columnsOf(t testing.TB, db *sql.DB, table string) []string {
	t.Helper()
	rows, err := db.Query(`SELECT name FROM pragma_table_info(?)`, table)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		out = append(out, name)
	}
	require.NoError(t, rows.Err())
	return out
}

// normalized is a schema dump without white space: the layouts'
// statements differ in indentation, and in where a column a release added
// with ALTER TABLE sits in the line, only.
func normalized(schema string) string {
	return regexp.MustCompile(`\s+`).ReplaceAllString(schema, "")
}

// legacyOplogFloors returns the oplog floor a legacy file promises each of
// tenants: the floor of the whole log (the seq before the oldest retained
// entry) for a release without oplog_meta; each tenant's own, at least the
// base floor, for one with it.
func legacyOplogFloors(t testing.TB, db *sql.DB, tenants ...string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	if rawRows(t, db, "oplog_meta") == nil {
		var floor uint64
		require.NoError(t, db.QueryRow(`SELECT min(seq) - 1 FROM oplog`).Scan(&floor))
		for _, tenant := range tenants {
			out[tenant] = floor
		}
		return out
	}
	for _, tenant := range tenants {
		var floor uint64
		require.NoError(t, db.QueryRow(`SELECT max((SELECT floor FROM oplog_meta),
			coalesce((SELECT floor FROM oplog_tenants WHERE tenant = ?), 0))`, tenant).Scan(&floor))
		out[tenant] = floor
	}
	return out
}

// legacyOplog reads the oplog rows of a legacy file as entries.
func legacyOplog(t testing.TB, db *sql.DB) []replication.Entry {
	t.Helper()
	rows, err := db.Query(`SELECT seq, tenant, model, key, op_id, op, value, version, wall, logical, origin, client_id, applied_at FROM oplog ORDER BY seq`)
	require.NoError(t, err)
	defer rows.Close()
	var es []replication.Entry
	for rows.Next() {
		var e replication.Entry
		var applied int64
		require.NoError(t, rows.Scan(&e.Seq, &e.Tenant, &e.Model, &e.Key, &e.OpID, &e.Op, (*[]byte)(&e.Value), &e.Version,
			&e.HLC.Wall, &e.HLC.Logical, &e.HLC.Origin, &e.ClientID, &applied))
		e.Deleted = e.Op == syncproto.OpDelete
		e.AppliedAt = time.UnixMilli(applied).UTC()
		es = append(es, e)
	}
	require.NoError(t, rows.Err())
	return es
}

// legacyLedger reads what a legacy file promises of its ledger: each
// scope's floor (the ledger-wide floor of version 1, raised by a scope's
// own at version 2) and every decision's result.
func legacyLedger(t testing.TB, db *sql.DB) (floors map[string]int64, results map[[2]string]string) {
	t.Helper()
	var base sql.NullInt64
	require.NoError(t, db.QueryRow(`SELECT floor_ms FROM ledger_meta`).Scan(&base))
	floors, results = map[string]int64{"never-wrote": base.Int64}, map[[2]string]string{}
	rows, err := db.Query(`SELECT scope, op_id, result FROM ledger_decisions`)
	require.NoError(t, err)
	for rows.Next() {
		var scope, op string
		var result []byte
		require.NoError(t, rows.Scan(&scope, &op, &result))
		results[[2]string{scope, op}] = string(result)
		floors[scope] = base.Int64
	}
	require.NoError(t, rows.Err())
	if rawRows(t, db, "ledger_scopes") != nil {
		rows, err := db.Query(`SELECT scope, coalesce(floor_ms, 0) FROM ledger_scopes`)
		require.NoError(t, err)
		for rows.Next() {
			var scope string
			var f int64
			require.NoError(t, rows.Scan(&scope, &f))
			floors[scope] = max(base.Int64, f)
		}
		require.NoError(t, rows.Err())
	}
	return floors, results
}

// TestOpenStoreMigratesEveryShippedLayout is the time-travel test of
// syncd's database: a file of every layout main ever had before the
// database carried one schema version (testdata/legacy, written by each
// release's own code, gen.sh) opens under this build, migrates to
// SchemaVersion in one step, keeps every row of the tables it shares with
// the current layout, ends in the same schema as a new file, serves the
// same records, oplog (floors and cursors included), ledger answers and
// conflicts, takes new writes after its head, and is not migrated twice.
func TestOpenStoreMigratesEveryShippedLayout(t *testing.T) {
	ctx := context.Background()
	fresh := openDB(t)
	_, err := replication.OpenStore(ctx, fresh, replication.StoreOptions{})
	require.NoError(t, err)
	want, err := sqlitedb.Schema(ctx, fresh)
	require.NoError(t, err)

	goldens, err := filepath.Glob(filepath.Join("testdata", "legacy", "*.sql"))
	require.NoError(t, err)
	require.Len(t, goldens, 6, "one golden per layout that shipped")
	for _, golden := range goldens {
		name := filepath.Base(golden)
		t.Run(strings.TrimSuffix(name, ".sql"), func(t *testing.T) {
			db := loadLegacy(t, name, filepath.Join(t.TempDir(), "syncd.db"))
			defer db.Close()
			v, err := sqlitedb.SchemaVersion(ctx, db)
			require.NoError(t, err)
			require.Zero(t, v, "a release before versions left user_version 0")
			before := map[string][]string{}
			columns := map[string][]string{} // the columns each table had
			for _, table := range legacyTables {
				before[table] = rawRows(t, db, table)
				columns[table] = columnsOf(t, db, table)
			}
			entries := legacyOplog(t, db)
			oplogFloors := legacyOplogFloors(t, db, "acme", "globex", "never-wrote")
			var head uint64
			require.NoError(t, db.QueryRow(`SELECT seq FROM sqlite_sequence WHERE name = 'oplog'`).Scan(&head))
			floors, results := legacyLedger(t, db)
			var conflicts int
			require.NoError(t, db.QueryRow(`SELECT count(*) FROM conflicts`).Scan(&conflicts))

			s, err := replication.OpenStore(ctx, db, replication.StoreOptions{})
			require.NoError(t, err)
			require.Equal(t, 0, s.MigratedFrom)
			require.Equal(t, replication.SchemaVersion(), s.SchemaVersion)
			for _, table := range legacyTables {
				if before[table] != nil {
					require.Equal(t, before[table], rawRows(t, db, table, columns[table]...), "rows of %s", table)
				}
			}
			got, err := sqlitedb.Schema(ctx, db)
			require.NoError(t, err)
			require.Equal(t, normalized(want), normalized(got), "a migrated file has the layout of a new one")
			if before["syncd_meta"] != nil {
				require.Equal(t, "0193a1f0-0000-7000-8000-00000000d00d", s.ID, "the database keeps its id")
			} else {
				require.NotEmpty(t, s.ID, "a database of the first release gets an id")
			}

			// The oplog: every retained entry, the same floors, the same
			// expired cursors.
			require.Positive(t, oplogFloors["acme"], "every golden compacted some of acme's entries")
			for tenant, floor := range oplogFloors {
				b, err := s.Log.Bounds(ctx, replication.Scope{Tenant: tenant})
				require.NoError(t, err)
				require.Equal(t, floor, b.Floor, tenant)
			}
			all := replication.Scope{AllTenants: true, AllModels: true}
			b, err := s.Log.Bounds(ctx, all)
			require.NoError(t, err)
			require.Equal(t, head, b.Head)
			page, err := s.Log.Read(ctx, replication.ReadRequest{After: b.Floor, Scope: all})
			require.NoError(t, err)
			require.Equal(t, entries, page.Entries)
			_, err = s.Log.Read(ctx, replication.ReadRequest{After: 1, Scope: replication.Scope{Tenant: "acme", AllModels: true}})
			require.ErrorIs(t, err, replication.ErrCursorExpired, "a cursor expired before the upgrade stays expired")

			// The records: what the oplog's last write of each key made.
			for _, e := range entries {
				rec, ok, err := s.Records.Current(ctx, e.Tenant, e.Model, e.Key)
				require.NoError(t, err)
				require.True(t, ok)
				if rec.Seq == e.Seq {
					require.Equal(t, e.Record(), rec)
				}
			}

			// The ledger: every decision's answer, every scope's floor.
			for key, result := range results {
				d, ok, err := s.Ledger.Get(ctx, key[0], key[1])
				require.NoError(t, err)
				require.True(t, ok, key)
				require.Equal(t, result, string(d.Result))
			}
			for scope, floor := range floors {
				f, err := s.Ledger.Floor(ctx, scope)
				require.NoError(t, err)
				if floor == 0 {
					require.True(t, f.IsZero(), "%s has no floor: %v", scope, f)
					continue
				}
				require.Equal(t, floor, f.UnixMilli(), scope)
			}
			st, err := s.Ledger.Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, len(results), st.Entries)

			cs, err := s.Conflicts.List(ctx, replication.ConflictFilter{Scope: all})
			require.NoError(t, err)
			require.Len(t, cs, conflicts)

			// New writes go after the head, and a reopen runs nothing.
			applyPut(t, s, "globex", "g3", time.UnixMilli(1793534940000))
			b, err = s.Log.Bounds(ctx, all)
			require.NoError(t, err)
			require.Equal(t, head+1, b.Head)
			again, err := replication.OpenStore(ctx, db, replication.StoreOptions{})
			require.NoError(t, err)
			require.Equal(t, replication.SchemaVersion(), again.MigratedFrom)
		})
	}
}

// applyPut decides and commits one put of tenant's notes/key through s.
func applyPut(t testing.TB, s *replication.Store, tenant, key string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	author := replication.Author{Tenant: tenant, ClientID: "phone", CanWrite: func(string) bool { return true }}
	m := syncproto.Mutation{OpID: "0193a1f0-5c1e-7a4b-9d2e-aaaaaaaaaaaa", Model: "notes", Key: key, Op: syncproto.OpPut,
		Value: []byte(`{"title":"new"}`), HLC: syncproto.Timestamp{Wall: at.UnixMilli(), Origin: "phone"}}
	b := replication.Admit(author, []syncproto.Mutation{m}, replication.Config{}, at, replication.DefaultMaxClockSkew)
	tx, err := s.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	fx, err := replication.Apply(ctx, s.In(tx), &b)
	require.NoError(t, err)
	require.Len(t, fx.Entries, 1)
	require.NoError(t, tx.Commit())
	s.Committed(fx.Entries[0].Seq)
}
