// Package logtest is the conformance suite for replication.Log: every
// implementation's tests call Run, so all of them keep the contract the
// change feed relies on (seq order, consecutive seqs within a transaction,
// scoping, paging, cursor errors, compaction that never moves the head
// back, retention per tenant, wake-ups only after Committed, waiters that
// leave nothing behind).
//
// The per-tenant retention rule (one tenant's compaction never moves
// another's floor) is also run on its own by RunRetention, for a
// replication.Feed written and compacted another way than a Log's
// (replication.Memory through Apply and CompactTo, as the simulation
// drives it).
//
// What the suite cannot check generically stays with each implementation's
// own tests: for SQLiteLog, that a rolled-back transaction leaves no gap.
package logtest

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// Harness is one fresh, empty log under test and what the suite needs
// around it.
type Harness struct {
	Log replication.Log
	// Append writes es as the log's next entries in one unit of commit (a
	// transaction, for SQLiteLog), commits it, and returns the entries as
	// logged (Seq and AppliedAt set). An entry whose Seq is 0 gets the
	// next seq. It does not report the commit: the suite calls
	// Log.Committed, as the log's writer does. A malformed entry (see
	// replication.ErrInvalidEntry) fails the whole unit and writes
	// nothing.
	Append func(ctx context.Context, es ...replication.Entry) ([]replication.Entry, error)
	// Now is the clock the log stamps AppliedAt with and compacts by;
	// Advance moves it.
	Now     func() time.Time
	Advance func(time.Duration)
}

// Opener returns a fresh, empty log whose Compact applies ret.
type Opener func(t *testing.T, ret replication.Retention) Harness

// Run runs the suite, each case on a log of its own.
func Run(t *testing.T, open Opener) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Opener)
	}{
		{"AppendAndRead", testAppendAndRead},
		{"GroupCommit", testGroupCommit},
		{"Scope", testScope},
		{"Paging", testPaging},
		{"ByteBudget", testByteBudget},
		{"Compaction", testCompaction},
		{"InvalidEntry", testInvalidEntry},
		{"NotifyAfterCommit", testNotifyAfterCommit},
		{"WaitCancelLeaksNothing", testWaitCancelLeaksNothing},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open) })
	}
	RunRetention(t, func(t *testing.T, keep int64) Retaining {
		h := open(t, replication.Retention{MaxEntries: keep, MaxAge: -1, Chunk: 2})
		return Retaining{
			Feed:   h.Log,
			Append: func(t testing.TB, es ...replication.Entry) []replication.Entry { return AppendCommitted(t, h, es...) },
			Compact: func(t testing.TB) int64 {
				n, err := h.Log.Compact(context.Background())
				require.NoError(t, err)
				return n
			},
		}
	})
}

// Retaining is a log the per-tenant retention rule is checked on.
type Retaining struct {
	Feed replication.Feed
	// Append commits es as the log's next entries, in order, and returns
	// them as logged.
	Append func(t testing.TB, es ...replication.Entry) []replication.Entry
	// Compact applies the count bound the log was opened with, to the end,
	// and returns how many entries it removed.
	Compact func(t testing.TB) int64
}

// RetainingOpener returns a fresh, empty log that keeps at most keep
// entries of each tenant, with no age bound.
type RetainingOpener func(t *testing.T, keep int64) Retaining

// RunRetention runs the per-tenant retention cases, each on a log of its
// own. Run includes them.
func RunRetention(t *testing.T, open RetainingOpener) {
	t.Run("PerTenantRetention", func(t *testing.T) { testPerTenantRetention(t, open) })
	t.Run("ChurnNeverExpiresOthers", func(t *testing.T) { testChurnNeverExpiresOthers(t, open) })
}

// Entry returns an unlogged entry writing version 1 of tenant/model/key.
func Entry(tenant, model, key string) replication.Entry {
	return replication.NewEntry(replication.Record{
		Tenant: tenant, Model: model, Key: key, Value: []byte(`{"k":"` + key + `"}`),
		Version: 1, HLC: syncproto.Timestamp{Wall: 1000, Origin: "c1"}, OpID: "op-" + tenant + "-" + model + "-" + key,
	}, "c1")
}

// AppendCommitted appends es in one transaction, commits, reports the
// commit, and returns the entries as logged.
func AppendCommitted(t testing.TB, h Harness, es ...replication.Entry) []replication.Entry {
	t.Helper()
	out, err := h.Append(context.Background(), es...)
	require.NoError(t, err)
	require.Len(t, out, len(es))
	h.Log.Committed(out[len(out)-1].Seq)
	return out
}

// Read reads one page, failing t on error.
func Read(t testing.TB, h Harness, req replication.ReadRequest) replication.Page {
	t.Helper()
	page, err := h.Log.Read(context.Background(), req)
	require.NoError(t, err)
	return page
}

// Seqs returns the seqs of es.
func Seqs(es []replication.Entry) []uint64 {
	out := make([]uint64, len(es))
	for i, e := range es {
		out[i] = e.Seq
	}
	return out
}

func tenant(name string) replication.Scope {
	return replication.Scope{Tenant: name, AllModels: true}
}

func testAppendAndRead(t *testing.T, open Opener) {
	h := open(t, replication.Retention{})
	b, err := h.Log.Bounds(context.Background(), tenant("t1"))
	require.NoError(t, err)
	require.Equal(t, replication.Bounds{Oldest: 1, Head: 0}, b, "empty log")
	require.Equal(t, replication.Page{}, Read(t, h, replication.ReadRequest{Scope: tenant("t1")}))

	want := Entry("t1", "notes", "a")
	want.Op, want.Deleted, want.Value = syncproto.OpDelete, true, nil
	got := AppendCommitted(t, h, want)[0]
	want.Seq, want.AppliedAt = 1, time.UnixMilli(h.Now().UnixMilli()).UTC()
	require.Equal(t, want, got)

	put := AppendCommitted(t, h, Entry("t1", "notes", "b"))[0]
	page := Read(t, h, replication.ReadRequest{Scope: tenant("t1")})
	require.Equal(t, replication.Page{Entries: []replication.Entry{want, put}, Next: 2, Head: 2}, page)
	require.True(t, page.CaughtUp())
	b, err = h.Log.Bounds(context.Background(), tenant("t1"))
	require.NoError(t, err)
	require.Equal(t, replication.Bounds{Oldest: 1, Head: 2}, b)
}

// testGroupCommit: appends of several batches sharing one transaction get
// consecutive seqs in call order.
func testGroupCommit(t *testing.T, open Opener) {
	h := open(t, replication.Retention{})
	AppendCommitted(t, h, Entry("t1", "notes", "a"))
	got := AppendCommitted(t, h, Entry("t1", "notes", "b"), Entry("t2", "notes", "c"), Entry("t1", "todos", "d"))
	require.Equal(t, []uint64{2, 3, 4}, Seqs(got))
	require.Equal(t, []string{"b", "c", "d"}, []string{got[0].Key, got[1].Key, got[2].Key})
}

func testScope(t *testing.T, open Opener) {
	h := open(t, replication.Retention{})
	AppendCommitted(t, h,
		Entry("t1", "notes", "1"), Entry("t2", "notes", "2"), Entry("", "notes", "3"),
		Entry("t1", "todos", "4"), Entry("t1", "drafts", "5"), Entry("t2", "todos", "6"))
	keys := func(req replication.ReadRequest) []string {
		var out []string
		for _, e := range Read(t, h, req).Entries {
			out = append(out, e.Key)
		}
		return out
	}
	require.Equal(t, []string{"1", "4", "5"}, keys(replication.ReadRequest{Scope: tenant("t1")}))
	require.Equal(t, []string{"2", "6"}, keys(replication.ReadRequest{Scope: tenant("t2")}))
	require.Equal(t, []string{"3"}, keys(replication.ReadRequest{Scope: tenant("")}))
	require.Empty(t, keys(replication.ReadRequest{Scope: tenant("t3")}))
	require.Equal(t, []string{"6"}, keys(replication.ReadRequest{After: 4, Scope: tenant("t2")}))
	require.Equal(t, []string{"1", "4"}, keys(replication.ReadRequest{Scope: replication.Scope{Tenant: "t1", Models: []string{"notes", "todos"}}}))
	require.Equal(t, []string{"4", "6"}, keys(replication.ReadRequest{Scope: replication.Scope{AllTenants: true, Models: []string{"todos"}}}))
	require.Len(t, keys(replication.ReadRequest{Scope: replication.Scope{AllTenants: true, AllModels: true}}), 6)

	require.Empty(t, keys(replication.ReadRequest{}), "the zero scope selects nothing")
	page := Read(t, h, replication.ReadRequest{Scope: replication.Scope{Tenant: "t1"}})
	require.Equal(t, replication.Page{Next: 6, Head: 6}, page, "no models selects nothing, and is caught up at once")
}

// testPaging reads one tenant's entries, interleaved with another's, in
// pages: every entry exactly once, in order, and the cursor ends at the
// head even though the last entries belong to the other tenant.
func testPaging(t *testing.T, open Opener) {
	h := open(t, replication.Retention{})
	var want []uint64
	for i := range 25 {
		name := "t1"
		if i%3 == 2 {
			name = "t2"
		}
		e := AppendCommitted(t, h, Entry(name, "notes", fmt.Sprint(i)))[0]
		if name == "t1" {
			want = append(want, e.Seq)
		}
	}
	AppendCommitted(t, h, Entry("t2", "notes", "tail"))

	var got []uint64
	cursor := uint64(0)
	for range 10 {
		page := Read(t, h, replication.ReadRequest{After: cursor, Scope: tenant("t1"), Limit: 4})
		require.LessOrEqual(t, len(page.Entries), 4)
		require.Equal(t, uint64(26), page.Head)
		got = append(got, Seqs(page.Entries)...)
		cursor = page.Next
		if page.CaughtUp() {
			break
		}
	}
	require.Equal(t, want, got)
	require.Equal(t, uint64(26), cursor, "the cursor skips the other tenant's tail")
}

func testByteBudget(t *testing.T, open Opener) {
	h := open(t, replication.Retention{})
	big := func(key string) replication.Entry {
		e := Entry("t1", "notes", key)
		e.Value = []byte(fmt.Sprintf(`"%0100d"`, 0)) // 102 bytes
		return e
	}
	AppendCommitted(t, h, big("a"), big("b"), big("c"))

	page := Read(t, h, replication.ReadRequest{Scope: tenant("t1"), MaxBytes: 250})
	require.Equal(t, []uint64{1, 2}, Seqs(page.Entries))
	require.Equal(t, uint64(2), page.Next)
	require.False(t, page.CaughtUp())

	page = Read(t, h, replication.ReadRequest{Scope: tenant("t1"), MaxBytes: 10})
	require.Equal(t, []uint64{1}, Seqs(page.Entries), "a page holds at least one entry")
}

func testCompaction(t *testing.T, open Opener) {
	ctx := context.Background()
	h := open(t, replication.Retention{MaxEntries: 4, MaxAge: time.Hour, Chunk: 3})
	for i := range 10 {
		AppendCommitted(t, h, Entry("t1", "notes", fmt.Sprint(i)))
	}

	n, err := h.Log.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(6), n, "keeps the newest 4")
	b, err := h.Log.Bounds(ctx, tenant("t1"))
	require.NoError(t, err)
	require.Equal(t, replication.Bounds{Floor: 6, Oldest: 7, Head: 10}, b)

	// A cursor whose next entry was compacted must resync; one at the edge
	// may continue.
	_, err = h.Log.Read(ctx, replication.ReadRequest{After: 5, Scope: tenant("t1")})
	var cerr *replication.CursorError
	require.ErrorAs(t, err, &cerr)
	require.ErrorIs(t, err, replication.ErrCursorExpired)
	require.Equal(t, replication.CursorError{Cursor: 5, Bounds: b, Err: replication.ErrCursorExpired}, *cerr)
	require.Equal(t, []uint64{7, 8, 9, 10}, Seqs(Read(t, h, replication.ReadRequest{After: 6, Scope: tenant("t1")}).Entries))
	_, err = h.Log.Read(ctx, replication.ReadRequest{After: 11, Scope: tenant("t1")})
	require.ErrorIs(t, err, replication.ErrCursorAhead)

	// Age: everything is older than an hour now.
	h.Advance(2 * time.Hour)
	n, err = h.Log.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(4), n)
	b, err = h.Log.Bounds(ctx, tenant("t1"))
	require.NoError(t, err)
	require.Equal(t, replication.Bounds{Floor: 10, Oldest: 11, Head: 10}, b, "an emptied log keeps its head")
	require.Equal(t, replication.Page{Next: 10, Head: 10}, Read(t, h, replication.ReadRequest{After: 10, Scope: tenant("t1")}))
	_, err = h.Log.Read(ctx, replication.ReadRequest{After: 9, Scope: tenant("t1")})
	require.ErrorIs(t, err, replication.ErrCursorExpired)

	require.Equal(t, []uint64{11}, Seqs(AppendCommitted(t, h, Entry("t1", "notes", "new"))), "seqs are never reused")
}

// testPerTenantRetention: the count bound is per tenant; compaction
// removes a prefix of the tenant beyond it and raises that tenant's floor
// only, so a cursor is expired only by its own tenant's compaction.
func testPerTenantRetention(t *testing.T, open RetainingOpener) {
	ctx := context.Background()
	l := open(t, 3)
	var a, b []replication.Entry
	for i, name := range []string{"a", "b", "a", "a", "b", "a", "a", "a", "a"} {
		e := l.Append(t, Entry(name, "notes", fmt.Sprint(i)))[0]
		if name == "a" {
			a = append(a, e)
		} else {
			b = append(b, e)
		}
	}
	require.Equal(t, int64(4), l.Compact(t), "tenant a keeps its newest 3 of 7; b is within its bound")
	floorA := a[3].Seq

	bounds := func(scope replication.Scope) replication.Bounds {
		bs, err := l.Feed.Bounds(ctx, scope)
		require.NoError(t, err)
		return bs
	}
	require.Equal(t, replication.Bounds{Floor: floorA, Oldest: b[0].Seq, Head: 9}, bounds(tenant("a")))
	require.Equal(t, replication.Bounds{Floor: 0, Oldest: b[0].Seq, Head: 9}, bounds(tenant("b")))
	require.Equal(t, uint64(0), bounds(tenant("c")).Floor, "a tenant that never wrote")
	require.Equal(t, floorA, bounds(replication.Scope{AllTenants: true, AllModels: true}).Floor, "every tenant: the highest floor")

	// Tenant b resumes from any cursor, even one inside a's compacted
	// range or before the log's oldest entry.
	for _, cursor := range []uint64{0, a[0].Seq, a[2].Seq, floorA} {
		page, err := l.Feed.Read(ctx, replication.ReadRequest{After: cursor, Scope: tenant("b")})
		require.NoError(t, err, "tenant b at cursor %d", cursor)
		want := []uint64{}
		for _, e := range b {
			if e.Seq > cursor {
				want = append(want, e.Seq)
			}
		}
		require.Equal(t, want, Seqs(page.Entries), "tenant b at cursor %d", cursor)
		require.True(t, page.CaughtUp())
	}
	// Tenant a: a cursor before its floor is expired, one at it continues.
	_, err := l.Feed.Read(ctx, replication.ReadRequest{After: a[2].Seq, Scope: tenant("a")})
	var cerr *replication.CursorError
	require.ErrorAs(t, err, &cerr)
	require.ErrorIs(t, err, replication.ErrCursorExpired)
	require.Equal(t, floorA, cerr.Bounds.Floor)
	page, err := l.Feed.Read(ctx, replication.ReadRequest{After: floorA, Scope: tenant("a")})
	require.NoError(t, err)
	require.Equal(t, Seqs(a[4:]), Seqs(page.Entries))

	floors, err := l.Feed.Floors(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, replication.Floors{Tenants: map[string]uint64{"a": floorA}}, floors)
	floors, err = l.Feed.Floors(ctx, floorA)
	require.NoError(t, err)
	require.Empty(t, floors.Tenants, "only floors above the seq asked for")

	require.Zero(t, l.Compact(t), "nothing is beyond the bound")

	// Tenant b past its bound raises b's floor, not a's.
	for i := range 3 {
		b = append(b, l.Append(t, Entry("b", "notes", fmt.Sprint("more", i)))...)
	}
	require.Equal(t, int64(2), l.Compact(t))
	require.Equal(t, b[1].Seq, bounds(tenant("b")).Floor)
	require.Equal(t, floorA, bounds(tenant("a")).Floor)
	require.Equal(t, uint64(12), bounds(tenant("b")).Head, "compaction never moves the head")
}

// testChurnNeverExpiresOthers: a tenant writing far past its bound, with
// compactions between its writes, never sends another tenant's reader to
// resync, however old that reader's cursor.
func testChurnNeverExpiresOthers(t *testing.T, open RetainingOpener) {
	ctx := context.Background()
	l := open(t, 5)
	quiet := l.Append(t, Entry("quiet", "notes", "early"))
	for round := range 6 {
		for i := range 7 {
			l.Append(t, Entry("busy", "notes", fmt.Sprint(round, "-", i)))
		}
		require.Positive(t, l.Compact(t))
		page, err := l.Feed.Read(ctx, replication.ReadRequest{Scope: tenant("quiet")})
		require.NoError(t, err, "round %d: the quiet tenant's cursor 0 must stay valid", round)
		require.Equal(t, Seqs(quiet), Seqs(page.Entries))
		require.True(t, page.CaughtUp())
	}
	_, err := l.Feed.Read(ctx, replication.ReadRequest{Scope: tenant("busy")})
	require.ErrorIs(t, err, replication.ErrCursorExpired, "the busy tenant's own stale cursor resyncs")
}

func testInvalidEntry(t *testing.T, open Opener) {
	ctx := context.Background()
	h := open(t, replication.Retention{})
	for name, mutate := range map[string]func(e *replication.Entry){
		"seq set":            func(e *replication.Entry) { e.Seq = 9 },
		"empty key":          func(e *replication.Entry) { e.Key = "" },
		"empty op id":        func(e *replication.Entry) { e.OpID = "" },
		"version 0":          func(e *replication.Entry) { e.Version = 0 },
		"zero hlc":           func(e *replication.Entry) { e.HLC = syncproto.Timestamp{} },
		"unknown op":         func(e *replication.Entry) { e.Op = "upsert" },
		"deleted put":        func(e *replication.Entry) { e.Deleted = true },
		"delete not deleted": func(e *replication.Entry) { e.Op = syncproto.OpDelete },
	} {
		e := Entry("t1", "notes", "a")
		mutate(&e)
		_, err := h.Append(ctx, e)
		require.ErrorIs(t, err, replication.ErrInvalidEntry, name)
	}
	b, err := h.Log.Bounds(ctx, tenant("t1"))
	require.NoError(t, err)
	require.Equal(t, uint64(0), b.Head, "a refused entry wrote nothing")
}

// testNotifyAfterCommit: waiters wake when the caller reports a commit,
// not when an entry is appended.
func testNotifyAfterCommit(t *testing.T, open Opener) {
	ctx := context.Background()
	h := open(t, replication.Retention{})
	AppendCommitted(t, h, Entry("t1", "notes", "a"))
	select {
	case <-h.Log.Notify(0):
	default:
		t.Fatal("Notify(0) must be closed once head 1 was committed")
	}

	notify := h.Log.Notify(1)
	waited := make(chan error, 1)
	go func() { waited <- h.Log.Wait(ctx, 1) }()

	appended, err := h.Append(ctx, Entry("t1", "notes", "b"))
	require.NoError(t, err)
	e := appended[0]
	select {
	case <-notify:
		t.Fatal("woken before Committed")
	case err := <-waited:
		t.Fatalf("Wait returned before Committed: %v", err)
	default:
	}

	h.Log.Committed(e.Seq)
	<-notify
	require.NoError(t, <-waited)
	h.Log.Committed(e.Seq - 1) // a stale report is harmless
	select {
	case <-h.Log.Notify(e.Seq):
		t.Fatal("Notify at the head must wait")
	default:
	}
}

// testWaitCancelLeaksNothing: cancelled waiters return and leave no
// goroutine of the log's package behind.
func testWaitCancelLeaksNothing(t *testing.T, open Opener) {
	h := open(t, replication.Retention{})
	pkg := reflect.TypeOf(h.Log).Elem().PkgPath() + "."
	before := goroutinesIn(pkg)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() { errs <- h.Log.Wait(ctx, 0) })
	}
	require.Eventually(t, func() bool { return goroutinesIn(pkg) >= before+50 },
		5*time.Second, time.Millisecond, "the waiters never blocked in Wait")
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.ErrorIs(t, err, context.Canceled)
	}
	require.Eventually(t, func() bool { return goroutinesIn(pkg) <= before },
		5*time.Second, 10*time.Millisecond, "goroutines running %s code outlived their waiters", pkg)
}

// goroutinesIn counts the goroutines with a frame in the package whose
// qualified names start with prefix.
func goroutinesIn(prefix string) int {
	buf := make([]byte, 1<<20)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, prefix) {
			n++
		}
	}
	return n
}
