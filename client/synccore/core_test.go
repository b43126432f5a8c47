package synccore

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/syncproto"
)

func item(id uint64) Item {
	return Item{ID: id, Mutation: syncproto.Mutation{OpID: opID(id), Model: "notes", Key: "k", Op: syncproto.OpPut}}
}

func opID(id uint64) string { return "op-" + string(rune('a'+id)) }

func applied(id uint64) syncproto.Result {
	return syncproto.Result{OpID: opID(id), Status: syncproto.StatusApplied, Version: 1, Seq: id}
}

// welcomed returns a core that is welcomed and has read an empty queue.
func welcomed(t *testing.T) *Core {
	t.Helper()
	c := New(Config{InFlight: 2, MaxBatch: 2}, 7)
	c.Step(Welcomed{Cursor: 7})
	c.Step(Page{Read: 1})
	if got := c.Status().State; got != StateIdle {
		t.Fatalf("state after welcome and an empty queue = %s, want idle", got)
	}
	return c
}

func only[T Action](acts []Action) []T {
	var out []T
	for _, a := range acts {
		if x, ok := a.(T); ok {
			out = append(out, x)
		}
	}
	return out
}

func TestWelcomeSubscribesAndReads(t *testing.T) {
	c := New(Config{MaxBatch: 10}, 7)
	acts := c.Step(Welcomed{MaxBatch: 3, Cursor: 7})
	want := []Action{Subscribe{After: 7}, ReadQueue{Read: 1, After: 0, Limit: 3}, Report{Status{State: StateSyncing}}}
	if !reflect.DeepEqual(acts, want) {
		t.Fatalf("actions = %#v, want %#v", acts, want)
	}
}

func TestCursorAheadResyncs(t *testing.T) {
	c := New(Config{}, 50)
	acts := c.Step(Welcomed{Cursor: 50, Resync: true})
	if len(only[Resync](acts)) != 1 || len(only[Subscribe](acts)) != 0 {
		t.Fatalf("actions = %#v, want a resync and no subscribe", acts)
	}
	acts = c.Step(Snapshot{Head: 3})
	want := []Action{Subscribe{After: 3}}
	if !reflect.DeepEqual(acts[:1], want) || c.Cursor() != 3 {
		t.Fatalf("actions = %#v cursor %d, want %#v and cursor 3", acts, c.Cursor(), want)
	}
}

func TestFeedLostResyncsOnce(t *testing.T) {
	c := welcomed(t)
	if acts := c.Step(FeedLost{}); len(only[Resync](acts)) != 1 {
		t.Fatalf("actions = %#v, want a resync", acts)
	}
	if acts := c.Step(FeedLost{}); len(only[Resync](acts)) != 0 {
		t.Fatalf("a second FeedLost during a resync caused %#v", acts)
	}
	if acts := c.Step(Changes{From: 7, Next: 9}); len(acts) != 0 {
		t.Fatalf("feed frame during a resync caused %#v, want nothing", acts)
	}
}

func TestEnqueuedPushesAtOnce(t *testing.T) {
	c := welcomed(t)
	acts := c.Step(Enqueued{})
	if r := only[ReadQueue](acts); len(r) != 1 || r[0].After != 0 {
		t.Fatalf("Enqueued actions = %#v, want one read from the start", acts)
	}
	acts = c.Step(Page{Read: 2, Items: []Item{item(1), item(2)}})
	if s := only[Send](acts); len(s) != 1 || len(s[0].Items) != 2 {
		t.Fatalf("page actions = %#v, want one push of two", acts)
	}
	if r := only[ReadQueue](acts); len(r) != 1 || r[0].After != 2 {
		t.Fatalf("page actions = %#v, want the next read after 2", acts)
	}
}

func TestEnqueuedDuringReadIsNotLost(t *testing.T) {
	c := welcomed(t)
	c.Step(Enqueued{})
	c.Step(Enqueued{}) // while read 2 is outstanding
	acts := c.Step(Page{Read: 2})
	if r := only[ReadQueue](acts); len(r) != 1 {
		t.Fatalf("empty page after a wake: actions %#v, want a read again", acts)
	}
}

// A page that reached the queue's end ends the reading: no empty read
// follows the push (one read per awaited write), unless a write was
// queued while it was read; a write queued later starts a read.
func TestPageAtTheEndIsTheLastRead(t *testing.T) {
	c := welcomed(t)
	c.Step(Enqueued{})
	acts := c.Step(Page{Read: 2, Items: []Item{item(1)}, End: true})
	if len(only[Send](acts)) != 1 || len(only[ReadQueue](acts)) != 0 {
		t.Fatalf("page at the end: actions %#v, want its push and no read", acts)
	}
	acts = c.Step(Answered{Push: 1, Results: []syncproto.Result{applied(1)}})
	if len(only[PassEnded](acts)) != 1 || len(only[ReadQueue](acts)) != 0 {
		t.Fatalf("answered: actions %#v, want the pass ended without a read", acts)
	}
	c.Step(Enqueued{})
	c.Step(Enqueued{}) // while read 3 is outstanding
	acts = c.Step(Page{Read: 3, Items: []Item{item(2)}, End: true})
	if r := only[ReadQueue](acts); len(r) != 1 || r[0].After != 2 {
		t.Fatalf("a write queued during the read: actions %#v, want a read after the page", acts)
	}
}

func TestInFlightBound(t *testing.T) {
	c := welcomed(t)
	c.Step(Enqueued{})
	c.Step(Page{Read: 2, Items: []Item{item(1)}})
	acts := c.Step(Page{Read: 3, Items: []Item{item(2)}})
	if len(only[ReadQueue](acts)) != 0 {
		t.Fatalf("two pushes in flight with InFlight 2, actions %#v: want no further read", acts)
	}
	acts = c.Step(Answered{Push: 1, Results: []syncproto.Result{applied(1)}})
	if len(only[ReadQueue](acts)) != 1 {
		t.Fatalf("an answer frees a slot, actions %#v: want a read", acts)
	}
}

func TestAnsweredSettlesEachInOrder(t *testing.T) {
	c := welcomed(t)
	c.Step(Enqueued{})
	c.Step(Page{Read: 2, Items: []Item{item(1), item(2)}})
	c.Step(Page{Read: 3})
	res := []syncproto.Result{applied(1), {OpID: opID(2), Status: syncproto.StatusRejected, Code: syncproto.CodeInternal}}
	acts := c.Step(Answered{Push: 1, Results: res})
	s := only[Settle](acts)
	if len(s) != 2 || s[0].Verdict.Action != Done || s[1].Verdict.Action != Charge || s[1].Verdict.Attempts != 1 {
		t.Fatalf("settles = %#v, want done then charge 1", s)
	}
	if tm := only[SetTimer](acts); len(tm) != 1 || tm[0].Failures != 1 || tm[0].Hint != 0 {
		t.Fatalf("a pass that left a write queued: actions %#v, want a retry timer after a first failure, no hint", acts)
	}
	if c.Status().Err == nil || c.Status().Err.Code != syncproto.CodeInternal {
		t.Fatalf("status = %+v, want the refusal as its error", c.Status())
	}
	if acts := c.Step(Answered{Push: 1, Results: res}); len(acts) != 0 {
		t.Fatalf("a duplicate answer caused %#v, want nothing", acts)
	}
	acts = c.Step(TimerFired{Timer: 1})
	if r := only[ReadQueue](acts); len(r) != 1 || r[0].After != 0 {
		t.Fatalf("timer actions = %#v, want a new pass from the start", acts)
	}
}

func TestMissingResultIsLeftUncharged(t *testing.T) {
	c := welcomed(t)
	c.Step(Enqueued{})
	c.Step(Page{Read: 2, Items: []Item{item(1), item(2)}})
	c.Step(Page{Read: 3})
	acts := c.Step(Answered{Push: 1, Results: []syncproto.Result{applied(1)}})
	if s := only[Settle](acts); len(s) != 1 {
		t.Fatalf("settles = %#v, want only the answered write", s)
	}
	if len(only[SetTimer](acts)) != 1 {
		t.Fatalf("actions = %#v, want a retry timer for the unanswered write", acts)
	}
}

func TestPushRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     syncproto.Error
		settles int
		hint    time.Duration
	}{
		{"retryable honours retry_after", syncproto.Error{Code: syncproto.CodeServerBusy, Retryable: true, RetryAfterMS: 5000}, 0, 5 * time.Second},
		{"permanent charges each write", syncproto.Error{Code: syncproto.CodeBatchTooLarge}, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := welcomed(t)
			c.Step(Enqueued{})
			c.Step(Page{Read: 2, Items: []Item{item(1), item(2)}})
			c.Step(Page{Read: 3})
			acts := c.Step(PushRefused{Push: 1, Err: &tc.err})
			s := only[Settle](acts)
			if len(s) != tc.settles {
				t.Fatalf("settles = %#v, want %d", s, tc.settles)
			}
			for _, x := range s {
				if x.Verdict.Action != Charge || x.Verdict.Attempts != 1 {
					t.Fatalf("settle = %#v, want charge 1", x)
				}
			}
			if tm := only[SetTimer](acts); len(tm) != 1 || tm[0].Failures != 1 || tm[0].Hint != tc.hint {
				t.Fatalf("actions = %#v, want a timer after a first failure with hint %v", acts, tc.hint)
			}
		})
	}
}

func TestDisconnectForgetsTheConnection(t *testing.T) {
	c := welcomed(t)
	c.Step(Enqueued{})
	c.Step(Page{Read: 2, Items: []Item{item(1)}})
	c.Step(Network{Online: false})
	acts := c.Step(Disconnected{})
	if st := c.Status().State; st != StateOffline || len(only[Report](acts)) != 1 {
		t.Fatalf("state = %s, actions %#v: want offline reported", st, acts)
	}
	if acts := c.Step(Answered{Push: 1, Results: []syncproto.Result{applied(1)}}); len(acts) != 0 {
		t.Fatalf("an answer after the connection died caused %#v", acts)
	}
	if acts := c.Step(Page{Read: 3, Items: []Item{item(2)}}); len(acts) != 0 {
		t.Fatalf("a page after the connection died caused %#v", acts)
	}
	if acts := c.Step(Enqueued{}); len(acts) != 0 {
		t.Fatalf("Enqueued offline caused %#v, want nothing until welcomed", acts)
	}
}

func TestRefusedIsReportedAndSticks(t *testing.T) {
	c := welcomed(t)
	e := &syncproto.Error{Code: syncproto.CodeUnauthorized, Message: "revoked"}
	acts := c.Step(Refused{Err: e})
	if st := c.Status(); st.State != StateRefused || st.Err != e || len(only[Report](acts)) != 1 {
		t.Fatalf("status = %+v, actions %#v: want refused with the error, reported", st, acts)
	}
	c.Step(Disconnected{})
	if st := c.Status().State; st != StateRefused {
		t.Fatalf("state after the refused connection closed = %s, want refused", st)
	}
}

func TestChanges(t *testing.T) {
	c := welcomed(t) // cursor 7
	e := []syncproto.Change{{Seq: 8, Model: "notes", Key: "a", Version: 1}}
	if acts := c.Step(Changes{From: 7, Next: 8, Entries: e}); !reflect.DeepEqual(acts, []Action{Apply{Cursor: 8, Entries: e}}) {
		t.Fatalf("in-order frame: actions %#v", acts)
	}
	if acts := c.Step(Changes{From: 7, Next: 8, Entries: e}); len(acts) != 0 {
		t.Fatalf("duplicate frame: actions %#v, want none", acts)
	}
	if acts := c.Step(Changes{From: 9, Next: 10}); !reflect.DeepEqual(acts, []Action{Subscribe{After: 8}}) {
		t.Fatalf("frame after a gap: actions %#v, want a resubscribe from 8", acts)
	}
}

func TestCloseEndsEverything(t *testing.T) {
	c := welcomed(t)
	acts := c.Step(Close{})
	if st := c.Status().State; st != StateClosed || len(only[Report](acts)) != 1 {
		t.Fatalf("state = %s, actions %#v: want closed reported", st, acts)
	}
	if acts := c.Step(Welcomed{}); acts != nil {
		t.Fatalf("input after Close caused %#v", acts)
	}
}

func TestJudge(t *testing.T) {
	for _, tc := range []struct {
		r        syncproto.Result
		attempts int
		want     VerdictAction
		status   syncproto.Status
	}{
		{syncproto.Result{Status: syncproto.StatusApplied}, 0, Done, syncproto.StatusApplied},
		{syncproto.Result{Status: syncproto.StatusSuperseded}, 0, Done, syncproto.StatusSuperseded},
		{syncproto.Result{Status: syncproto.StatusDuplicate, OriginalStatus: syncproto.StatusSuperseded}, 0, Done, syncproto.StatusSuperseded},
		{syncproto.Result{Status: syncproto.StatusDuplicate, OriginalStatus: syncproto.StatusConflict}, 0, Conflict, syncproto.StatusConflict},
		{syncproto.Result{Status: syncproto.StatusConflict}, 0, Conflict, syncproto.StatusConflict},
		{syncproto.Result{Status: syncproto.StatusExpired}, 0, DeadLetter, ""},
		{syncproto.Result{Status: syncproto.StatusRejected, Code: syncproto.CodeClockSkew}, 0, Restamp, ""},
		{syncproto.Result{Status: syncproto.StatusRejected, Code: syncproto.CodeInternal}, 3, Charge, ""},
		{syncproto.Result{Status: syncproto.StatusRejected, Code: syncproto.CodeInternal}, 4, DeadLetter, ""},
		{syncproto.Result{Status: syncproto.StatusRejected, Code: syncproto.CodeForbiddenModel}, 0, DeadLetter, ""},
		{syncproto.Result{Status: syncproto.StatusRejected, Code: syncproto.CodeMissingBaseVersion}, 0, DeadLetter, ""},
	} {
		v := Judge(&tc.r, tc.attempts, DefaultMaxAttempts)
		if v.Action != tc.want || v.Status != tc.status {
			t.Errorf("Judge(%s/%s, %d) = %d %q, want %d %q", tc.r.Status, tc.r.Code, tc.attempts, v.Action, v.Status, tc.want, tc.status)
		}
	}
}

func TestSyncWaitsForAPassThatStartsAfterIt(t *testing.T) {
	c := welcomed(t)
	// Idle: a sync starts a pass at once and is answered at its end.
	acts := c.Step(SyncRequested{Sync: 1})
	if r := only[ReadQueue](acts); len(r) != 1 || r[0].After != 0 {
		t.Fatalf("sync while idle: actions %#v, want a read from the start", acts)
	}
	acts = c.Step(Page{Read: 2})
	if p := only[PassEnded](acts); len(p) != 1 || !reflect.DeepEqual(p[0].Syncs, []uint64{1}) || p[0].Lost {
		t.Fatalf("empty queue: actions %#v, want the pass ended for sync 1", acts)
	}
	// During a pass: answered at the end of the next one.
	c.Step(Enqueued{})
	c.Step(Page{Read: 3, Items: []Item{item(1)}})
	c.Step(SyncRequested{Sync: 2})
	acts = c.Step(Page{Read: 4})
	acts = append(acts, c.Step(Answered{Push: 1, Results: []syncproto.Result{applied(1)}})...)
	if len(only[PassEnded](acts)) != 0 {
		t.Fatalf("the pass the sync arrived in ended: actions %#v, want no answer yet", acts)
	}
	if r := only[ReadQueue](acts); len(r) != 1 || r[0].After != 0 {
		t.Fatalf("actions %#v, want a new pass from the start", acts)
	}
	acts = c.Step(Page{Read: 5})
	if p := only[PassEnded](acts); len(p) != 1 || !reflect.DeepEqual(p[0].Syncs, []uint64{2}) {
		t.Fatalf("actions %#v, want sync 2 answered", acts)
	}
	// A lost connection answers a waiting sync; offline answers at once.
	c.Step(SyncRequested{Sync: 3})
	if p := only[PassEnded](c.Step(Disconnected{})); len(p) != 1 || !p[0].Lost {
		t.Fatalf("disconnect with a sync waiting: want it answered lost")
	}
	if p := only[PassEnded](c.Step(SyncRequested{Sync: 4})); len(p) != 1 || !p[0].Lost || p[0].Syncs[0] != 4 {
		t.Fatalf("sync offline: want it answered lost at once")
	}
}

func TestInvalidItemsAreDeadLetteredAtOnce(t *testing.T) {
	c := welcomed(t)
	c.Step(Enqueued{})
	bad := Item{ID: 1, Invalid: "not json"}
	acts := c.Step(Page{Read: 2, Items: []Item{bad, item(2)}})
	s := only[Settle](acts)
	if len(s) != 1 || s[0].Item.ID != 1 || s[0].Verdict.Action != DeadLetter {
		t.Fatalf("actions %#v, want the invalid item dead-lettered", acts)
	}
	if p := only[Send](acts); len(p) != 1 || len(p[0].Items) != 1 || p[0].Items[0].ID != 2 {
		t.Fatalf("actions %#v, want the valid item pushed", acts)
	}
}

func TestPushByteBudget(t *testing.T) {
	c := New(Config{MaxBatch: 10, MaxPushBytes: 1000}, 0)
	c.Step(Welcomed{MaxPushBytes: 300})
	c.Step(Page{Read: 1})
	c.Step(Enqueued{})
	big := func(id uint64) Item { it := item(id); it.Size = 200; return it }
	acts := c.Step(Page{Read: 2, Items: []Item{big(1), big(2)}})
	if s := only[Send](acts); len(s) != 1 || len(s[0].Items) != 1 {
		t.Fatalf("actions %#v, want one write per push under the welcome's budget", acts)
	}
	if r := only[ReadQueue](acts); len(r) != 1 || r[0].After != 1 {
		t.Fatalf("actions %#v, want the next read after 1", acts)
	}
	if !FitsPush(0, 0, 1<<30, 10, 300) || FitsPush(10, 0, 1, 10, 0) {
		t.Fatal("FitsPush: an empty push takes any write; the batch limit holds")
	}
}

func TestFreshReplicaBootstrapsFromASnapshot(t *testing.T) {
	c := New(Config{}, 0)
	if acts := c.Step(Welcomed{Head: 5}); len(only[Resync](acts)) != 1 || len(only[Subscribe](acts)) != 0 {
		t.Fatalf("cursor 0, head 5: actions %#v, want a resync", acts)
	}
	// A Sync returns with the replica caught up: not while the snapshot
	// is still loading, although the queue is empty.
	c.Step(Page{Read: 1})
	acts := c.Step(SyncRequested{Sync: 1})
	for _, r := range only[ReadQueue](acts) {
		acts = append(acts, c.Step(Page{Read: r.Read})...)
	}
	if len(only[PassEnded](acts)) != 0 || c.Status().State != StateSyncing {
		t.Fatalf("empty queue, snapshot loading: actions %#v, state %s; want no answer, syncing", acts, c.Status().State)
	}
	acts = c.Step(Snapshot{Head: 5})
	for _, r := range only[ReadQueue](acts) {
		acts = append(acts, c.Step(Page{Read: r.Read})...)
	}
	if p := only[PassEnded](acts); len(p) != 1 || !reflect.DeepEqual(p[0].Syncs, []uint64{1}) || c.Cursor() != 5 {
		t.Fatalf("snapshot in: actions %#v, cursor %d; want sync 1 answered at cursor 5", acts, c.Cursor())
	}
	c = New(Config{}, 0)
	if acts := c.Step(Welcomed{}); len(only[Subscribe](acts)) != 1 {
		t.Fatalf("cursor 0, empty server: actions %#v, want a subscribe", acts)
	}
}

func TestClockSkewIsResentAtOnceOncePerConnection(t *testing.T) {
	c := welcomed(t)
	skew := syncproto.Result{OpID: opID(1), Status: syncproto.StatusRejected, Code: syncproto.CodeClockSkew}
	c.Step(Enqueued{})
	c.Step(Page{Read: 2, Items: []Item{item(1)}})
	c.Step(Page{Read: 3})
	acts := c.Step(Answered{Push: 1, Results: []syncproto.Result{skew}})
	if r := only[ReadQueue](acts); len(r) != 1 || len(only[SetTimer](acts)) != 0 {
		t.Fatalf("first skew refusal: actions %#v, want a new pass at once", acts)
	}
	c.Step(Page{Read: 4, Items: []Item{item(1)}})
	c.Step(Page{Read: 5})
	acts = c.Step(Answered{Push: 2, Results: []syncproto.Result{skew}})
	if len(only[SetTimer](acts)) != 1 {
		t.Fatalf("second skew refusal: actions %#v, want the retry timer", acts)
	}
}

func TestStateFollowsTheNetworkAndTheQueue(t *testing.T) {
	c := New(Config{}, 0)
	if st := c.Status().State; st != StateConnecting {
		t.Fatalf("before the network's first verdict: state %s, want connecting", st)
	}
	c.Step(Network{Online: true})
	if st := c.Status().State; st != StateConnecting {
		t.Fatalf("online, not welcomed: state %s, want connecting", st)
	}
	c.Step(Refused{Err: &syncproto.Error{Code: syncproto.CodeUnauthorized}})
	c.Step(Network{Online: true})
	if st := c.Status().State; st != StateRefused {
		t.Fatalf("refused, then online again: state %s, want refused until welcomed", st)
	}
	c.Step(Welcomed{})
	c.Step(Page{Read: 1, Items: []Item{item(1)}})
	c.Step(Page{Read: 2})
	c.Step(Answered{Push: 1, Results: []syncproto.Result{{OpID: opID(1), Status: syncproto.StatusRejected, Code: syncproto.CodeInternal}}})
	if st := c.Status().State; st != StateSyncing {
		t.Fatalf("a write waits for its retry: state %s, want syncing", st)
	}
	c.Step(Disconnected{})
	if st := c.Status().State; st != StateConnecting {
		t.Fatalf("connection lost while online: state %s, want connecting", st)
	}
	c.Step(Network{Online: false})
	if st := c.Status().State; st != StateOffline {
		t.Fatalf("network gone: state %s, want offline", st)
	}
}

// A clock_skew refusal is never charged, however many attempts the write
// already holds, as PROTOCOL.md sections 6 and 12 say: the stamp was
// refused, not the write.
func TestClockSkewIsNeverCharged(t *testing.T) {
	skew := syncproto.Result{Status: syncproto.StatusRejected, Code: syncproto.CodeClockSkew}
	for attempts := range DefaultMaxAttempts {
		v := Judge(&skew, attempts, DefaultMaxAttempts)
		if v.Action != Restamp || v.Attempts != 0 {
			t.Fatalf("Judge(clock_skew, %d) = action %d, attempts %d: want Restamp, uncharged", attempts, v.Action, v.Attempts)
		}
	}
	doc, err := os.ReadFile("../../PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `clock_skew` \\|.*$").Find(doc)
	if !strings.HasSuffix(string(row), "charge no attempt |") {
		t.Fatalf("PROTOCOL.md section 12's clock_skew row does not say it charges no attempt: %s", row)
	}
}

// PROTOCOL.md section 6 states which codes are dead-lettered at their
// first refusal and the default retry budget; Judge must do the same.
func TestProtocolStatesTheClientsRetryRules(t *testing.T) {
	doc, err := os.ReadFile("../../PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `rejected` \\|.*$").Find(doc)
	m := regexp.MustCompile(`A code that can never succeed on a resend \(([^)]*)\)`).FindSubmatch(row)
	if m == nil {
		t.Fatalf("section 6's rejected row lists no permanent codes: %s", row)
	}
	documented := map[syncproto.Code]bool{}
	for _, c := range regexp.MustCompile("`([a-z_]+)`").FindAllSubmatch(m[1], -1) {
		documented[syncproto.Code(c[1])] = true
	}
	for _, code := range syncproto.Codes {
		if documented[code] != Permanent(code) {
			t.Errorf("code %s: section 6 lists it as permanent: %v; Permanent says %v", code, documented[code], Permanent(code))
		}
	}
	if want := fmt.Sprintf("retry budget (%d by default)", DefaultMaxAttempts); !strings.Contains(string(row), want) {
		t.Errorf("section 6's rejected row does not say %q", want)
	}
}
