package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// feedTailBytes bounds the value bytes of the newest oplog entries kept in
// memory for the change feed (feedTail). A subscriber further behind than
// the tail reads SQLite, as a pull does.
const feedTailBytes = 8 << 20

// feedPageBytes bounds the value bytes of one page of the change feed, and
// feedPagesInFlight the pages a subscription may have queued or being
// written: a slow subscriber holds at most feedPagesInFlight*feedPageBytes
// of values in server memory.
const (
	feedPageBytes     = replication.DefaultReadBytes
	feedPagesInFlight = 4
)

// feedTail is the newest stretch of the oplog, read from the database once
// and shared by every subscription of this node: a commit of this node's
// committer hands its entries over (committed), or the router's driver
// refills it with one read (drive), and each subscription the router wakes
// for them (route.go) filters its own scope from memory. Without it, one
// write read by a thousand subscribers is a thousand SQLite queries.
//
// It holds every committed entry with start < seq <= head, in seq order,
// at most feedTailBytes of values (the oldest are dropped first), and the
// compaction floors above start it was told of (forget): it answers a
// cursor only when the oplog would, so a cursor below its tenant's floor
// gets resync from the oplog even while the tail still holds the entries
// after it. It is safe for concurrent use; a reader never waits for a
// refill other than the one it needs.
type feedTail struct {
	log    tailedLog
	router *router // wakes the subscriptions each appended entry concerns

	fill sync.Mutex // one refill at a time

	mu      sync.RWMutex
	ready   bool
	start   uint64
	head    uint64
	floors  replication.Floors
	entries []replication.Entry
	encoded [][]byte // entries[i] as a changes entry in JSON, encoded once for every subscriber
	bytes   int

	shared sharedFrames // the newest changes frames built, handed to every subscriber with the same page
}

// tailedLog is what the feed tail reads of the oplog: pages and bounds to
// refill from (replication.Feed), and the wake-up of a commit beyond its
// head. *replication.SQLiteLog is one.
type tailedLog interface {
	replication.Feed
	// Notify returns a channel closed once a commit beyond after was
	// reported; it may close spuriously.
	Notify(after uint64) <-chan struct{}
}

// newFeedTail returns the tail of log, routing what it appends with r
// (whose driver it becomes).
func newFeedTail(log tailedLog, r *router) *feedTail {
	t := &feedTail{log: log, router: r, floors: replication.Floors{Tenants: map[string]uint64{}}}
	r.drive = t.drive
	return t
}

// drive refills the tail at every commit the log reports beyond its head,
// so that the router routes every entry without waiting for a
// subscription to read, until ctx ends. A refill that fails wakes every
// subscription (they read the log themselves) and is tried again after
// routeRetry.
func (t *feedTail) drive(ctx context.Context) {
	for {
		t.mu.RLock()
		head := t.head
		t.mu.RUnlock()
		select {
		case <-t.log.Notify(head):
		case <-ctx.Done():
			return
		}
		if err := t.refill(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			t.router.broadcast(head+1, head)
			select {
			case <-time.After(routeRetry):
			case <-ctx.Done():
				return
			}
		}
	}
}

// read answers req from memory, refilling the tail first when the log has
// committed beyond it. ok is false when the tail cannot answer (req.After
// is older than the tail, below its scope's floor, or beyond what the tail
// holds): read the log instead.
func (t *feedTail) read(ctx context.Context, req replication.ReadRequest) (page replication.Page, ok bool) {
	if err := t.refill(ctx); err != nil {
		return replication.Page{}, false
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if req.After < t.start || req.After > t.head || req.After < t.floors.Of(req.Scope) {
		return replication.Page{}, false
	}
	return req.PageOf(t.entries, t.head), true
}

// refill reads what the log committed beyond the tail, unless another
// subscription is doing it (then it waits for that read).
func (t *feedTail) refill(ctx context.Context) error {
	t.mu.RLock()
	ready, head := t.ready, t.head
	t.mu.RUnlock()
	if ready && !t.behind(head) {
		return nil
	}
	t.fill.Lock()
	defer t.fill.Unlock()
	t.mu.RLock()
	ready, head = t.ready, t.head
	t.mu.RUnlock()
	if !ready {
		b, err := t.log.Bounds(ctx, replication.Scope{AllTenants: true})
		if err != nil {
			return err
		}
		t.anchor(b.Head)
		head = b.Head
	}
	for t.behind(head) {
		page, err := t.log.Read(ctx, replication.ReadRequest{
			After: head, Scope: replication.Scope{AllTenants: true, AllModels: true}, Limit: replication.MaxReadLimit,
		})
		var ce *replication.CursorError
		if errors.As(err, &ce) && errors.Is(err, replication.ErrCursorExpired) {
			// Entries committed after the tail were compacted before it
			// read them: it can no longer hold every entry after start, so
			// it starts again, empty, at the log's head.
			t.anchor(ce.Bounds.Head)
			head = ce.Bounds.Head
			continue
		}
		if err != nil {
			return err
		}
		t.append(page)
		head = page.Next
		if page.CaughtUp() {
			return nil
		}
	}
	return nil
}

// committed takes the entries a commit of the log's one writer appended,
// as the log reads them back, before the writer reports the commit
// (Log.Committed): the subscriptions it wakes find them here without
// reading the log. Entries that do not follow the tail's head (the tail
// is not filled yet, or another writer's entries came between), or that
// come while a refill runs, are left for a refill to read.
//
// The entries are in the tail (a pull reads them) when it returns; the
// subscriptions they concern are woken by wake, which the writer calls
// once it has answered the commit's pushes, so the answers' writers are
// scheduled before the feed's burst of one frame per subscriber. Until
// wake runs the tail takes nothing else (routing stays in seq order);
// wake must be called exactly once.
func (t *feedTail) committed(entries []replication.Entry) (wake func()) {
	if len(entries) == 0 || !t.fill.TryLock() {
		return func() {}
	}
	t.mu.RLock()
	follows := t.ready && entries[0].Seq == t.head+1
	t.mu.RUnlock()
	if !follows {
		t.fill.Unlock()
		return func() {}
	}
	t.store(replication.Page{Entries: entries, Next: entries[len(entries)-1].Seq})
	return func() {
		defer t.fill.Unlock()
		t.router.route(entries)
	}
}

// behind reports whether the log has committed beyond head.
func (t *feedTail) behind(head uint64) bool {
	select {
	case <-t.log.Notify(head):
		return true
	default:
		return false
	}
}

// append adds a page read after the tail's head, drops the oldest
// entries beyond feedTailBytes, and routes the page's entries. The caller
// holds fill, so pages are routed in seq order.
func (t *feedTail) append(page replication.Page) {
	t.store(page)
	t.router.route(page.Entries) // after mu is released: a woken subscription reads the tail at once
}

// store adds a page read after the tail's head and drops the oldest
// entries beyond feedTailBytes, routing nothing. The caller holds fill.
func (t *feedTail) store(page replication.Page) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range page.Entries {
		t.bytes += len(e.Value)
		t.encoded = append(t.encoded, encodeChange(e))
	}
	t.entries = append(t.entries, page.Entries...)
	t.head = max(t.head, page.Next)
	if t.bytes <= feedTailBytes {
		return
	}
	// Trim to three quarters of the budget, so the copy below happens once
	// per quarter of the budget written, not on every commit.
	drop := 0
	for drop < len(t.entries) && t.bytes > feedTailBytes/4*3 {
		t.bytes -= len(t.entries[drop].Value)
		t.start = t.entries[drop].Seq
		drop++
	}
	t.entries = append([]replication.Entry(nil), t.entries[drop:]...)
	t.encoded = append([][]byte(nil), t.encoded[drop:]...)
}

// anchor empties the tail and starts it at head (every floor is at or
// below the head it was read with, so none the tail kept matters now).
// The entries between the old head and head are never routed: every
// subscription is woken to read them itself. The caller holds fill.
func (t *feedTail) anchor(head uint64) {
	t.mu.Lock()
	old := t.head
	defer t.router.broadcast(old+1, head)
	defer t.mu.Unlock()
	t.ready, t.start, t.head = true, head, head
	t.entries, t.encoded, t.bytes = nil, nil, 0
	t.dropFloorsAtOrBelow(head)
}

// startSeq returns the seq after which the tail holds every entry: the
// floors above it are those forget needs. ok is false before the tail's
// first fill, which starts it at the log's head, above every floor so far:
// it needs none then.
func (t *feedTail) startSeq() (start uint64, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.start, t.ready
}

// forget takes in floors the oplog reported after a compaction (at least
// those above startSeq), so that a subscriber of a tenant whose cursor is
// below its floor gets resync from the log, as PROTOCOL.md section 7 says,
// not entries only this node's memory still holds. Floors only rise, so
// a report older than one already taken in changes nothing. Call it after
// every compaction.
func (t *feedTail) forget(floors replication.Floors) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.floors.All = max(t.floors.All, floors.All)
	for tenant, floor := range floors.Tenants {
		t.floors.Tenants[tenant] = max(t.floors.Tenants[tenant], floor)
	}
	t.dropFloorsAtOrBelow(t.start)
}

// dropFloorsAtOrBelow forgets the floors no cursor the tail answers (at
// least seq) can be below. The caller holds mu.
func (t *feedTail) dropFloorsAtOrBelow(seq uint64) {
	for tenant, floor := range t.floors.Tenants {
		if floor <= seq {
			delete(t.floors.Tenants, tenant)
		}
	}
}

// encodeChange returns e as a changes entry in JSON, as syncproto.Encode
// writes it; nil if it cannot be encoded (the frame is then encoded the
// ordinary way, which reports the error).
func encodeChange(e replication.Entry) []byte {
	c := e.Change
	if c.Validate() != nil {
		return nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(c) != nil {
		return nil
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

// frame returns the changes frame answering request id with page, built
// from entries encoded once in the tail, or nil when an entry of the page
// is not in the tail (the writer then encodes the message itself). It is
// byte for byte what syncproto.Encode writes for changesOf(id, page).
//
// Subscribers at the same cursor in the same scope read the same page
// after a commit, under the same request id (the client library's); the
// first builds the frame and the others get the same bytes from t.shared,
// so a commit seen by a thousand of them builds its frame once. The frame
// returned is shared: callers never modify it.
func (t *feedTail) frame(id string, page replication.Page) []byte {
	if len(page.Entries) > syncproto.MaxPullLimit {
		return nil
	}
	if b := t.shared.get(id, page); b != nil {
		return b
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	// The page's entries are the tail's, in the same order, perhaps with
	// others between them: one search, then a walk.
	var first int
	if len(page.Entries) > 0 {
		first = sort.Search(len(t.entries), func(k int) bool { return t.entries[k].Seq >= page.Entries[0].Seq })
	}
	size, j := 0, first
	for _, e := range page.Entries {
		for j < len(t.entries) && t.entries[j].Seq < e.Seq {
			j++
		}
		if j == len(t.entries) || t.entries[j].Seq != e.Seq || t.entries[j].Op != e.Op || t.encoded[j] == nil {
			return nil // not in the tail, or an evict entry standing for it
		}
		size += len(t.encoded[j]) + 1
	}
	idJSON, _ := json.Marshal(id)
	b := make([]byte, 0, size+len(idJSON)+96)
	b = append(b, `{"type":"changes","id":`...)
	b = append(b, idJSON...)
	b = append(b, `,"entries":[`...)
	j = first
	for i, e := range page.Entries {
		for t.entries[j].Seq < e.Seq {
			j++
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, t.encoded[j]...)
	}
	b = append(b, `],"cursor":`...)
	b = strconv.AppendUint(b, page.Next, 10)
	b = append(b, `,"head":`...)
	b = strconv.AppendUint(b, page.Head, 10)
	b = append(b, `,"more":`...)
	b = strconv.AppendBool(b, !page.CaughtUp())
	b = append(b, '}')
	if len(b) > syncproto.MaxFrameBytes {
		return nil
	}
	t.shared.put(id, page, b)
	return b
}

// sharedFrameCount bounds the frames feedTail.frame keeps to share: the
// few page shapes that subscribers woken by the same commits read (at the
// head, or one or two pages behind it). Each frame is at most
// syncproto.MaxFrameBytes, and those held here are also queued on the
// sessions they were built for.
const sharedFrameCount = 4

// sharedFrames is the newest changes frames built from the tail, each with
// the request id and page it answers, newest first. It is safe for
// concurrent use.
type sharedFrames struct {
	mu     sync.Mutex
	frames [sharedFrameCount]sharedFrame
}

type sharedFrame struct {
	id    string
	page  replication.Page // Entries is the tail's memory, read only
	frame []byte
}

// get returns the frame built for id and a page with the same entries
// (seq and op), cursor and head, or nil.
func (s *sharedFrames) get(id string, page replication.Page) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.frames {
		if f := &s.frames[i]; f.frame != nil && f.id == id && samePage(f.page, page) {
			return f.frame
		}
	}
	return nil
}

// put keeps frame as the newest, dropping the oldest.
func (s *sharedFrames) put(id string, page replication.Page, frame []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	copy(s.frames[1:], s.frames[:sharedFrameCount-1])
	s.frames[0] = sharedFrame{id: id, page: page, frame: frame}
}

// samePage reports whether a and b encode to the same changes frame: the
// same entries (a seq is one entry of the log, and its op says whether it
// stands as itself or as an evict), cursor and head.
func samePage(a, b replication.Page) bool {
	if a.Next != b.Next || a.Head != b.Head || len(a.Entries) != len(b.Entries) {
		return false
	}
	for i := range a.Entries {
		if a.Entries[i].Seq != b.Entries[i].Seq || a.Entries[i].Op != b.Entries[i].Op {
			return false
		}
	}
	return true
}
