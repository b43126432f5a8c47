package replication

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/syncproto"
)

// Entry is one applied write in the oplog: what the change feed delivers
// and what a materializer applies to a store of records. It is the wire's
// change (syncproto.Change: seq, op id, model, key, op, value, version,
// hlc, deleted) plus what only the server keeps: whose it is and when it
// was applied. The change feed sends Change as it is.
//
// Seq is the entry's position in the log, assigned by Append: the first
// entry is 1 and every committed entry is one more than the previous
// committed one. A seq is never reused, even after compaction. Deleted is
// true exactly when Op is syncproto.OpDelete.
type Entry struct {
	syncproto.Change
	Tenant string
	// ClientID is the client that sent the write.
	ClientID string
	// AppliedAt is when the log accepted the entry (millisecond precision),
	// stamped by Append.
	AppliedAt time.Time
	// ScopeOld is the record's scope value before the write ("" when the
	// key had no record or its model no scope); Change.ScopeValue is the
	// value after it. An entry whose ScopeOld a reader follows and whose
	// ScopeValue it does not reaches that reader as an evict entry.
	ScopeOld string
	// Member is the user the record grants its scope value to after the
	// write, when it is a live row of a membership model ("" otherwise).
	Member string
	// Grants are the membership grants the write changed (Scopes).
	Grants []GrantChange
}

// NewEntry returns the log entry for an applied write that produced rec,
// sent by clientID. Seq and AppliedAt are left for Append.
func NewEntry(rec Record, clientID string) Entry {
	op := syncproto.OpPut
	if rec.Deleted {
		op = syncproto.OpDelete
	}
	return Entry{
		Change: syncproto.Change{
			OpID:    rec.OpID,
			Model:   rec.Model,
			Key:     rec.Key,
			Op:      op,
			Value:   rec.Value,
			Version: rec.Version,
			HLC:     rec.HLC,
			Deleted: rec.Deleted,
		},
		Tenant:   rec.Tenant,
		ClientID: clientID,
	}
}

// Record returns the key's state after e.
func (e Entry) Record() Record {
	return Record{
		Tenant:  e.Tenant,
		Model:   e.Model,
		Key:     e.Key,
		Value:   e.Value,
		Version: e.Version,
		HLC:     e.HLC,
		Deleted: e.Deleted,
		OpID:    e.OpID,
		Seq:     e.Seq,

		ScopeValue: e.ScopeValue,
		Member:     e.Member,
	}
}

// ErrInvalidEntry is wrapped by SQLiteLog.AppendAll when an entry is
// malformed (seqs that do not follow the head one by one, an empty model, key or op id, version 0, a
// zero HLC, an op that disagrees with Deleted). Nothing was appended; it is a bug in the
// caller.
var ErrInvalidEntry = errors.New("invalid oplog entry")

// validate checks an entry about to be appended.
func (e Entry) validate() error {
	var problem string
	switch {
	case e.Model == "" || e.Key == "" || e.OpID == "":
		problem = "empty model, key or op id"
	case e.Version == 0:
		problem = "version 0"
	case e.HLC.IsZero():
		problem = "zero hlc"
	case e.Op != syncproto.OpPut && e.Op != syncproto.OpDelete:
		problem = fmt.Sprintf("unknown op %q", e.Op)
	case e.Deleted != (e.Op == syncproto.OpDelete):
		problem = "deleted disagrees with op"
	default:
		return nil
	}
	return fmt.Errorf("%w: op %s on %s/%s: %s", ErrInvalidEntry, e.OpID, e.Model, e.Key, problem)
}

// Scope selects the entries or records a reader may see: one tenant (or
// all) and a list of models (or all). Both widenings are explicit, so a
// field left unset never shows a reader more: the zero Scope selects
// nothing, and a principal that may read no model reads nothing.
type Scope struct {
	// Tenant is the only tenant whose data is selected, unless AllTenants.
	Tenant string
	// AllTenants selects every tenant (operator tools only).
	AllTenants bool
	// Models lists the models selected, unless AllModels.
	Models []string
	// AllModels selects every model.
	AllModels bool
	// Follow, when Scopes declares any scope, limits the records of scoped
	// models to the scope values it holds (syncproto.ScopeSet.Has), and
	// turns an entry that moves a row out of them into an evict entry. nil
	// selects every scope value (operators, snapshots of every grant).
	Follow syncproto.ScopeSet
	// Scopes are the declarations Follow is read against.
	Scopes *Scopes
	// User, when set, ends a page after an entry that changes this user's
	// membership grants (Page.Grants), so that the reader can change what
	// it follows at exactly that seq.
	User string
}

// Sees reports what a reader of s receives of e: the entry itself
// (deliver), an evict entry in its place (evict: the row moved out of the
// values it follows), or nothing.
func (s Scope) Sees(e *Entry) (deliver, evict bool) {
	if !s.Selects(e.Tenant, e.Model) {
		return false, false
	}
	if s.Follow == nil || s.Scopes == nil {
		return true, false
	}
	d := s.Scopes.Of(e.Model)
	if d == nil {
		return true, false
	}
	if e.ScopeValue != "" && s.Follow.Has(d.Name, e.ScopeValue) {
		return true, false
	}
	return false, e.ScopeOld != "" && s.Follow.Has(d.Name, e.ScopeOld)
}

// Holds reports whether a reader of s holds rec: its tenant and model are
// selected and, for a scoped model, Follow holds its scope value (what
// recordsSelect selects in SQL).
func (s Scope) Holds(rec Record) bool {
	if !s.Selects(rec.Tenant, rec.Model) {
		return false
	}
	if s.Follow == nil || s.Scopes == nil {
		return true
	}
	d := s.Scopes.Of(rec.Model)
	return d == nil || s.Follow.Has(d.Name, rec.ScopeValue)
}

// grantsFor returns the grant changes of e that concern s.User.
func (s Scope) grantsFor(e *Entry) []GrantChange {
	if s.User == "" || len(e.Grants) == 0 || e.Tenant != s.Tenant {
		return nil
	}
	var mine []GrantChange
	for _, g := range e.Grants {
		if g.User == s.User {
			mine = append(mine, g)
		}
	}
	return mine
}

// Evicted returns the evict entry standing for e, for a reader whose
// follows no longer cover the row e moved.
func (e Entry) Evicted() Entry {
	x := e
	x.Op, x.Value, x.Deleted, x.ScopeValue, x.Reason = syncproto.OpEvict, nil, false, "", syncproto.EvictMoved
	return x
}

// Read limits.
const (
	// DefaultReadLimit is the page size when ReadRequest.Limit is 0.
	DefaultReadLimit = 500
	// MaxReadLimit caps ReadRequest.Limit.
	MaxReadLimit = 5000
	// DefaultReadBytes is the value-byte budget of a page when
	// ReadRequest.MaxBytes is 0.
	DefaultReadBytes = 1 << 20
)

// ReadRequest asks for the entries after a cursor.
type ReadRequest struct {
	// After is the cursor: the seq of the last entry the reader has; 0 to
	// start at the beginning.
	After uint64
	Scope Scope
	// Limit is the most entries returned; 0 means DefaultReadLimit, and
	// values above MaxReadLimit are lowered to it.
	Limit int
	// MaxBytes bounds the sum of the values' lengths in the page; 0 means
	// DefaultReadBytes. A page holds at least one entry whatever its size.
	MaxBytes int
}

// Page is one Read's answer.
type Page struct {
	// Entries are in seq order, all with seq > After, all in scope.
	Entries []Entry
	// Next is the cursor for the following Read. When the page ended
	// because nothing more was in scope, Next is Head (the reader skips the
	// entries of other scopes in one step); otherwise it is the last
	// entry's seq.
	Next uint64
	// Head is the log's head when the page was read.
	Head uint64
	// Grants, when the reader's Scope names a User, are the changes of that
	// user's membership grants made by the entry at Next: the page ends
	// there, so the reader changes what it follows at that seq.
	Grants []GrantChange
}

// CaughtUp reports whether the reader has everything up to the head this
// page was read at: wait for a notification before reading again.
func (p Page) CaughtUp() bool { return p.Next >= p.Head }

// Bounds is the range of entries a log still holds, as a reader of one
// scope sees it.
//
// Seqs are one sequence across tenants (a cursor is valid on every node of
// a cluster), but retention is per tenant: compaction removes each
// tenant's oldest entries by that tenant's own count and age, so another
// tenant's churn never moves a tenant's Floor.
type Bounds struct {
	// Floor is the newest seq in the reader's scope that compaction
	// removed: every entry in scope after Floor is retained, so a reader
	// whose cursor is at or beyond Floor misses nothing. 0 when nothing in
	// scope was ever compacted. For a scope of every tenant it is the
	// highest tenant floor.
	Floor uint64
	// Oldest is the seq of the oldest entry the log retains, of any tenant;
	// Head+1 when the log holds none (empty, or compacted entirely). It is
	// informational (a gauge): cursors are checked against Floor.
	Oldest uint64
	// Head is the seq of the newest committed entry; 0 for a log that was
	// never appended to.
	Head uint64
}

// Errors a Read may wrap inside a *CursorError.
var (
	// ErrCursorExpired: entries of the reader's tenant after the cursor
	// were compacted away. The reader resyncs from a snapshot and resumes
	// at the snapshot's head.
	ErrCursorExpired = errors.New("cursor older than the retained oplog")
	// ErrCursorAhead: the cursor is beyond the head; this log never issued
	// it (the database was restored, or the cursor belongs to another
	// server). The reader resyncs from a snapshot.
	ErrCursorAhead = errors.New("cursor beyond the oplog head")
)

// CursorError says why a cursor cannot be served and what the log holds.
// It wraps ErrCursorExpired or ErrCursorAhead.
type CursorError struct {
	Cursor uint64
	Bounds Bounds
	Err    error
}

func (e *CursorError) Error() string {
	return fmt.Sprintf("cursor %d: %v (floor %d, head %d)", e.Cursor, e.Err, e.Bounds.Floor, e.Bounds.Head)
}

func (e *CursorError) Unwrap() error { return e.Err }

// Check returns a *CursorError when a reader of b's scope at cursor cannot
// continue from this log: entries in its scope that it has not seen were
// compacted (ErrCursorExpired), or the cursor is beyond Head
// (ErrCursorAhead). Read applies it itself, atomically with the read.
func (b Bounds) Check(cursor uint64) error {
	switch {
	case cursor > b.Head:
		return &CursorError{Cursor: cursor, Bounds: b, Err: ErrCursorAhead}
	case cursor < b.Floor:
		return &CursorError{Cursor: cursor, Bounds: b, Err: ErrCursorExpired}
	}
	return nil
}

// Floors are the compaction floors of a log above some seq: what a cache
// of the log's newest entries (the server's feed tail) needs to refuse the
// cursors the log would refuse.
type Floors struct {
	// All is the floor every tenant has at least: 0, except in a log
	// migrated from schema version 1, whose one floor for the whole log it
	// carries.
	All uint64
	// Tenants holds each tenant whose own floor is above the seq asked for.
	Tenants map[string]uint64
}

// Of returns the floor of scope as far as f knows it: the highest of the
// tenants' for a scope of every tenant.
func (f Floors) Of(scope Scope) uint64 {
	if !scope.AllTenants {
		return max(f.All, f.Tenants[scope.Tenant])
	}
	floor := f.All
	for _, t := range f.Tenants {
		floor = max(floor, t)
	}
	return floor
}

// Feed is what the change feed reads from a log: pages after a cursor, and
// the bounds and floors those cursors are checked against. Every Log is a
// Feed; so is Memory, so both are held to the per-tenant retention rule by
// the conformance suite in package logtest.
type Feed interface {
	// Read returns the committed entries after req.After in scope, paged.
	// A cursor the log cannot serve for req.Scope yields a *CursorError.
	Read(ctx context.Context, req ReadRequest) (Page, error)
	// Bounds returns the retained range as a reader of scope sees it.
	Bounds(ctx context.Context, scope Scope) (Bounds, error)
	// Floors returns the floors above seq.
	Floors(ctx context.Context, above uint64) (Floors, error)
}

// Log is the ordered, durable record of applied writes that the change feed
// serves, as its readers and its writer's commit reports see it. SQLiteLog
// keeps it in the server's database, beside the records; in a cluster
// every node keeps its own, identical one (see the package manual: the
// replicas apply the same batches in the same order). Entries are written
// by the state machine (Store), never through this interface: a reader
// declares the part it consumes (the server's feed tail reads a Feed and
// Notify).
//
// Implementations are safe for concurrent use, and their tests run the
// conformance suite in package logtest.
type Log interface {
	// Committed tells the log that a transaction holding appends up to
	// head has committed, waking waiters. The writer must call it after
	// every commit that appended; never before the commit.
	Committed(head uint64)
	Feed
	// Notify returns a channel that is closed once a commit beyond after
	// was reported by Committed. It may also close spuriously; the reader
	// reads again either way.
	Notify(after uint64) <-chan struct{}
	// Wait blocks until a commit beyond after was reported, or ctx ends.
	Wait(ctx context.Context, after uint64) error
	// Compact removes, tenant by tenant, the oldest entries beyond the
	// log's retention (each tenant's own count and age), in bounded chunks,
	// and returns how many it removed. It raises the floor of each tenant
	// it removed entries of, and no other. Head never moves backwards.
	Compact(ctx context.Context) (int64, error)
}

var _ Log = (*SQLiteLog)(nil)

// headNotifier is the wake-up broadcast behind Committed, Notify and Wait:
// one channel, closed and replaced each time the head advances. It starts
// no goroutines, so an abandoned waiter leaves nothing behind.
type headNotifier struct {
	mu      sync.Mutex
	head    uint64
	advance chan struct{} // closed when head next advances
}

func newHeadNotifier(head uint64) *headNotifier {
	return &headNotifier{head: head, advance: make(chan struct{})}
}

// Committed records that head is committed and wakes every waiter if it
// advanced.
func (n *headNotifier) Committed(head uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if head <= n.head {
		return
	}
	n.head = head
	close(n.advance)
	n.advance = make(chan struct{})
}

// Notify returns a closed channel if a commit beyond after was already
// reported, else the channel closed at the next advance.
func (n *headNotifier) Notify(after uint64) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.head > after {
		return closedChan
	}
	return n.advance
}

// Wait blocks until a commit beyond after was reported or ctx ends.
func (n *headNotifier) Wait(ctx context.Context, after uint64) error {
	for {
		select {
		case <-n.Notify(after):
		case <-ctx.Done():
			return fmt.Errorf("wait for oplog beyond %d: %w", after, ctx.Err())
		}
		n.mu.Lock()
		beyond := n.head > after
		n.mu.Unlock()
		if beyond {
			return nil
		}
	}
}

// closedChan is returned by Notify when there is no need to wait.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// PageOf answers req from entries, which hold, in seq order, every
// committed entry after some seq at or below req.After up to head: the
// entries after req.After in req.Scope, within req's limits (their defaults
// for zero values), with Next and Head set as Read sets them. It is how an
// in-memory log answers a read; it does not check the cursor against the
// retained range.
//
// When every entry in the page's range is in scope, the page's Entries
// share entries' array (capped, so appending to either copies): a log that
// answers with PageOf must never write an entry it has handed out, only
// append after it or replace its slice. A feed page read by a thousand
// subscribers is then a thousand slice headers, not a thousand copies.
func (req ReadRequest) PageOf(entries []Entry, head uint64) Page {
	limit, maxBytes := req.bounds()
	page := Page{Head: head, Next: head}
	start := sort.Search(len(entries), func(i int) bool { return entries[i].Seq > req.After })
	size, n, last := 0, 0, uint64(0)
	shared := true // the n entries taken are entries[start:start+n]
	unshare := func() {
		if shared {
			page.Entries = append([]Entry(nil), entries[start:start+n]...)
			shared = false
		}
	}
	for i := start; i < len(entries); i++ {
		e := &entries[i]
		deliver, evict := req.Scope.Sees(e)
		if deliver || evict {
			if n > 0 && size+len(e.Value) > maxBytes {
				page.Next = last
				break
			}
			if evict {
				unshare() // before counting e: the shared run ends before it
			}
			size += len(e.Value)
			n, last = n+1, e.Seq
			switch {
			case evict:
				page.Entries = append(page.Entries, e.Evicted())
			case !shared:
				page.Entries = append(page.Entries, *e)
			}
		} else {
			unshare()
		}
		if g := req.Scope.grantsFor(e); g != nil {
			unshare()
			page.Next, page.Grants = e.Seq, g
			break
		}
		if n == limit {
			page.Next = last
			break
		}
	}
	if shared && n > 0 {
		page.Entries = entries[start : start+n : start+n]
	}
	return page
}

// bounds returns the page's entry count and value-byte limits: req's, with
// the defaults for zero values and the count capped at MaxReadLimit.
func (req ReadRequest) bounds() (limit, maxBytes int) {
	limit = req.Limit
	if limit <= 0 {
		limit = DefaultReadLimit
	}
	maxBytes = req.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultReadBytes
	}
	return min(limit, MaxReadLimit), maxBytes
}
