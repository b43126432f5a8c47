package offlinequeue

import (
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// pipeGate holds the committer in the next group it writes once stall is
// armed, and holds every sync of the groupSyncer until released; it
// reports group sizes and syncs.
type pipeGate struct {
	sizes   chan int
	stall   atomic.Pointer[chan struct{}] // armed: the next group waits on it
	syncs   chan struct{}                 // one per sync begun
	release chan struct{}                 // closed: syncs proceed
	syncErr error
}

func newPipeGate(syncErr error) *pipeGate {
	return &pipeGate{sizes: make(chan int, 64), syncs: make(chan struct{}, 64), release: make(chan struct{}), syncErr: syncErr}
}

// arm makes the next group wait until the returned function is called.
func (g *pipeGate) arm() (unstall func()) {
	ch := make(chan struct{})
	g.stall.Store(&ch)
	return func() { close(ch) }
}

func (g *pipeGate) hooks() sqliteHooks {
	return sqliteHooks{
		batch: func(size int) {
			g.sizes <- size
			if ch := g.stall.Swap(nil); ch != nil {
				<-*ch
			}
		},
		syncLog: func(path string) error {
			g.syncs <- struct{}{}
			<-g.release
			if g.syncErr != nil {
				return g.syncErr
			}
			return syncFile(path)
		},
	}
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		require.FailNow(t, what)
		var zero T
		return zero
	}
}

// asyncDone runs wait on a goroutine and returns a channel that yields its
// results once it returned.
func asyncDone(wait func() []sqliteResult) <-chan []sqliteResult {
	ch := make(chan []sqliteResult, 1)
	go func() { ch <- wait() }()
	return ch
}

// stallThenGroup has the committer hold a lone enqueue (released at once
// after) and queues args behind it, so that they form the next group.
func stallThenGroup(t *testing.T, q *SQLite, g *pipeGate, stallKey string, args ...sqliteArgs) (stalled <-chan []sqliteResult, group <-chan []sqliteResult) {
	t.Helper()
	unstall := g.arm()
	t.Cleanup(func() { g.stall.Store(nil) })
	stalled = asyncDone(sqliteEnqueueAsync(q, sqliteArgs{"stall", stallKey}))
	require.Equal(t, 1, recv(t, g.sizes, "the committer wrote no group"))
	waiting := q.waiting.Load()
	group = asyncDone(sqliteEnqueueAsync(q, args...))
	require.Eventually(t, func() bool { return q.waiting.Load() == waiting+int64(len(args)) }, 10*time.Second, time.Millisecond,
		"the enqueues did not reach the committer")
	unstall()
	require.Equal(t, len(args), recv(t, g.sizes, "the group was not written"))
	return stalled, group
}

// notReturned asserts that the calls behind ch have not returned.
func notReturned(t *testing.T, ch <-chan []sqliteResult, what string) {
	t.Helper()
	select {
	case <-ch:
		require.FailNow(t, what+" returned before the sync of its commit")
	default:
	}
}

func queueLen(t *testing.T, q *SQLite) int {
	t.Helper()
	items, err := q.Peek(t.Context(), 0, 1000)
	require.NoError(t, err)
	return len(items)
}

// A group with company commits without a sync and its callers return only
// after the sync that follows it; while that sync runs, the committer
// writes the next group (pipelining), and a lone dedup hit of the group's
// key also waits for the sync. Counts, not times: the syncs are held
// until released.
func TestSQLitePipelinedGroupReturnsAfterItsSync(t *testing.T) {
	g := newPipeGate(nil)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "queue.db")
	q := openTestSQLite(t, path, SQLiteOptions{Options: Options{Metrics: m}}, g.hooks())
	t.Cleanup(func() {
		select {
		case <-g.release:
		default:
			close(g.release) // a failing test must not leave Close waiting
		}
	})

	groupA := []sqliteArgs{{"a1", "ka1"}, {"a2", "ka2"}, {"a3", ""}, {"a4", "ka1"}}
	stalled, doneA := stallThenGroup(t, q, g, "", groupA...)
	first := recv(t, stalled, "the lone enqueue did not return")[0]
	require.NoError(t, first.err, "a lone enqueue commits and syncs itself")
	recv(t, g.syncs, "no sync began for group A")
	require.Equal(t, 1+3, queueLen(t, q), "group A is committed (ka1 twice is one item)")
	notReturned(t, doneA, "group A")

	// A lone enqueue of a key of group A: a dedup hit, held for the sync.
	dup := asyncDone(sqliteEnqueueAsync(q, sqliteArgs{"again", "ka2"}))
	require.Equal(t, 1, recv(t, g.sizes, "the dedup hit was not written"))

	// The next group commits while group A's sync is held.
	groupB := []sqliteArgs{{"b1", "kb1"}, {"b2", ""}, {"b3", "kb3"}}
	stalled2, doneB := stallThenGroup(t, q, g, "ks2", groupB...)
	require.Equal(t, 1+3+1+3, queueLen(t, q), "group B committed during group A's sync")
	notReturned(t, doneA, "group A")
	notReturned(t, dup, "the dedup hit of group A's item")
	notReturned(t, doneB, "group B")

	close(g.release)
	stall2 := recv(t, stalled2, "the second lone enqueue did not return")[0]
	require.NoError(t, stall2.err)
	resA := recv(t, doneA, "group A did not return")
	resB := recv(t, doneB, "group B did not return")
	hit := recv(t, dup, "the dedup hit did not return")[0]
	for _, r := range append(append(resA, resB...), hit) {
		require.NoError(t, r.err)
	}
	require.Equal(t, []ID{first.id + 1, first.id + 2, first.id + 3, first.id + 1},
		[]ID{resA[0].id, resA[1].id, resA[2].id, resA[3].id}, "group A in its order, ka1 once")
	require.Equal(t, resA[1].id, hit.id)
	require.Equal(t, []ID{stall2.id + 1, stall2.id + 2, stall2.id + 3}, []ID{resB[0].id, resB[1].id, resB[2].id})

	syncs := 1 + len(g.syncs) // the first, received above, and the rest
	require.GreaterOrEqual(t, syncs, 2, "group A's sync, then one for group B")
	require.Equal(t, float64(syncs), testutil.ToFloat64(m.pipelined.WithLabelValues(path)))
}

// A failed sync of a pipelined group: every member gets ErrPoisoned (the
// outcome is unknown), the handle refuses later writes and keeps serving
// reads.
func TestSQLitePipelinedSyncFailurePoisons(t *testing.T) {
	g := newPipeGate(errors.New("injected: fsync failed"))
	close(g.release)
	q := openTestSQLite(t, filepath.Join(t.TempDir(), "queue.db"), SQLiteOptions{}, g.hooks())
	stalled, done := stallThenGroup(t, q, g, "", sqliteArgs{"a", "ka"}, sqliteArgs{"b", ""}, sqliteArgs{"c", "kc"})
	require.NoError(t, recv(t, stalled, "the lone enqueue did not return")[0].err)
	for _, r := range recv(t, done, "the group did not return") {
		require.ErrorIs(t, r.err, ErrPoisoned)
		require.ErrorContains(t, r.err, "injected: fsync failed")
		require.Zero(t, r.id)
	}
	_, err := q.Enqueue(t.Context(), []byte("later"), "")
	require.ErrorIs(t, err, ErrPoisoned, "a poisoned handle refuses writes")
	require.Equal(t, 4, queueLen(t, q), "reads still work")
}
