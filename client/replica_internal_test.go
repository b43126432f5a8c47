package client

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/client/synccore"
	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/syncproto"
)

// replicaLayouts are the two places a replica lives: in a SQLite queue's
// file, or in a file of its own beside another queue.
var replicaLayouts = []struct {
	name string
	open func(t *testing.T, dir string) offlinequeue.Queue
}{
	{"in-queue", func(t *testing.T, dir string) offlinequeue.Queue {
		q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
		require.NoError(t, err)
		return q
	}},
	{"own-file", func(t *testing.T, dir string) offlinequeue.Queue {
		q, err := offlinequeue.OpenFile(filepath.Join(dir, "queue.ndjson"), offlinequeue.FileOptions{})
		require.NoError(t, err)
		return q
	}},
}

// forEachLayout runs test on a replica in each layout, over its queue.
func forEachLayout(t *testing.T, test func(t *testing.T, r *replica)) {
	for _, l := range replicaLayouts {
		t.Run(l.name, func(t *testing.T) {
			dir := t.TempDir()
			q := l.open(t, dir)
			r, err := openReplica(t.Context(), q, filepath.Join(dir, "replica.db"), offlinequeue.SyncFull, time.Now)
			require.NoError(t, err)
			t.Cleanup(func() {
				require.NoError(t, r.close())
				require.NoError(t, q.Close())
			})
			test(t, r)
		})
	}
}

func testMutation(t *testing.T, key, value string) *syncproto.Mutation {
	t.Helper()
	op, err := syncproto.NewOpID()
	require.NoError(t, err)
	return &syncproto.Mutation{OpID: op, Model: "notes", Key: key, Op: syncproto.OpPut, Value: json.RawMessage(value),
		HLC: syncproto.Timestamp{Wall: time.Now().UnixMilli(), Origin: "phone-1"}}
}

// The sync worker can replay and decide a queued write before the Put that
// queued it has copied it into the pending overlay. The late copy must not
// resurrect the write as pending: reads would show it over the server's
// records forever and Await would never return.
func TestPendingAfterDecisionIsIgnored(t *testing.T) {
	forEachLayout(t, testPendingAfterDecisionIsIgnored)
}

func testPendingAfterDecisionIsIgnored(t *testing.T, r *replica) {
	m := testMutation(t, "k", `{"n":1}`)
	require.NoError(t, r.decide(t.Context(), m, Outcome{OpID: m.OpID, Status: StatusApplied, Version: 1, Seq: 1, HLC: m.HLC, DecidedAt: time.Now()}))
	require.NoError(t, r.addPending(t.Context(), 1, m))

	pending, err := isPending(t.Context(), r, m.OpID)
	require.NoError(t, err)
	require.False(t, pending)
	rec, found, err := r.get(t.Context(), "notes", "k")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, Record{Model: "notes", Key: "k", Value: json.RawMessage(`{"n":1}`), Version: 1}, rec)

	// The overlay's high-water mark still moves, so a restart does not
	// copy the item again either.
	hw, err := r.meta(t.Context(), r.db, metaPendingHW)
	require.NoError(t, err)
	require.Equal(t, uint64(1), hw)
}

// A write copied into the overlay before its decision leaves it when
// decided, in the same transaction that records the outcome.
func TestDecisionRemovesPending(t *testing.T) {
	forEachLayout(t, testDecisionRemovesPending)
}

func testDecisionRemovesPending(t *testing.T, r *replica) {
	m := testMutation(t, "k", `{"n":1}`)
	require.NoError(t, r.addPending(t.Context(), 1, m))
	pending, err := isPending(t.Context(), r, m.OpID)
	require.NoError(t, err)
	require.True(t, pending)

	w := &syncproto.Winner{Version: 4, Value: json.RawMessage(`{"n":"theirs"}`), HLC: syncproto.Timestamp{Wall: m.HLC.Wall + 1, Origin: "phone-2"}}
	require.NoError(t, r.decide(t.Context(), m, Outcome{OpID: m.OpID, Status: StatusSuperseded, Winner: w, DecidedAt: time.Now()}))
	pending, err = isPending(t.Context(), r, m.OpID)
	require.NoError(t, err)
	require.False(t, pending)
	rec, found, err := r.get(t.Context(), "notes", "k")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, Record{Model: "notes", Key: "k", Value: w.Value, Version: 4}, rec, "the winner folds into the records")
	o, found, err := r.outcome(t.Context(), m.OpID)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, StatusSuperseded, o.Status)
	require.Equal(t, *w, *o.Winner)
}

// refuseInserts makes every later insert into table fail, as a full disk
// or an I/O error would fail the overlay's or the outcome's write.
func refuseInserts(t *testing.T, r *replica, table string) {
	t.Helper()
	require.NoError(t, r.write(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TRIGGER refuse_`+table+` BEFORE INSERT ON `+table+` BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`)
		return err
	}))
}

// In the queue's file a write and its overlay row are one commit: when the
// overlay's insert fails, the write is not queued either, so no crash or
// failure can leave a queued write the overlay lacks (or the reverse). In
// a file of its own the queue commits first and the overlay is repaired
// later (overlayErr).
func TestEnqueueIsOneCommitInTheQueuesFile(t *testing.T) {
	forEachLayout(t, func(t *testing.T, r *replica) {
		ok := testMutation(t, "a", `{"n":1}`)
		_, overlayErr, err := r.enqueue(t.Context(), mustJSON(t, ok), ok, nil)
		require.NoError(t, err)
		require.NoError(t, overlayErr)

		refuseInserts(t, r, "pending")
		m := testMutation(t, "b", `{"n":2}`)
		_, overlayErr, err = r.enqueue(t.Context(), mustJSON(t, m), m, nil)
		n, lenErr := r.queue.Len(t.Context())
		require.NoError(t, lenErr)
		if r.shared != nil {
			require.ErrorContains(t, err, "refused by the test")
			require.Equal(t, 1, n, "the write whose overlay row failed is not queued")
		} else {
			require.NoError(t, err)
			require.ErrorContains(t, overlayErr, "refused by the test")
			require.Equal(t, 2, n, "queued; the overlay is repaired by reconcile")
		}
		pending, err := isPending(t.Context(), r, m.OpID)
		require.NoError(t, err)
		require.False(t, pending)
		pending, err = isPending(t.Context(), r, ok.OpID)
		require.NoError(t, err)
		require.True(t, pending)
	})
}

// Recording outcomes and marking their items done are one commit in the
// queue's file: when the outcome's insert fails, the items stay queued and
// pending, to be resent. In a file of its own the outcomes go first, so the
// same failure also leaves the items queued.
func TestDecideDoneLeavesNothingHalfDone(t *testing.T) {
	forEachLayout(t, func(t *testing.T, r *replica) {
		m := testMutation(t, "a", `{"n":1}`)
		_, _, err := r.enqueue(t.Context(), mustJSON(t, m), m, nil)
		require.NoError(t, err)
		items, err := r.queue.Peek(t.Context(), 0, 10)
		require.NoError(t, err)
		require.Len(t, items, 1)
		o := Outcome{OpID: m.OpID, Status: StatusApplied, Version: 1, Seq: 1, HLC: m.HLC, DecidedAt: time.Now()}
		ds := []decision{{mut: m, outcome: o}}

		refuseInserts(t, r, "outcomes")
		require.ErrorContains(t, r.decideDone(t.Context(), ds, []offlinequeue.ID{items[0].ID}, true), "refused by the test")
		n, err := r.queue.Len(t.Context())
		require.NoError(t, err)
		require.Equal(t, 1, n, "the item stays queued")
		pending, err := isPending(t.Context(), r, m.OpID)
		require.NoError(t, err)
		require.True(t, pending, "and pending")

		require.NoError(t, r.write(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `DROP TRIGGER refuse_outcomes`)
			return err
		}))
		require.NoError(t, r.decideDone(t.Context(), ds, []offlinequeue.ID{items[0].ID}, true))
		n, err = r.queue.Len(t.Context())
		require.NoError(t, err)
		require.Zero(t, n)
		got, found, err := r.outcome(t.Context(), m.OpID)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, StatusApplied, got.Status)
	})
}

// setLastSync commits at most once per heldMetaEvery, yet lastSync reports
// the newest time given, and close commits what was held back.
func TestLastSyncIsThrottledButExact(t *testing.T) {
	dir := t.TempDir()
	q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
	require.NoError(t, err)
	defer q.Close()
	r, err := openReplica(t.Context(), q, "", offlinequeue.SyncFull, time.Now)
	require.NoError(t, err)
	stored := func() uint64 {
		ms, err := r.meta(t.Context(), r.db, metaLastSync)
		require.NoError(t, err)
		return ms
	}
	t0 := time.UnixMilli(1_700_000_000_000)
	require.NoError(t, r.setLastSync(t.Context(), t0))
	require.Equal(t, uint64(t0.UnixMilli()), stored())
	t1 := t0.Add(heldMetaEvery / 2)
	require.NoError(t, r.setLastSync(t.Context(), t1))
	require.Equal(t, uint64(t0.UnixMilli()), stored(), "held back")
	got, err := r.lastSync(t.Context())
	require.NoError(t, err)
	require.True(t, got.Equal(t1), "reported at once")
	t2 := t0.Add(heldMetaEvery)
	require.NoError(t, r.setLastSync(t.Context(), t2))
	require.Equal(t, uint64(t2.UnixMilli()), stored())
	t3 := t2.Add(time.Millisecond)
	require.NoError(t, r.setLastSync(t.Context(), t3))
	require.NoError(t, r.close())
	require.Equal(t, uint64(t3.UnixMilli()), stored(), "committed at close")
}

func mustJSON(t *testing.T, m *syncproto.Mutation) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

// A feed page of entries the records already hold (the device's own writes
// echoed back) writes nothing: its cursor is held, reported by cursor at
// once, committed with the next page that writes, after heldMetaEvery, or
// at close. A page with one entry newer than the records applies it.
func TestEchoedFeedPagesCommitNothing(t *testing.T) {
	dir := t.TempDir()
	q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
	require.NoError(t, err)
	defer q.Close()
	now := time.UnixMilli(1_700_000_000_000)
	r, err := openReplica(t.Context(), q, "", offlinequeue.SyncFull, func() time.Time { return now })
	require.NoError(t, err)
	ctx := t.Context()
	stored := func() uint64 {
		v, err := r.meta(ctx, r.db, metaCursor)
		require.NoError(t, err)
		return v
	}
	reported := func() uint64 {
		v, err := r.cursor(ctx)
		require.NoError(t, err)
		return v
	}
	hlc := syncproto.Timestamp{Wall: now.UnixMilli(), Origin: "phone-1"}
	change := func(seq uint64, key string, version uint64) syncproto.Change {
		return syncproto.Change{Seq: seq, Model: "notes", Key: key, Value: json.RawMessage(`{"v":` + fmt.Sprint(version) + `}`), Version: version, HLC: hlc}
	}

	require.NoError(t, applyFeed(ctx, r, []syncproto.Change{change(1, "a", 1), change(2, "b", 1)}, 2))
	require.Equal(t, uint64(2), stored())

	// The same entries again, and an older version: held, not written.
	require.NoError(t, applyFeed(ctx, r, []syncproto.Change{change(1, "a", 1), change(2, "b", 1)}, 3))
	require.NoError(t, applyFeed(ctx, r, []syncproto.Change{change(4, "a", 1)}, 4))
	require.Equal(t, uint64(2), stored())
	require.Equal(t, uint64(4), reported())

	// One newer entry among echoes: applied, and the cursor committed.
	require.NoError(t, applyFeed(ctx, r, []syncproto.Change{change(5, "a", 1), change(6, "b", 2)}, 6))
	require.Equal(t, uint64(6), stored())
	rec, found, err := r.get(ctx, "notes", "b")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, uint64(2), rec.Version)

	// Held at most heldMetaEvery.
	require.NoError(t, applyFeed(ctx, r, []syncproto.Change{change(7, "b", 2)}, 7))
	require.Equal(t, uint64(6), stored())
	now = now.Add(heldMetaEvery)
	require.NoError(t, applyFeed(ctx, r, []syncproto.Change{change(8, "b", 2)}, 8))
	require.Equal(t, uint64(8), stored())

	// Close commits what is held.
	require.NoError(t, applyFeed(ctx, r, []syncproto.Change{change(9, "b", 2)}, 9))
	require.Equal(t, uint64(8), stored())
	require.NoError(t, r.close())
	require.Equal(t, uint64(9), stored())
}

// ownFileQueue hides a SQLite queue's sharing, as a queue of an earlier
// version had none: a replica over it keeps a file of its own.
type ownFileQueue struct{ offlinequeue.Queue }

// A replica file an earlier version kept beside a SQLite queue is moved
// into the queue's file at open: records, cursor, pending overlay and
// outcomes, in one commit; the old file is removed. A file found again
// after the import (a crash after its commit) is only removed, and a file
// that is not a replica is refused and left alone.
func TestReplicaFileIsImportedIntoTheQueuesFile(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
	require.NoError(t, err)
	defer q.Close()
	path := filepath.Join(dir, "replica.db")

	old, err := openReplica(ctx, ownFileQueue{q}, path, offlinequeue.SyncFull, time.Now)
	require.NoError(t, err)
	require.Nil(t, old.shared)
	server := testMutation(t, "s", `{"from":"server"}`)
	require.NoError(t, applyFeed(ctx, old, []syncproto.Change{{Seq: 7, Model: "notes", Key: "s", Value: server.Value, Version: 3, HLC: server.HLC}}, 7))
	pending, decided := testMutation(t, "p", `{"n":1}`), testMutation(t, "d", `{"n":2}`)
	for _, m := range []*syncproto.Mutation{pending, decided} {
		_, overlayErr, err := old.enqueue(ctx, mustJSON(t, m), m, nil)
		require.NoError(t, err)
		require.NoError(t, overlayErr)
	}
	require.NoError(t, old.decide(ctx, decided, Outcome{OpID: decided.OpID, Status: StatusApplied, Version: 1, Seq: 8, HLC: decided.HLC, DecidedAt: time.Now()}))
	require.NoError(t, old.close())

	r, err := openReplica(ctx, q, path, offlinequeue.SyncFull, time.Now)
	require.NoError(t, err)
	require.NotNil(t, r.shared)
	require.NoFileExists(t, path)
	require.NoFileExists(t, path+"-wal")
	cursor, err := r.cursor(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(7), cursor)
	rec, found, err := r.get(ctx, "notes", "s")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, uint64(3), rec.Version)
	isPending, err := isPending(ctx, r, pending.OpID)
	require.NoError(t, err)
	require.True(t, isPending)
	o, found, err := r.outcome(ctx, decided.OpID)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, StatusApplied, o.Status)
	require.NoError(t, r.close())

	// Found again after the import committed: removed, not imported.
	again, err := openReplica(ctx, ownFileQueue{q}, path, offlinequeue.SyncFull, time.Now)
	require.NoError(t, err)
	require.NoError(t, applyFeed(ctx, again, []syncproto.Change{{Seq: 9, Model: "notes", Key: "s", Value: server.Value, Version: 9, HLC: server.HLC}}, 9))
	require.NoError(t, again.close())
	r, err = openReplica(ctx, q, path, offlinequeue.SyncFull, time.Now)
	require.NoError(t, err)
	require.NoFileExists(t, path)
	rec, _, err = r.get(ctx, "notes", "s")
	require.NoError(t, err)
	require.Equal(t, uint64(3), rec.Version, "not imported twice")
	require.NoError(t, r.close())
}

func TestReplicaImportRefusesAFileThatIsNoReplica(t *testing.T) {
	t.Run("empty file: nothing to import", func(t *testing.T) {
		dir := t.TempDir()
		q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
		require.NoError(t, err)
		defer q.Close()
		path := filepath.Join(dir, "replica.db")
		require.NoError(t, os.WriteFile(path, nil, 0o600))
		r, err := openReplica(t.Context(), q, path, offlinequeue.SyncFull, time.Now)
		require.NoError(t, err)
		require.NoFileExists(t, path)
		require.NoError(t, r.close())
	})
	t.Run("another database: refused, untouched", func(t *testing.T) {
		dir := t.TempDir()
		q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
		require.NoError(t, err)
		defer q.Close()
		path := filepath.Join(dir, "other.db")
		other, err := sqlitedb.Open(t.Context(), path, sqlitedb.Options{})
		require.NoError(t, err)
		_, err = other.Exec(`CREATE TABLE t (x)`)
		require.NoError(t, err)
		require.NoError(t, other.Close())
		_, err = openReplica(t.Context(), q, path, offlinequeue.SyncFull, time.Now)
		require.ErrorContains(t, err, "not a syncd replica")
		require.FileExists(t, path)
	})

	dir := t.TempDir()
	q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
	require.NoError(t, err)
	defer q.Close()
	path := filepath.Join(dir, "notes.txt")
	content := []byte("not a database")
	require.NoError(t, os.WriteFile(path, content, 0o600))
	_, err = openReplica(t.Context(), q, path, offlinequeue.SyncFull, time.Now)
	require.Error(t, err)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, content, got)
}

// A settled batch records many applied writes with multi-row statements:
// more than one chunk, two writes to one key in either order (the higher
// version stands), and a write decided twice (the first outcome stands),
// beside a superseded one recorded on its own.
func TestDecideManyAppliedWrites(t *testing.T) {
	forEachLayout(t, func(t *testing.T, r *replica) {
		ctx := t.Context()
		var ds []decision
		var ids []offlinequeue.ID
		add := func(m *syncproto.Mutation, o Outcome) {
			_, _, err := r.enqueue(ctx, mustJSON(t, m), m, nil)
			require.NoError(t, err)
			ds = append(ds, decision{mut: m, outcome: o})
		}
		now := time.Now()
		for i := range 2*decideChunk + 3 {
			m := testMutation(t, fmt.Sprintf("k%03d", i), fmt.Sprintf(`{"i":%d}`, i))
			add(m, Outcome{OpID: m.OpID, Status: StatusApplied, Version: 1, Seq: uint64(i + 1), HLC: m.HLC, DecidedAt: now})
		}
		newer, older := testMutation(t, "same", `{"v":2}`), testMutation(t, "same", `{"v":1}`)
		add(newer, Outcome{OpID: newer.OpID, Status: StatusApplied, Version: 2, Seq: 500, HLC: newer.HLC, DecidedAt: now})
		add(older, Outcome{OpID: older.OpID, Status: StatusApplied, Version: 1, Seq: 499, HLC: older.HLC, DecidedAt: now})
		lost := testMutation(t, "lost", `{"mine":true}`)
		w := &syncproto.Winner{Version: 5, Value: json.RawMessage(`{"theirs":true}`), HLC: lost.HLC}
		add(lost, Outcome{OpID: lost.OpID, Status: StatusSuperseded, Winner: w, DecidedAt: now})
		items, err := r.queue.Peek(ctx, 0, len(ds)+1)
		require.NoError(t, err)
		require.Len(t, items, len(ds))
		for _, it := range items {
			ids = append(ids, it.ID)
		}
		// The first decision of newer stands against a second one.
		first := ds[2*decideChunk+3]
		require.NoError(t, r.decide(ctx, first.mut, first.outcome))

		again := ds[2*decideChunk+3]
		again.outcome.Seq = 12345
		require.NoError(t, r.decideDone(ctx, append(ds, again), ids, true))

		n, err := r.queue.Len(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		for _, d := range ds {
			pending, err := isPending(ctx, r, d.mut.OpID)
			require.NoError(t, err)
			require.False(t, pending)
			o, found, err := r.outcome(ctx, d.mut.OpID)
			require.NoError(t, err)
			require.True(t, found)
			require.Equal(t, d.outcome.Status, o.Status)
			require.Equal(t, d.outcome.Seq, o.Seq)
		}
		rec, found, err := r.get(ctx, "notes", "same")
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, Record{Model: "notes", Key: "same", Value: newer.Value, Version: 2}, rec)
		rec, _, err = r.get(ctx, "notes", "lost")
		require.NoError(t, err)
		require.Equal(t, Record{Model: "notes", Key: "lost", Value: w.Value, Version: 5}, rec)
		rec, _, err = r.get(ctx, "notes", fmt.Sprintf("k%03d", 2*decideChunk+2))
		require.NoError(t, err)
		require.Equal(t, uint64(1), rec.Version)
	})
}

// decide records a write's final outcome, as the driver's settling does,
// without touching the queue.
func (r *replica) decide(ctx context.Context, m *syncproto.Mutation, o Outcome) error {
	return r.write(ctx, r.decideHook([]decision{{mut: m, outcome: o}}))
}

// isPending reports whether opID is in r's pending overlay.
func isPending(ctx context.Context, r *replica, opID string) (bool, error) {
	_, _, pending, err := r.outcomeOrPending(ctx, opID)
	return pending, err
}

// applyFeed applies a feed page of entries with no evictions.
func applyFeed(ctx context.Context, r *replica, entries []syncproto.Change, cursor uint64) error {
	_, _, err := r.applyChanges(ctx, synccore.Apply{Cursor: cursor, Entries: entries}, nil)
	return err
}
