// Package synccore is the client's sync decisions as one pure state
// machine: what to read from the queue, what to push, how to act on each
// answer, when to retry, when to subscribe or resync, and what status to
// report.
//
// A Core has no goroutines, clocks or I/O. Its driver feeds it inputs
// (Step) and carries out the actions it returns, in order, then feeds the
// answers back as further inputs. The same Core runs inside the client and
// inside a seeded simulation (see sim_test.go) that checks its promises
// against the server's own decision code.
package synccore

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/syncproto"
)

// State is what a client is doing, as reported to the app.
type State string

// States.
const (
	StateOffline    State = "offline"    // no connection; writes wait in the queue
	StateConnecting State = "connecting" // online, not yet welcomed
	StateSyncing    State = "syncing"    // welcomed, pushing, reading the queue, or waiting to retry writes left queued
	StateIdle       State = "idle"       // welcomed, queue drained, nothing in flight
	StateRefused    State = "refused"    // the server refused the session; see Status.Err
	StateClosed     State = "closed"     // closed; no further actions
)

// Config holds a Core's limits.
type Config struct {
	// MaxBatch is the most writes one push carries (a welcome may lower it).
	MaxBatch int
	// MaxPushBytes is the most bytes of queued payloads one push carries,
	// each counted with MutationSlack (a welcome may lower it); 0: no
	// byte limit. A push always takes one write, whatever its size.
	MaxPushBytes int
	// InFlight is how many pushes may be unanswered at once.
	InFlight int
	// MaxAttempts is the retry budget of a write refused transiently.
	MaxAttempts int
	// Scopes is the device's durable scope state when the core starts:
	// Status reports it before the first welcome (which brings it again).
	Scopes Scopes
}

// Defaults for Config's zero fields.
const (
	DefaultMaxBatch    = 100
	DefaultInFlight    = 4
	DefaultMaxAttempts = 5
)

func (c Config) withDefaults() Config {
	if c.MaxBatch <= 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.InFlight <= 0 {
		c.InFlight = DefaultInFlight
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	return c
}

// Item is one queued write as the core sees it: its queue id (increasing
// with insertion), its mutation and its durable attempt count.
type Item struct {
	ID       uint64
	Mutation syncproto.Mutation
	Attempts int
	// Size is the bytes of its queued payload (see Config.MaxPushBytes).
	Size int
	// Invalid says why the queued payload is not a mutation this client
	// can send ("" when it is one): such an item is dead-lettered at once.
	Invalid string
}

// MutationSlack is the room each mutation keeps in a push beyond its
// queued payload: a separating comma, and a longer timestamp when it is
// re-stamped.
const MutationSlack = 32

// FitsPush reports whether a push holding n mutations whose payloads take
// size bytes (slack included) has room for one more of payload bytes,
// under the batch and byte limits (limit 0: no byte limit). An empty push
// takes any one write.
func FitsPush(n, size, payload, batch, limit int) bool {
	return n == 0 || (n < batch && (limit <= 0 || size+payload+MutationSlack <= limit))
}

// Input is something that happened, fed to Core.Step.
type Input interface{ input() }

// Inputs.
type (
	// Welcomed: a connection is up and the server accepted the session.
	Welcomed struct {
		// MaxBatch is the server's batch limit (0: no limit announced).
		MaxBatch int
		// MaxPushBytes is the payload budget of one push the server's
		// frame limit allows (0: none announced).
		MaxPushBytes int
		// Cursor is the replica's cursor as hello announced it: the core
		// resumes the feed from it.
		Cursor uint64
		// Head is the server's newest oplog seq: a replica that never
		// synced (cursor 0) loads a snapshot when the server has history.
		Head uint64
		// Resync reports that the server cannot serve the feed from the
		// replica's cursor (cursor_ahead after a restore from a backup,
		// another database, a compacted oplog): resync from a snapshot.
		Resync bool
		// ValueVersions is welcome's value_versions: by model, the value
		// versions the server accepts (a model it does not list takes
		// every version). A paused model whose refused version it lists
		// resumes.
		ValueVersions map[string][]uint64
		// Scopes is the device's durable scope state, its Want already
		// the request for the scopes this welcome declares (see Scopes).
		Scopes Scopes
	}
	// Disconnected: the connection is gone. Unanswered pushes stay queued,
	// charged nothing.
	Disconnected struct{}
	// Network: the network monitor's verdict changed (Online: a server
	// answers), which tells offline from connecting. Until the first one
	// the core is connecting (finding out), not offline: offline is a
	// verdict an app may act on.
	Network struct{ Online bool }
	// Refused: the server refused the session for good (unauthorized,
	// wrong client id, revoked, incompatible protocol). No reconnect helps
	// until the app changes something.
	Refused struct{ Err *syncproto.Error }
	// Enqueued: the app queued a write; it is pushed without waiting.
	Enqueued struct{}
	// Page answers ReadQueue: the queued items after its After, in order.
	Page struct {
		Read  uint64 // the ReadQueue's Read
		Items []Item
		// End says Items reached the end of the queue as it was when read
		// (fewer than Limit). Once they are sent, the core reads no
		// further: a write queued since is announced by Enqueued.
		End bool
	}
	// Answered is a push's push_result.
	Answered struct {
		Push    uint64
		Results []syncproto.Result
	}
	// PushRefused: the push was answered by an error frame instead of
	// push_result. A retryable error leaves its writes queued uncharged; a
	// permanent one charges each an attempt (PROTOCOL section 6).
	PushRefused struct {
		Push uint64
		Err  *syncproto.Error
	}
	// Changes is a frame of the change feed: the entries after From, up
	// to Next.
	Changes struct {
		From, Next uint64
		Entries    []syncproto.Change
		// Evictions are the frame's changes.evictions, applied after
		// Entries.
		Evictions []syncproto.Eviction
	}
	// Backfill is a backfill page of the live subscription (PROTOCOL.md
	// 19.4): entries applied by version, the cursor left where it is.
	Backfill struct {
		Scope, Value string
		Entries      []syncproto.Change
		LastKey      string
		Done         bool
		// At is the seq at which the server read the page (backfill.at),
		// carried to ApplyBackfill.
		At uint64
	}
	// Rescope: the app changed what the device requests (Want, already
	// durable); the core subscribes again from the same cursor.
	Rescope struct{ Want syncproto.ScopeSet }
	// FeedLost: the server can no longer serve the feed from the cursor
	// (its oplog was compacted past it): resync from a snapshot.
	FeedLost struct{}
	// Snapshot answers Resync: the replica's records were replaced by the
	// server's snapshot at Head.
	Snapshot struct {
		Head uint64
		// Have are the scope values the snapshot holds complete.
		Have syncproto.ScopeSet
	}
	// SyncRequested: the app asks for a pass over the queue now (Sync);
	// PassEnded carrying Sync answers it.
	SyncRequested struct{ Sync uint64 }
	// TimerFired: the timer of the last SetTimer fired.
	TimerFired struct{ Timer uint64 }
	// Close: the client is closing.
	Close struct{}
)

func (Welcomed) input()      {}
func (Disconnected) input()  {}
func (Network) input()       {}
func (Refused) input()       {}
func (Enqueued) input()      {}
func (Page) input()          {}
func (Answered) input()      {}
func (PushRefused) input()   {}
func (Changes) input()       {}
func (Snapshot) input()      {}
func (FeedLost) input()      {}
func (TimerFired) input()    {}
func (Close) input()         {}
func (Backfill) input()      {}
func (Rescope) input()       {}
func (SyncRequested) input() {}

// Action is something the driver must do, returned by Core.Step.
type Action interface{ action() }

// Actions.
type (
	// ReadQueue asks for up to Limit queued items after After, answered
	// by a Page carrying Read.
	ReadQueue struct {
		Read, After uint64
		Limit       int
	}
	// Send pushes Items' mutations, answered by Answered or PushRefused
	// carrying Push, or by Disconnected.
	Send struct {
		Push  uint64
		Items []Item
	}
	// Settle carries out the verdict on one item: record the outcome,
	// then mark done, charge, dead-letter or hand to the conflict handler
	// (see Verdict). The driver settles in the order given.
	Settle struct {
		Item    Item
		Verdict Verdict
	}
	// Subscribe asks the server for the change feed after After, with
	// the scope members (always present, PROTOCOL.md 19.3): Scopes is the
	// request, Have the values held complete at After, Resume where
	// interrupted backfills continue. Empty members are nil; the driver
	// sends scopes as {} all the same.
	Subscribe struct {
		After  uint64
		Scopes syncproto.ScopeSet
		Have   syncproto.ScopeSet
		Resume map[string]map[string]string
	}
	// Apply applies feed entries to the replica (evict entries drop their
	// row unless it is held at a newer version), then drops every row of
	// the values in Evictions, and moves its cursor to Cursor, in one
	// transaction; when Scopes is not nil it is the scope state to store
	// in that transaction.
	Apply struct {
		Cursor    uint64
		Entries   []syncproto.Change
		Evictions []syncproto.Eviction
		Scopes    *Scopes
	}
	// ApplyBackfill applies a backfill page's entries by version (an
	// entry is stored unless the replica holds the key at the same or a
	// newer version), leaving the cursor, and stores Scopes (the value
	// complete when Done, else its resume position), in one transaction.
	ApplyBackfill struct {
		Scope, Value string
		Entries      []syncproto.Change
		Done         bool
		Scopes       Scopes
		// At is the seq at which the server read the page (Backfill.At).
		At uint64
	}
	// Resync fetches the server's snapshot and replaces the replica's
	// records and cursor with it, in one transaction (the pending overlay
	// stays); answered by Snapshot.
	Resync struct{}
	// PassEnded: a pass over the queue ended (every item read was pushed
	// and answered, Left of them left queued), or, when Lost, the
	// connection ended before it did. It answers the SyncRequested whose
	// ids are in Syncs.
	PassEnded struct {
		Syncs []uint64
		Left  int
		Lost  bool
	}
	// SetTimer arms the one timer, replacing any earlier, to retry a pass
	// that left writes queued: after the driver's backoff wait for the
	// Failures-th consecutive such pass (1 for the first) and the server's
	// retry hint Hint (0: none), feed TimerFired{Timer}. The core has no
	// clock or randomness: the wait and its jitter are the driver's one
	// backoff rule (the client's reconnect.Backoff.Wait).
	SetTimer struct {
		Timer    uint64
		Failures int
		Hint     time.Duration
	}
	// Report is the status the app is told, sent whenever it changes.
	Report struct{ Status Status }
)

func (ReadQueue) action()     {}
func (Send) action()          {}
func (Settle) action()        {}
func (Subscribe) action()     {}
func (Apply) action()         {}
func (Resync) action()        {}
func (PassEnded) action()     {}
func (SetTimer) action()      {}
func (Report) action()        {}
func (ApplyBackfill) action() {}

// Status is the client's state and the last error that explains it.
type Status struct {
	State State
	// Err is the server's last refusal (of the session or of a push);
	// nil once a pass drains the queue.
	Err *syncproto.Error
	// Paused lists the models whose writes wait for a server that accepts
	// their value version, by model name; nil when none. A new set
	// replaces it on every change and is never modified, so Status stays
	// comparable with ==.
	Paused *Pauses
	// Scopes is the state of each scope value the device requested by
	// name, holds, is backfilling or lost; nil when none. Replaced, never
	// modified, like Paused.
	Scopes *ScopeStatuses
}

// PausedModel is a model whose writes wait, queued and in order, because the
// server refused one of them for its value version (needs_upgrade, or
// upcast_failed). None of them is sent until a welcome lists Version.
type PausedModel struct {
	Model string
	// Version is the value version of the write the server refused.
	Version uint64
	// Code is the refusal: syncproto.CodeNeedsUpgrade or CodeUpcastFailed.
	Code syncproto.Code
	// Accepted are the versions the server said it accepts.
	Accepted []uint64
}

// Pauses is a set of paused models, sorted by model name.
type Pauses struct{ Models []PausedModel }

// Has reports whether model is paused in p (a nil p holds none).
func (p *Pauses) Has(model string) bool {
	if p == nil {
		return false
	}
	for _, m := range p.Models {
		if m.Model == model {
			return true
		}
	}
	return false
}

// with returns p with model paused as pause (p when it already is).
func (p *Pauses) with(pause PausedModel) *Pauses {
	if p.Has(pause.Model) {
		return p
	}
	out := &Pauses{}
	if p != nil {
		out.Models = slices.Clone(p.Models)
	}
	out.Models = append(out.Models, pause)
	slices.SortFunc(out.Models, func(a, b PausedModel) int { return strings.Compare(a.Model, b.Model) })
	return out
}

// resumed returns p without the models whose paused version welcome's
// versions accept; nil when none is left.
func (p *Pauses) resumed(versions map[string][]uint64) *Pauses {
	if p == nil {
		return nil
	}
	keep := slices.DeleteFunc(slices.Clone(p.Models), func(m PausedModel) bool { return syncproto.Accepts(versions[m.Model], m.Version) })
	switch {
	case len(keep) == 0:
		return nil
	case len(keep) == len(p.Models):
		return p
	}
	return &Pauses{Models: keep}
}

// Core is the state machine. Its zero value is not usable; see New.
type Core struct {
	cfg      Config
	maxBatch int
	maxBytes int
	closed   bool
	welcomed bool
	offline  bool // the network monitor's last verdict was offline
	status   Status

	// queue pass
	read      uint64 // id of the outstanding ReadQueue, 0 when none
	reads     uint64 // ReadQueue counter
	after     uint64 // last queue id taken in this pass
	exhausted bool   // the pass reached the queue's end
	woken     bool   // Enqueued arrived while a read was outstanding
	left      int    // items of this pass left queued
	rerun     bool   // the retry timer fired during this pass: run another
	retryHint time.Duration
	failures  int      // consecutive passes that left items queued
	waiting   bool     // the retry timer is armed for items left queued
	restamped bool     // a write was re-stamped on this connection
	syncs     []uint64 // SyncRequested waiting for the end of a pass

	pushes   uint64
	inFlight map[uint64][]Item

	timer uint64

	// feed
	cursor    uint64
	resyncing bool

	// partial sync (scopes.go)
	scopes     Scopes
	lostScopes map[scopeKey]string // values evicted, by reason, until backfilled again
	lostOrder  []scopeKey          // lostScopes' keys, oldest first (MaxLostScopes)
	// scopesDirty: the scope state changed during this Step.
	scopesDirty bool
}

// New returns a Core whose replica is at cursor.
func New(cfg Config, cursor uint64) *Core {
	cfg = cfg.withDefaults()
	c := &Core{cfg: cfg, maxBatch: cfg.MaxBatch, maxBytes: cfg.MaxPushBytes, cursor: cursor, inFlight: map[uint64][]Item{}, status: Status{State: StateConnecting}}
	c.restore(cfg.Scopes)
	c.refreshScopes()
	return c
}

// Status returns the status last reported.
func (c *Core) Status() Status { return c.status }

// Cursor returns the replica cursor the core has applied up to.
func (c *Core) Cursor() uint64 { return c.cursor }

// Step feeds one input and returns the actions it causes, in order.
func (c *Core) Step(in Input) []Action {
	if c.closed {
		return nil
	}
	var out []Action
	before := c.status
	switch in.(type) {
	case Welcomed, Snapshot, Backfill, Rescope:
		c.scopesDirty = true
	case Changes:
		c.scopesDirty = len(in.(Changes).Evictions) > 0
	}
	switch in := in.(type) {
	case Welcomed:
		c.welcomed = true
		c.restamped = false
		c.cursor = in.Cursor
		c.maxBatch = c.cfg.MaxBatch
		if in.MaxBatch > 0 {
			c.maxBatch = min(c.maxBatch, in.MaxBatch)
		}
		c.maxBytes = c.cfg.MaxPushBytes
		if in.MaxPushBytes > 0 && (c.maxBytes <= 0 || in.MaxPushBytes < c.maxBytes) {
			c.maxBytes = in.MaxPushBytes
		}
		c.status = Status{State: StateSyncing, Paused: c.status.Paused.resumed(in.ValueVersions), Scopes: c.status.Scopes}
		c.restore(in.Scopes)
		// A replica that never synced loads a snapshot; one that holds
		// backfilled values at cursor 0 (its feed carried nothing it may
		// see yet) has synced, and subscribes: its first frame says what
		// it lost meanwhile.
		never := c.cursor == 0 && len(c.scopes.Have) == 0 && len(c.scopes.Resume) == 0
		if in.Resync || (never && in.Head > 0) {
			c.resyncing = true
			out = append(out, Resync{})
		} else {
			out = append(out, c.subscribe())
		}
		c.startPass()
		out = c.pull(out)
	case Disconnected:
		out = c.drop(out)
		if c.status.State != StateRefused {
			c.status.State = c.unwelcomed()
		}
	case Network:
		c.offline = !in.Online
		if !c.welcomed && c.status.State != StateRefused {
			c.status.State = c.unwelcomed()
		}
	case Refused:
		out = c.drop(out)
		c.status = Status{State: StateRefused, Err: in.Err, Paused: c.status.Paused, Scopes: c.status.Scopes}
	case SyncRequested:
		c.syncs = append(c.syncs, in.Sync)
		switch {
		case !c.welcomed:
			out = c.lost(out)
		case c.passOver():
			c.startPass()
			out = c.pull(out)
		default:
			c.rerun = true // a pass that starts after the request
		}
	case Enqueued:
		if c.read != 0 {
			c.woken = true
		}
		c.exhausted = false
		out = c.pull(out)
	case Page:
		out = c.page(in, out)
	case Answered:
		out = c.answered(in, out)
	case PushRefused:
		out = c.pushRefused(in, out)
	case Changes:
		out = c.changes(in, out)
	case FeedLost:
		if c.welcomed && !c.resyncing {
			c.resyncing = true
			out = append(out, Resync{})
		}
	case Snapshot:
		if c.welcomed && c.resyncing {
			c.resyncing = false
			c.cursor = in.Head
			c.scopes.Have, c.scopes.Resume = cloneSet(in.Have), map[string]map[string]string{}
			out = append(out, c.subscribe())
			out = c.passEnd(out)
		}
	case Backfill:
		out = c.backfill(in, out)
	case Rescope:
		c.scopes.Want = cloneSet(in.Want)
		for name, values := range in.Want {
			for _, v := range values {
				c.regain(scopeKey{name, v})
			}
		}
		if c.welcomed && !c.resyncing {
			out = append(out, c.subscribe())
		}
	case TimerFired:
		// A pass in progress (started by a reconnect) covers the retry;
		// restarting it would send its in-flight writes twice.
		switch {
		case in.Timer != c.timer || !c.welcomed:
		case c.passOver():
			c.startPass()
			out = c.pull(out)
		default:
			c.rerun = true // once this pass is over
		}
	case Close:
		out = c.drop(out)
		c.closed = true
		c.status = Status{State: StateClosed, Err: c.status.Err, Paused: c.status.Paused, Scopes: c.status.Scopes}
	default:
		panic(fmt.Sprintf("synccore: unknown input %T", in))
	}
	c.settleState()
	c.refreshScopes()
	if c.status != before {
		out = append(out, Report{Status: c.status})
	}
	return out
}

// unwelcomed is the state without a connection and without a refusal.
func (c *Core) unwelcomed() State {
	if c.offline {
		return StateOffline
	}
	return StateConnecting
}

// drop forgets everything that belonged to the connection; a Sync
// waiting for a pass is told the connection was lost.
func (c *Core) drop(out []Action) []Action {
	c.welcomed = false
	c.rerun = false
	c.read = 0
	c.woken = false
	c.resyncing = false
	clear(c.inFlight)
	return c.lost(out)
}

// lost answers the waiting syncs: no pass can end without a connection.
func (c *Core) lost(out []Action) []Action {
	if len(c.syncs) == 0 {
		return out
	}
	out = append(out, PassEnded{Syncs: c.syncs, Lost: true})
	c.syncs = nil
	return out
}

func (c *Core) startPass() {
	c.after, c.exhausted, c.woken, c.left, c.retryHint, c.waiting = 0, false, false, 0, 0, false
}

// pull asks for the next page when the connection has room for a push.
func (c *Core) pull(out []Action) []Action {
	if !c.welcomed || c.read != 0 || c.exhausted || len(c.inFlight) >= c.cfg.InFlight {
		return out
	}
	c.reads++
	c.read = c.reads
	return append(out, ReadQueue{Read: c.read, After: c.after, Limit: c.maxBatch})
}

func (c *Core) page(in Page, out []Action) []Action {
	if in.Read == 0 || in.Read != c.read {
		return out // an answer for a connection that is gone
	}
	c.read = 0
	items := in.Items
	for len(items) > 0 && items[0].Invalid != "" {
		// Not a mutation this client can send: it never will be.
		it := items[0]
		items = items[1:]
		c.after = it.ID
		out = append(out, Settle{Item: it, Verdict: Verdict{Action: DeadLetter, Reason: "undecodable: " + it.Invalid,
			Result: syncproto.Result{Status: syncproto.StatusRejected, Code: syncproto.CodeMalformed, Message: it.Invalid}}})
	}
	if c.status.Paused != nil && len(items) > 0 {
		// A paused model's writes wait, in order, for a server that
		// accepts them; the other models' writes go on.
		last := items[len(items)-1].ID
		items = slices.DeleteFunc(slices.Clone(items), func(it Item) bool { return it.Invalid == "" && c.status.Paused.Has(it.Mutation.Model) })
		if len(items) == 0 {
			c.after = last
		}
	}
	if len(items) == 0 && len(in.Items) > 0 {
		if in.End && !c.woken {
			c.exhausted = true
			return c.passEnd(out)
		}
		return c.pull(out) // the page held only invalid or paused items: read on
	}
	if len(items) == 0 {
		if c.woken {
			c.woken = false
			return c.pull(out)
		}
		c.exhausted = true
		return c.passEnd(out)
	}
	n, size := 0, 0
	for n < len(items) && items[n].Invalid == "" && FitsPush(n, size, items[n].Size, c.maxBatch, c.maxBytes) {
		size += items[n].Size + MutationSlack
		n++
	}
	end := in.End && n == len(items)
	items = items[:n]
	c.after = items[len(items)-1].ID
	c.pushes++
	c.inFlight[c.pushes] = items
	out = append(out, Send{Push: c.pushes, Items: items})
	if end && !c.woken {
		// Reading on would find nothing: one read per awaited write.
		c.exhausted = true
		return out
	}
	return c.pull(out)
}

func (c *Core) answered(in Answered, out []Action) []Action {
	items, ok := c.inFlight[in.Push]
	if !ok {
		return out // a duplicate answer, or one for a connection that is gone
	}
	delete(c.inFlight, in.Push)
	for i, it := range items {
		if i >= len(in.Results) || in.Results[i].OpID != it.Mutation.OpID {
			c.left++ // unanswered: resent by a later pass, charged nothing
			continue
		}
		r := &in.Results[i]
		v := Judge(r, it.Attempts, c.cfg.MaxAttempts)
		if v.Action == Pause {
			c.status.Paused = c.status.Paused.with(pauseOf(it, r))
		}
		if v.Action == Restamp && !c.restamped {
			// Re-stamped from the corrected clock: resent at once, by a
			// pass after this one, once per connection.
			c.restamped, c.rerun = true, true
		}
		if v.Action == Left || v.Action == Charge || v.Action == Restamp {
			c.left++
			if r.Status == syncproto.StatusRejected {
				c.status.Err = &syncproto.Error{Code: r.Code, Message: r.Message}
			}
		}
		out = append(out, Settle{Item: it, Verdict: v})
	}
	out = c.pull(out)
	return c.passEnd(out)
}

// pauseOf is the pause a value-version refusal r of it starts.
func pauseOf(it Item, r *syncproto.Result) PausedModel {
	return PausedModel{Model: it.Mutation.Model, Version: it.Mutation.EffectiveValueVersion(), Code: r.Code, Accepted: slices.Clone(r.AcceptedVersions)}
}

func (c *Core) pushRefused(in PushRefused, out []Action) []Action {
	items, ok := c.inFlight[in.Push]
	if !ok {
		return out
	}
	delete(c.inFlight, in.Push)
	c.status.Err = in.Err
	c.left += len(items)
	if in.Err.Retryable {
		if d := time.Duration(in.Err.RetryAfterMS) * time.Millisecond; d > c.retryHint {
			c.retryHint = d
		}
	} else {
		r := syncproto.Result{Status: syncproto.StatusRejected, Code: in.Err.Code, Message: in.Err.Message}
		for _, it := range items {
			r.OpID = it.Mutation.OpID
			out = append(out, Settle{Item: it, Verdict: Judge(&r, it.Attempts, c.cfg.MaxAttempts)})
		}
	}
	out = c.pull(out)
	return c.passEnd(out)
}

// passOver reports whether the current pass read the whole queue, every
// push of it was answered and no snapshot is loading: a Sync returns with
// the replica caught up, not before its snapshot is in.
func (c *Core) passOver() bool {
	return c.exhausted && c.read == 0 && len(c.inFlight) == 0 && !c.resyncing
}

// passEnd arms the retry timer once a pass is over and left items queued.
func (c *Core) passEnd(out []Action) []Action {
	if !c.passOver() || !c.welcomed {
		return out
	}
	if c.rerun {
		c.rerun = false
		c.startPass()
		return c.pull(out)
	}
	out = append(out, PassEnded{Syncs: c.syncs, Left: c.left})
	c.syncs = nil
	if c.left == 0 {
		c.failures = 0
		c.waiting = false
		c.status.Err = nil
		return out
	}
	c.failures++
	c.timer++
	c.left = 0
	c.waiting = true
	return append(out, SetTimer{Timer: c.timer, Failures: c.failures, Hint: c.retryHint})
}

func (c *Core) changes(in Changes, out []Action) []Action {
	if !c.welcomed || c.resyncing || in.Next < c.cursor || (in.Next == c.cursor && len(in.Evictions) == 0) {
		// Not subscribed, or already applied (a duplicate). A frame of
		// evictions alone (a subscription's first) need not move the cursor.
		return out
	}
	if in.From != c.cursor {
		// A gap: frames were lost or reordered. Ask again from the cursor.
		return append(out, c.subscribe())
	}
	c.cursor = in.Next
	a := Apply{Cursor: in.Next, Entries: in.Entries, Evictions: in.Evictions}
	if c.evict(in.Evictions) {
		s := c.durable()
		a.Scopes = &s
	}
	return append(out, a)
}

// settleState derives syncing/idle from the work in progress.
func (c *Core) settleState() {
	if !c.welcomed || c.closed {
		return
	}
	busy := c.read != 0 || len(c.inFlight) > 0 || !c.exhausted || c.resyncing || c.waiting
	switch {
	case busy:
		c.status.State = StateSyncing
	default:
		c.status.State = StateIdle
	}
}
