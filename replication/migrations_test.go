package replication_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// openFile opens the database file at path the way syncd does.
// The caller closes it.
func openFile(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sqlitedb.Open(context.Background(), path, sqlitedb.Options{})
	require.NoError(t, err)
	return db
}

// TestOpenStoreStampsANewFile: a new file is made at this build's schema
// version, found at 0, and a second open runs nothing.
func TestOpenStoreStampsANewFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "syncd.db")
	db := openFile(t, path)
	s, err := replication.OpenStore(ctx, db, replication.StoreOptions{})
	require.NoError(t, err)
	require.Equal(t, replication.SchemaVersion(), s.SchemaVersion)
	require.Zero(t, s.MigratedFrom)
	v, err := sqlitedb.SchemaVersion(ctx, db)
	require.NoError(t, err)
	require.Equal(t, replication.SchemaVersion(), v)

	s, err = replication.OpenStore(ctx, db, replication.StoreOptions{})
	require.NoError(t, err)
	require.Equal(t, replication.SchemaVersion(), s.MigratedFrom, "a current file runs nothing")
	require.NoError(t, db.Close())
}

// TestOpenStoreRefusesANewerDatabase: a file a newer build wrote (its
// schema version beyond this build's) is refused with both versions named,
// and its bytes are left as they were.
func TestOpenStoreRefusesANewerDatabase(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "syncd.db")
	db := openFile(t, path)
	_, err := replication.OpenStore(ctx, db, replication.StoreOptions{})
	require.NoError(t, err)
	newer := replication.SchemaVersion() + 1
	_, err = db.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, newer))
	require.NoError(t, err)
	require.NoError(t, db.Close())
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	db = openFile(t, path)
	_, err = replication.OpenStore(ctx, db, replication.StoreOptions{})
	require.ErrorIs(t, err, replication.ErrNewerSchema)
	var refused *sqlitedb.NewerSchemaError
	require.ErrorAs(t, err, &refused)
	require.Equal(t, sqlitedb.NewerSchemaError{File: newer, Known: replication.SchemaVersion()}, *refused)
	require.ErrorContains(t, err, fmt.Sprintf("version %d is newer than this build's %d", newer, replication.SchemaVersion()))
	require.NoError(t, db.Close())
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after, "the refused file is unchanged")
}

// TestCoverScopesMigratesAVersion2File: a file at schema version 2, whose
// records_scope held only scope value and key, with scoped records (live
// and deleted) and records of a model no scope covers, migrates to the
// covering records_scope: every snapshot reads the same records before
// and after, and the branch of a scope value followed reads that index
// alone, no table row.
func TestCoverScopesMigratesAVersion2File(t *testing.T) {
	ctx := context.Background()
	db := openFile(t, filepath.Join(t.TempDir(), "syncd.db"))
	defer db.Close()
	require.NoError(t, replication.MigrateTo(ctx, db, 2))
	records, err := replication.NewRecords(ctx, db)
	require.NoError(t, err)
	var recs []replication.Record
	for i := range 30 {
		rec := replication.Record{Tenant: "t1", Model: "tasks", Key: fmt.Sprintf("task-%02d", i), Version: 1,
			HLC: ts(1_700_000_000_000+int64(i), 0, "c1"), OpID: fmt.Sprintf("op-%02d", i), Seq: uint64(i + 1)}
		switch i % 3 {
		case 0:
			rec.Model = "notes"
			rec.Value = []byte(`{"text":"no scope"}`)
		case 1:
			rec.ScopeValue = fmt.Sprintf("p%d", i%2)
			rec.Value = []byte(fmt.Sprintf(`{"project":%q}`, rec.ScopeValue))
		default:
			rec.ScopeValue, rec.Deleted = "p1", i%2 == 0
			if !rec.Deleted {
				rec.Value = []byte(`{"project":"p1"}`)
			}
		}
		recs = append(recs, rec)
	}
	inTx(t, db, func(tx *sql.Tx) error { return records.PutAll(ctx, tx, recs) })

	scopes := projectScopes(t)
	scope := func(values ...string) replication.Scope {
		return replication.Scope{Tenant: "t1", AllModels: true, Scopes: scopes, Follow: syncproto.ScopeSet{"project": values}}
	}
	read := func(s replication.Scope) []string {
		var got []string
		_, err := records.SnapshotLive(ctx, db, s, func(_ uint64, rec *replication.LiveRecord) error {
			got = append(got, fmt.Sprintf("%s/%s v%d %s %s %s", rec.Model, rec.Key, rec.Version, rec.HLC, rec.ScopeValue, rec.Value))
			return nil
		})
		require.NoError(t, err)
		slices.Sort(got)
		return got
	}
	scopesRead := []replication.Scope{scope("p1"), scope("p0", "p1"), scope("*"), {Tenant: "t1", AllModels: true}}
	var before [][]string
	for _, s := range scopesRead {
		before = append(before, read(s))
	}
	require.Len(t, before[0], 20, "the 10 notes, and the 10 live tasks of p1")

	s, err := replication.OpenStore(ctx, db, replication.StoreOptions{Scopes: scopes})
	require.NoError(t, err)
	require.Equal(t, 2, s.MigratedFrom)
	require.Zero(t, s.ScopesReindexed, "the records' scope values were already those of the declarations")
	for i, s := range scopesRead {
		require.Equal(t, before[i], read(s), "snapshot of %+v", s.Follow)
	}

	query, args := replication.LiveSelect(scope("p1"))
	rows, err := db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+query, args...)
	require.NoError(t, err)
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
		plan = append(plan, detail)
	}
	require.NoError(t, rows.Err())
	require.Contains(t, plan, "SEARCH records USING COVERING INDEX records_scope (tenant=? AND scope_value=? AND model=?)")
}
