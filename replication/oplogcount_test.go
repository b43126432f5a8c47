package replication_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// walFrames returns the pages of the frames of the write-ahead log at path
// from byte offset from on, one slice per commit, in order.
func walFrames(t *testing.T, path string, from int64, pageSize int) [][]uint32 {
	t.Helper()
	wal, err := os.ReadFile(path)
	require.NoError(t, err)
	var commits [][]uint32
	var pages []uint32
	for off := from; off+24+int64(pageSize) <= int64(len(wal)); off += 24 + int64(pageSize) {
		pages = append(pages, binary.BigEndian.Uint32(wal[off:]))
		if binary.BigEndian.Uint32(wal[off+4:]) != 0 { // the commit frame: the database's size after it
			commits = append(commits, pages)
			pages = nil
		}
	}
	return commits
}

// oneWrite is a push of one new key, note-i, stamped wall (Unix
// milliseconds), as a device awaiting each write sends it.
func oneWrite(i int, wall int64, value []byte) replication.Batch {
	return replication.Batch{Tenant: "t1", ClientID: "c1", At: time.UnixMilli(wall).UTC(), Writes: []replication.Write{{
		Mutation: syncproto.Mutation{OpID: uuid.Must(uuid.NewV7()).String(), Model: "notes", Key: fmt.Sprintf("note-%09d", i),
			Op: syncproto.OpPut, Value: value, HLC: ts(wall, 0, "c1")}, Policy: syncproto.PolicyLWW}}}
}

// committerOf opens the store of db and the writer connection its pushes
// commit on, as the single node's committer holds them; both close with
// tb. db stays the caller's.
func committerOf(tb testing.TB, db *sql.DB) (*replication.Store, *sql.Conn) {
	tb.Helper()
	ctx := context.Background()
	st, err := replication.OpenStore(ctx, db, replication.StoreOptions{})
	require.NoError(tb, err)
	conn, err := db.Conn(ctx)
	require.NoError(tb, err)
	tb.Cleanup(func() { conn.Close() })
	return st, conn
}

// commitPush applies b over st in one transaction on conn and commits it,
// as the single node's committer does, checking that its one write was
// applied. wrap, when set, runs the Apply call (a seam to observe it).
func commitPush(tb testing.TB, conn *sql.Conn, st *replication.Store, b replication.Batch, wrap func(apply func())) {
	tb.Helper()
	ctx := context.Background()
	tx, err := conn.BeginTx(ctx, nil)
	require.NoError(tb, err)
	var fx replication.Effects
	apply := func() { fx, err = replication.Apply(ctx, st.In(tx), &b) }
	if wrap == nil {
		apply()
	} else {
		wrap(apply)
	}
	require.NoError(tb, err)
	require.NoError(tb, tx.Commit())
	require.Len(tb, fx.Entries, 1)
}

// TestOneWriteCommitWritesNoTenantCount: the commit of a one-write push,
// as the committer makes it (replication.Apply in one transaction, at
// synchronous=FULL, automatic checkpoints off), writes no page of
// oplog_tenants or its indexes once the tenant has its row, and some ten
// pages to the log in all (twelve when every append counted its tenant's
// entries). The pages are read from the write-ahead log's frame headers.
func TestOneWriteCommitWritesNoTenantCount(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "syncd.db")
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{Synchronous: sqlitedb.Full, NoAutoCheckpoint: true})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	st, conn := committerOf(t, db)
	value := []byte(`{"title":"a note","body":"a value of a typical size for a small JSON document","n":12345}`)
	start := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC).UnixMilli()
	push := func(i int) { commitPush(t, conn, st, oneWrite(i, start+int64(i), value), nil) }
	for i := range 50 {
		push(i) // the tenant's row, the trees' first pages
	}
	var pageSize int
	require.NoError(t, conn.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&pageSize))
	fi, err := os.Stat(path + "-wal")
	require.NoError(t, err)
	from := fi.Size()
	const n = 200
	for i := 50; i < 50+n; i++ {
		push(i)
	}

	counts := map[uint32]string{}
	rows, err := conn.QueryContext(ctx, `SELECT name, rootpage FROM sqlite_master WHERE tbl_name = 'oplog_tenants' AND rootpage > 0`)
	require.NoError(t, err)
	for rows.Next() {
		var name string
		var root uint32
		require.NoError(t, rows.Scan(&name, &root))
		counts[root] = name // one tenant: each of these trees is its root page
	}
	require.NoError(t, rows.Err())
	require.Len(t, counts, 3, "oplog_tenants (its primary key) and its two indexes")

	commits := walFrames(t, path+"-wal", from, pageSize)
	require.Len(t, commits, n, "one commit a push")
	frames := 0
	for i, pages := range commits {
		frames += len(pages)
		for _, p := range pages {
			require.Empty(t, counts[p], "commit %d wrote a page of %s", i, counts[p])
		}
	}
	perCommit := float64(frames) / n
	t.Logf("log frames per one-write commit: %.2f", perCommit)
	require.Less(t, perCommit, 11.0, "a one-write commit writes about ten pages (twelve with the count)")

	// The count is what compaction and TenantEntries say it is.
	te, err := st.Log.TenantEntries(ctx, "", 10)
	require.NoError(t, err)
	require.Equal(t, []replication.TenantEntries{{Tenant: "t1", Entries: 50 + n}}, te)
}

// rawCounts returns oplog_tenants' stored counts, oplog_meta.counted, and
// each tenant's rows in the oplog.
func rawCounts(t *testing.T, db *sql.DB) (stored map[string]uint64, counted uint64, held map[string]uint64) {
	t.Helper()
	stored, held = map[string]uint64{}, map[string]uint64{}
	for q, m := range map[string]map[string]uint64{
		`SELECT tenant, entries FROM oplog_tenants`:          stored,
		`SELECT tenant, count(*) FROM oplog GROUP BY tenant`: held,
	} {
		rows, err := db.Query(q)
		require.NoError(t, err)
		for rows.Next() {
			var tenant string
			var n uint64
			require.NoError(t, rows.Scan(&tenant, &n))
			m[tenant] = n
		}
		require.NoError(t, rows.Err())
		rows.Close()
	}
	require.NoError(t, db.QueryRow(`SELECT counted FROM oplog_meta`).Scan(&counted))
	return stored, counted, held
}

// TestTenantCountsBetweenCompactions: appends leave oplog_tenants' counts
// as they were, TenantEntries still reads every tenant's exact count, and
// compaction counts the appended entries before it decides, so the count
// bound removes exactly each tenant's excess and the stored counts are the
// rows afterwards.
func TestTenantCountsBetweenCompactions(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, replication.Retention{MaxEntries: 5, MaxAge: -1}, replication.Retention{})
	appendN := func(tenant string, n int) {
		inTx(t, s.db, func(tx *sql.Tx) error {
			for range n {
				key := uuid.NewString()
				if _, err := s.log.AppendNext(ctx, tx, replication.NewEntry(replication.Record{
					Tenant: tenant, Model: "notes", Key: key, Value: []byte(`{}`), Version: 1,
					HLC: ts(s.clock.Now().UnixMilli(), 0, "c1"), OpID: uuid.NewString(),
				}, "c1")); err != nil {
					return err
				}
			}
			return nil
		})
	}
	entries := func() map[string]uint64 {
		te, err := s.log.TenantEntries(ctx, "", 10)
		require.NoError(t, err)
		out := map[string]uint64{}
		for _, e := range te {
			out[e.Tenant] = e.Entries
		}
		return out
	}
	appendN("a", 4)
	appendN("b", 3)
	appendN("a", 4)
	stored, counted, held := rawCounts(t, s.db)
	require.Equal(t, map[string]uint64{"a": 0, "b": 0}, stored, "appends count nothing")
	require.Zero(t, counted)
	require.Equal(t, held, entries(), "TenantEntries adds the uncounted entries")

	n, err := s.log.Compact(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "a's three beyond the bound of five")
	stored, counted, held = rawCounts(t, s.db)
	require.Equal(t, map[string]uint64{"a": 5, "b": 3}, held)
	require.Equal(t, held, stored, "compaction counted everything")
	require.EqualValues(t, 11, counted, "up to the head")
	require.Equal(t, held, entries())
	b, err := s.log.Bounds(ctx, replication.Scope{Tenant: "a"})
	require.NoError(t, err)
	require.EqualValues(t, 3, b.Floor, "a lost its three oldest, seqs 1 to 3")

	appendN("b", 2)
	n, err = s.log.Compact(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "b at the bound")
	appendN("b", 1)
	require.Equal(t, map[string]uint64{"a": 5, "b": 6}, entries())
	n, err = s.log.Compact(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	stored, counted, held = rawCounts(t, s.db)
	require.Equal(t, map[string]uint64{"a": 5, "b": 5}, held)
	require.Equal(t, held, stored)
	require.EqualValues(t, 14, counted)
}

// TestMigrationToCountedKeepsCounts: a file of schema version 3, whose
// appends counted their entries, opens with oplog_meta.counted at its head,
// so its counts stay exact, and appends after the upgrade are counted by
// the next compaction.
func TestMigrationToCountedKeepsCounts(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "syncd.db")
	db := openFile(t, path)
	defer db.Close()
	require.NoError(t, replication.MigrateTo(ctx, db, 3))
	for seq, tenant := range []string{"x", "y", "x", "x", "y", "x"} {
		_, err := db.Exec(`INSERT INTO oplog (seq, tenant, model, key, op_id, op, value, version, wall, logical, origin, client_id, applied_at)
			VALUES (?, ?, 'notes', ?, ?, 'put', '{}', 1, 1, 0, 'c1', 'c1', 1)`, seq+1, tenant, fmt.Sprint(seq), uuid.NewString())
		require.NoError(t, err)
	}
	_, err := db.Exec(`INSERT INTO oplog_tenants (tenant, entries) VALUES ('x', 4), ('y', 2)`)
	require.NoError(t, err)

	st, err := replication.OpenStore(ctx, db, replication.StoreOptions{Log: replication.Retention{MaxEntries: 3, MaxAge: -1}})
	require.NoError(t, err)
	require.Equal(t, 3, st.MigratedFrom)
	stored, counted, held := rawCounts(t, db)
	require.EqualValues(t, 6, counted, "counted from the head: the file's counts were exact")
	require.Equal(t, held, stored)

	inTx(t, db, func(tx *sql.Tx) error {
		_, err := st.Log.AppendNext(ctx, tx, replication.NewEntry(replication.Record{
			Tenant: "y", Model: "notes", Key: "new", Value: []byte(`{}`), Version: 1, HLC: ts(2, 0, "c1"), OpID: uuid.NewString(),
		}, "c1"))
		return err
	})
	te, err := st.Log.TenantEntries(ctx, "", 10)
	require.NoError(t, err)
	require.Equal(t, []replication.TenantEntries{{Tenant: "x", Entries: 4}, {Tenant: "y", Entries: 3}}, te)
	n, err := st.Log.Compact(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "x's one beyond three")
	stored, counted, held = rawCounts(t, db)
	require.EqualValues(t, 7, counted)
	require.Equal(t, map[string]uint64{"x": 3, "y": 3}, held)
	require.Equal(t, held, stored)
}
