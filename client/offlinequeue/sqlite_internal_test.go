package offlinequeue

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mattn/go-sqlite3"
	"github.com/stretchr/testify/require"
)

// openTestSQLite opens a queue with hooks and closes it at the end of the test.
func openTestSQLite(t *testing.T, path string, opts SQLiteOptions, hooks sqliteHooks) *SQLite {
	t.Helper()
	q, err := openSQLite(path, opts, hooks)
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	return q
}

func TestSQLiteSettingsOnEveryConnection(t *testing.T) {
	for _, c := range []struct {
		name      string
		opts      SQLiteOptions
		busy      int64
		syncLevel int64
	}{
		{"defaults", SQLiteOptions{}, 5000, 2},
		{"normal", SQLiteOptions{Synchronous: SyncNormal, BusyTimeout: 1500 * time.Millisecond}, 1500, 1},
		{"full", SQLiteOptions{Synchronous: SyncFull, BusyTimeout: time.Microsecond}, 1, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := openTestSQLite(t, filepath.Join(t.TempDir(), "queue.db"), c.opts, sqliteHooks{})
			ctx := t.Context()
			// Hold several connections at once, so that each is a
			// distinct connection of the pool.
			var conns []*sql.Conn
			for range 3 {
				conn, err := q.db.Conn(ctx)
				require.NoError(t, err)
				defer conn.Close()
				conns = append(conns, conn)
			}
			for i, conn := range conns {
				var busy, level int64
				var mode string
				require.NoError(t, conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy))
				require.NoError(t, conn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&level))
				require.NoError(t, conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode))
				require.Equal(t, c.busy, busy, "connection %d busy_timeout", i)
				require.Equal(t, c.syncLevel, level, "connection %d synchronous", i)
				require.Equal(t, "wal", mode, "connection %d journal_mode", i)
			}
		})
	}
}

func TestSQLiteOpenFailsUnlessWALReadsBack(t *testing.T) {
	dir := t.TempDir()
	// A connection that ends up outside WAL (as on a file system without
	// shared memory) must fail the open with a clear error.
	_, err := openSQLite(filepath.Join(dir, "queue.db"), SQLiteOptions{}, sqliteHooks{connect: func(c *sqlite3.SQLiteConn) error {
		_, err := c.Exec("PRAGMA journal_mode=DELETE", nil)
		return err
	}})
	require.ErrorContains(t, err, `journal_mode is "delete", not "wal"`)
	require.ErrorContains(t, err, "local disk")
}

func TestSQLiteQueriesUseIndexes(t *testing.T) {
	q := openTestSQLite(t, filepath.Join(t.TempDir(), "queue.db"), SQLiteOptions{}, sqliteHooks{})
	plan := func(query string, args ...any) string {
		rows, err := q.db.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
		require.NoError(t, err)
		defer rows.Close()
		var details []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
			details = append(details, detail)
		}
		require.NoError(t, rows.Err())
		return strings.Join(details, "; ")
	}
	require.Contains(t, plan(sqlFindKey, []byte("k")), "INDEX items_key", "key lookup must use the partial unique index")
	require.Contains(t, plan(sqlInsertNew, []byte("p"), []byte("k"), 0), "INDEX items_key", "the insert's key lookup must use the partial unique index")
	require.Contains(t, plan(sqlFindKeys(2), []byte("k"), []byte("l")), "INDEX items_key", "a group's key lookup must use the partial unique index")
	require.Contains(t, plan(sqlPeek, 0, 10), "INTEGER PRIMARY KEY", "Peek must seek by ID, not scan")
	require.Contains(t, plan(sqlListDead, 0, 10), "INTEGER PRIMARY KEY", "DeadLetters must seek by ID, not scan")
}

// TestSQLitePeekPagesDeepQueue fills the table directly (an enqueue per item
// would take minutes under the race detector) and pages through it.
func TestSQLitePeekPagesDeepQueue(t *testing.T) {
	const n, pageSize = 100_000, 1000
	path := filepath.Join(t.TempDir(), "queue.db")
	q, err := openSQLite(path, SQLiteOptions{}, sqliteHooks{})
	require.NoError(t, err)
	_, err = q.db.ExecContext(t.Context(), `
		WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?)
		INSERT INTO items (payload, key, attempts, enqueued_at)
		SELECT CAST(i AS TEXT), CAST('k' || i AS BLOB), 0, 0 FROM seq`, n)
	require.NoError(t, err)
	require.NoError(t, q.Close())

	q = openTestSQLite(t, path, SQLiteOptions{Options: Options{MaxDepth: n + 1}}, sqliteHooks{})
	got, err := q.Len(t.Context())
	require.NoError(t, err)
	require.Equal(t, n, got, "counts are read on open")

	var after ID
	pages := 0
	for ; pages <= n/pageSize; pages++ {
		page, err := q.Peek(t.Context(), after, pageSize)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		for _, it := range page {
			want := strconv.FormatUint(uint64(after)+1, 10)
			if it.ID != after+1 || string(it.Payload) != want || it.Key != "k"+want {
				require.Failf(t, "bad item", "after %d got %+v", after, it)
			}
			after = it.ID
		}
	}
	require.Equal(t, n/pageSize, pages)
	require.Equal(t, ID(n), after)

	// The next enqueue continues the sequence.
	id, err := q.Enqueue(t.Context(), []byte("next"), "k1")
	require.NoError(t, err)
	require.Equal(t, ID(1), id, "key k1 is pending: dedup hit")
	id, err = q.Enqueue(t.Context(), []byte("next"), "")
	require.NoError(t, err)
	require.Equal(t, ID(n+1), id)
}

// sqliteGate holds the committer inside its first group until released, and
// reports the size of every group.
type sqliteGate struct {
	sizes    chan int
	release  chan struct{}
	once     sync.Once // the committer waits once
	released sync.Once
}

// next returns the size of the next group the committer writes.
func (g *sqliteGate) next(t *testing.T) int {
	t.Helper()
	select {
	case n := <-g.sizes:
		return n
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the committer wrote no group")
		return 0
	}
}

// open releases the committer; it may be called more than once.
func (g *sqliteGate) open() { g.released.Do(func() { close(g.release) }) }

func newSQLiteGate() *sqliteGate {
	return &sqliteGate{sizes: make(chan int, 64), release: make(chan struct{})}
}

func (g *sqliteGate) hooks() sqliteHooks {
	return sqliteHooks{batch: func(size int) {
		g.sizes <- size
		g.once.Do(func() { <-g.release })
	}}
}

type sqliteResult struct {
	id  ID
	err error
}

type sqliteArgs struct {
	payload, key string
}

// sqliteEnqueueAsync runs Enqueue calls in goroutines; wait returns their results
// in argument order.
func sqliteEnqueueAsync(q *SQLite, args ...sqliteArgs) (wait func() []sqliteResult) {
	results := make([]sqliteResult, len(args))
	var wg sync.WaitGroup
	for i, a := range args {
		wg.Go(func() {
			id, err := q.Enqueue(context.Background(), []byte(a.payload), a.key)
			results[i] = sqliteResult{id, err}
		})
	}
	return func() []sqliteResult {
		wg.Wait()
		return results
	}
}

// stallSQLiteThenQueue makes the committer busy with one enqueue (held by g) and
// queues args behind it; it returns once all of args are waiting for the
// committer, with the function that releases the gate and collects the
// results (the stalled enqueue's first).
func stallSQLiteThenQueue(t *testing.T, q *SQLite, g *sqliteGate, args ...sqliteArgs) func() (sqliteResult, []sqliteResult) {
	t.Helper()
	// Registered after the queue's Close, so it runs first: a failing test
	// must not leave Close waiting for a held committer.
	t.Cleanup(g.open)
	// The stalled enqueue goes through the committer, not its caller's own
	// commit: the committer must be the one held, or it would take the
	// first of args off its channel and wait for the writer with it.
	q.solo.Store(false)
	waitFirst := sqliteEnqueueAsync(q, sqliteArgs{"stall", ""})
	require.Equal(t, 1, g.next(t), "the first enqueue is committed alone, at once")
	waitRest := sqliteEnqueueAsync(q, args...)
	// In the committer's channel, not only counted as waiting: an enqueue
	// counts itself before its send, and one still between the two would
	// miss the group the gate's opening starts.
	require.LessOrEqual(t, len(args), cap(q.requests))
	require.Eventually(t, func() bool { return q.waiting.Load() == int64(len(args)) && len(q.requests) == len(args) },
		10*time.Second, time.Millisecond, "the enqueues did not reach the committer")
	return func() (sqliteResult, []sqliteResult) {
		g.open()
		return waitFirst()[0], waitRest()
	}
}

func TestSQLiteGroupCommitSharesOneTransaction(t *testing.T) {
	g := newSQLiteGate()
	// Count the transactions SQLite itself commits, on every connection.
	var commits atomic.Int64
	hooks := g.hooks()
	hooks.connect = func(c *sqlite3.SQLiteConn) error {
		c.RegisterCommitHook(func() int { commits.Add(1); return 0 })
		return nil
	}
	q := openTestSQLite(t, filepath.Join(t.TempDir(), "queue.db"), SQLiteOptions{}, hooks)
	before := commits.Load()

	args := []sqliteArgs{{"a", ""}, {"b", ""}, {"dup-1", "dup"}, {"c", "c"}, {"dup-2", "dup"}, {"d", ""}, {"e", ""}, {"f", ""}}
	finish := stallSQLiteThenQueue(t, q, g, args...)
	first, results := finish()
	require.NoError(t, first.err)
	require.Equal(t, len(args), g.next(t), "the enqueues that arrived during a commit share the next one")
	require.Equal(t, int64(2), commits.Load()-before, "9 enqueues, 2 commits: the stalled one and the group")

	ids := map[ID]string{first.id: "stall"}
	for i, r := range results {
		require.NoError(t, r.err, args[i].payload)
		require.Greater(t, r.id, first.id)
		if args[i].payload == "dup-2" {
			continue
		}
		require.NotContains(t, ids, r.id)
		ids[r.id] = args[i].payload
	}
	require.Equal(t, results[2].id, results[4].id, "the same key twice in one group is one item")
	n, err := q.Len(t.Context())
	require.NoError(t, err)
	require.Equal(t, len(args), n, "stall + 8 - 1 duplicate")

	// With nothing in flight, the next enqueue is committed alone, at once.
	_, err = q.Enqueue(t.Context(), []byte("lone"), "")
	require.NoError(t, err)
	require.Equal(t, 1, g.next(t))
	require.Equal(t, int64(3), commits.Load()-before)
}

// A group larger than a multi-row statement is written in chunks: every
// member gets the id of its own item, of the pending item its key names, or
// of the earlier member of the group with its key; the ids are those of the
// items Peek reads, without gaps; and a lone enqueue of a pending key takes
// no id.
func TestSQLiteGroupWritesChunksWithDedup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.db")
	ctx := t.Context()
	q, err := openSQLite(path, SQLiteOptions{}, sqliteHooks{})
	require.NoError(t, err)
	for _, k := range []string{"pending-1", "pending-2"} {
		_, err := q.Enqueue(ctx, []byte(k), k)
		require.NoError(t, err)
	}
	require.NoError(t, q.Close())
	g := newSQLiteGate()
	q = openTestSQLite(t, path, SQLiteOptions{}, g.hooks())
	args := []sqliteArgs{{"again-1", "pending-1"}, {"again-2", "pending-2"}}
	for i := range 2*maxMultiRow + 5 {
		switch i % 3 {
		case 0:
			args = append(args, sqliteArgs{fmt.Sprintf("empty-%d", i), ""})
		case 1:
			args = append(args, sqliteArgs{fmt.Sprintf("key-%d", i), fmt.Sprintf("k-%d", i)})
		default: // the key of the member before, which may come first
			args = append(args, sqliteArgs{fmt.Sprintf("key-%d", i), fmt.Sprintf("k-%d", i-1)})
		}
	}
	finish := stallSQLiteThenQueue(t, q, g, args...)
	first, results := finish()
	require.NoError(t, first.err)
	require.Equal(t, len(args), g.next(t), "one group")

	items, err := q.Peek(ctx, 0, 1000)
	require.NoError(t, err)
	byID := map[ID]Item{}
	for i, it := range items {
		require.Equal(t, ID(i+1), it.ID, "ids without gaps")
		byID[it.ID] = it
	}
	keyed := 0
	for i, r := range results {
		require.NoError(t, r.err)
		it, ok := byID[r.id]
		require.True(t, ok, "member %d got id %d, no item", i, r.id)
		require.Equal(t, args[i].key, it.Key, "member %d", i)
		if args[i].key == "" {
			require.Equal(t, args[i].payload, string(it.Payload))
		}
		if strings.HasPrefix(args[i].key, "k-") {
			keyed++
		}
	}
	require.Equal(t, ID(1), results[0].id, "a pending key is a dedup hit")
	require.Equal(t, ID(2), results[1].id)
	empties := (len(args) - 2 + 2) / 3
	require.Len(t, items, 2+1+empties+(keyed+1)/2, "two pending, the stall, the empty keys, one item per key")

	// A lone enqueue of a pending key is a dedup hit and takes no id.
	id, err := q.Enqueue(ctx, []byte("again"), "pending-1")
	require.NoError(t, err)
	require.Equal(t, ID(1), id)
	id, err = q.Enqueue(ctx, []byte("next"), "next")
	require.NoError(t, err)
	require.Equal(t, ID(len(items)+1), id)
}

func TestSQLiteGroupCommitCountsDepthWithinGroup(t *testing.T) {
	g := newSQLiteGate()
	q := openTestSQLite(t, filepath.Join(t.TempDir(), "queue.db"), SQLiteOptions{Options: Options{MaxDepth: 5}}, g.hooks())
	var args []sqliteArgs
	for i := range 8 {
		args = append(args, sqliteArgs{fmt.Sprintf("item-%d", i), ""})
	}
	finish := stallSQLiteThenQueue(t, q, g, args...)
	first, results := finish()
	require.NoError(t, first.err)
	require.Equal(t, 8, g.next(t))

	accepted := 0
	for _, r := range results {
		if r.err == nil {
			accepted++
			continue
		}
		var full *FullError
		require.ErrorAs(t, r.err, &full)
		require.Equal(t, FullError{Depth: 5, Capacity: 5}, *full)
	}
	require.Equal(t, 4, accepted, "stall + 4 fill the queue")
	n, err := q.Len(t.Context())
	require.NoError(t, err)
	require.Equal(t, 5, n)
}

// A statement failing inside a group fails every enqueue of the group and
// leaves none of them; the handle keeps working.
func TestSQLiteFailedGroupLeavesNoTrace(t *testing.T) {
	g := newSQLiteGate()
	path := filepath.Join(t.TempDir(), "queue.db")
	q := openTestSQLite(t, path, SQLiteOptions{}, g.hooks())
	_, err := q.db.ExecContext(t.Context(), `CREATE TRIGGER refuse BEFORE INSERT ON items
		WHEN NEW.payload = CAST('refused' AS BLOB) BEGIN SELECT RAISE(ABORT, 'injected refusal'); END`)
	require.NoError(t, err)

	args := []sqliteArgs{{"a", "key-a"}, {"b", ""}, {"refused", ""}, {"c", ""}}
	finish := stallSQLiteThenQueue(t, q, g, args...)
	first, results := finish()
	require.NoError(t, first.err)
	require.Equal(t, len(args), g.next(t))
	for i, r := range results {
		require.ErrorContains(t, r.err, "injected refusal", args[i].payload)
		require.NotErrorIs(t, r.err, ErrPoisoned, "a rolled-back group is not an unknown outcome")
		require.Zero(t, r.id)
	}

	check := func(q *SQLite) {
		items, err := q.Peek(t.Context(), 0, 10)
		require.NoError(t, err)
		require.Len(t, items, 1)
		require.Equal(t, "stall", string(items[0].Payload))
		n, err := q.Len(t.Context())
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
	check(q)
	id, err := q.Enqueue(t.Context(), []byte("a"), "key-a")
	require.NoError(t, err, "the key of a failed group was never taken")
	require.NoError(t, q.MarkDone(t.Context(), id))
	require.NoError(t, q.Close())
	check(openTestSQLite(t, path, SQLiteOptions{}, sqliteHooks{}))
}

// A commit that fails leaves its outcome unknown: the handle is poisoned,
// refuses later writes, keeps serving reads, and a reopen works.
func TestSQLiteFailedCommitPoisonsHandle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.db")
	q := openTestSQLite(t, path, SQLiteOptions{}, sqliteHooks{connect: func(c *sqlite3.SQLiteConn) error {
		_, err := c.Exec("PRAGMA foreign_keys = ON", nil)
		return err
	}})
	kept, err := q.Enqueue(t.Context(), []byte("kept"), "")
	require.NoError(t, err)
	doomed, err := q.Enqueue(t.Context(), []byte("commit-fails"), "")
	require.NoError(t, err)
	require.NoError(t, q.MoveToDeadLetters(t.Context(), doomed, "parked"))

	// A deferred foreign key is checked at COMMIT, so this trigger makes
	// the commit of any transaction inserting such an item fail.
	_, err = q.db.ExecContext(t.Context(), `
		CREATE TABLE parent (id INTEGER PRIMARY KEY);
		CREATE TABLE child (parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);
		CREATE TRIGGER orphan AFTER INSERT ON items WHEN NEW.payload = CAST('commit-fails' AS BLOB)
		BEGIN INSERT INTO child (parent) VALUES (42); END`)
	require.NoError(t, err)

	// A lone enqueue is one autocommit statement: SQLite rolled it back,
	// so the error is certain and the handle stays usable.
	_, err = q.Enqueue(t.Context(), []byte("commit-fails"), "")
	require.ErrorContains(t, err, "FOREIGN KEY")
	require.NotErrorIs(t, err, ErrPoisoned)

	// An explicit transaction whose COMMIT fails poisons the handle.
	err = q.Requeue(t.Context(), doomed)
	require.ErrorIs(t, err, ErrPoisoned)
	require.ErrorContains(t, err, "FOREIGN KEY")

	_, err = q.Enqueue(t.Context(), []byte("later"), "")
	require.ErrorIs(t, err, ErrPoisoned, "a poisoned handle refuses writes")
	require.ErrorIs(t, q.MarkDone(t.Context(), kept), ErrPoisoned)
	items, err := q.Peek(t.Context(), 0, 10)
	require.NoError(t, err, "reads still work")
	require.Len(t, items, 1)
	require.NoError(t, q.Close())

	q = openTestSQLite(t, path, SQLiteOptions{}, sqliteHooks{})
	items, err = q.Peek(t.Context(), 0, 10)
	require.NoError(t, err)
	require.Len(t, items, 1)
	require.Equal(t, kept, items[0].ID)
	require.NoError(t, q.MarkDone(t.Context(), kept), "a reopened handle writes again")
}

// Close racing an enqueue in flight lets the enqueue finish: it is durable,
// and the committer has stopped when Close returns.
func TestSQLiteCloseDuringEnqueue(t *testing.T) {
	g := newSQLiteGate()
	path := filepath.Join(t.TempDir(), "queue.db")
	q := openTestSQLite(t, path, SQLiteOptions{}, g.hooks())
	t.Cleanup(g.open)
	wait := sqliteEnqueueAsync(q, sqliteArgs{"in flight", ""})
	require.Equal(t, 1, g.next(t))

	closed := make(chan error, 1)
	go func() { closed <- q.Close() }()
	g.open()
	res := wait()[0]
	require.NoError(t, res.err, "the enqueue in flight completes")
	require.NoError(t, <-closed)
	select {
	case <-q.stopped:
	default:
		require.Fail(t, "Close returned before the committer stopped")
	}
	_, err := q.Enqueue(t.Context(), []byte("late"), "")
	require.ErrorIs(t, err, ErrClosed)

	q = openTestSQLite(t, path, SQLiteOptions{}, sqliteHooks{})
	items, err := q.Peek(t.Context(), 0, 10)
	require.NoError(t, err)
	require.Len(t, items, 1)
	require.Equal(t, res.id, items[0].ID)
}

// TestSchemaVersionIsTheNumberOfMigrations: a build writes the version its
// last migration reaches, so a new migration raises schemaVersion with it.
func TestSchemaVersionIsTheNumberOfMigrations(t *testing.T) {
	require.Len(t, migrations, schemaVersion)
}
