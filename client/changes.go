package client

import (
	"encoding/json"
	"sync"

	"github.com/syncd-dev/syncd/syncproto"
)

// ChangeEvent says a record changed in the local replica.
type ChangeEvent struct {
	Model   string
	Key     string
	Version uint64 // server version; 0 for a local pending write
	// Value is the record's value after the change (the JSON document),
	// so an app can render it without reading it back; nil for a delete.
	Value   json.RawMessage
	Deleted bool
	// Local is true for this device's own write (pending), false for a
	// change that came from the server's feed.
	Local bool
	// Resync is true when the whole replica was replaced by a snapshot:
	// re-read everything.
	Resync bool
	// Lagged is true when the subscriber fell behind and events were
	// dropped: re-read what it shows.
	Lagged bool
	// Evicted, when not empty, says the row left the replica because this
	// device no longer follows its scope value (PROTOCOL.md 19.5), and
	// why: moved (its scope value changed to one not followed), revoked,
	// unsubscribed or not_granted. Deleted is true with it: Get says not
	// found. The row is not deleted on the server.
	Evicted string
	// At is the server's oplog seq at which the change was read, so an
	// app can tell what the server's state was when it sent it: a feed
	// entry's own seq (for an eviction moved, the seq of the write that
	// moved the row); a backfill row's page `at` (the records were read
	// at that seq; PROTOCOL.md 19.4); for an eviction of a whole value
	// (revoked, unsubscribed, not_granted) the cursor of the changes
	// frame that carried it; for Resync the snapshot's head. 0 for a
	// local write and for Lagged.
	At uint64
	// ScopeValue is the row's scope value (PROTOCOL.md 19) in a model a
	// scope covers: after the change for a feed or backfill entry (for a
	// delete, the value the row had), and the value the row had for an
	// eviction. "" in models no scope covers and for local writes.
	ScopeValue string
}

// feedEvent is the event of a feed or backfill entry applied, read by
// the server at seq at.
func feedEvent(e *syncproto.Change, at uint64) ChangeEvent {
	ev := ChangeEvent{Model: e.Model, Key: e.Key, Version: e.Version, Deleted: e.Deleted, At: at, ScopeValue: e.ScopeValue}
	if !e.Deleted {
		ev.Value = e.Value
	}
	return ev
}

// publishEvicted tells subscribers of the rows evictions dropped.
func (c *Client) publishEvicted(rows []evicted) {
	for _, r := range rows {
		c.metrics.evictedRows.WithLabelValues(r.reason).Inc()
		c.changes.publish(ChangeEvent{Model: r.model, Key: r.key, Deleted: true, Evicted: r.reason, At: r.at, ScopeValue: r.scopeValue})
	}
}

// changeBuffer bounds the events waiting for one subscriber (Subscription.C's
// doc says the number).
const changeBuffer = 256

// Subscription delivers change events until Close.
type Subscription struct {
	// C receives the events. A subscriber that falls more than 256
	// events behind gets one event with Lagged set instead of the ones it
	// missed: the feed never waits for a slow app.
	C    <-chan ChangeEvent
	hub  *changeHub
	sub  *subscriber
	once sync.Once
}

// Close ends the subscription and closes C. Closing the Client closes
// every subscription's C too, so `for ev := range sub.C` ends.
func (s *Subscription) Close() { s.once.Do(func() { s.hub.remove(s.sub) }) }

// Changes subscribes to changes of the local replica: this device's writes
// as they are made, and the server's as the feed applies them. On a closed
// Client, C is closed at once.
func (c *Client) Changes() *Subscription {
	sub := &subscriber{ch: make(chan ChangeEvent, changeBuffer)}
	c.changes.add(sub)
	return &Subscription{C: sub.ch, hub: &c.changes, sub: sub}
}

type subscriber struct {
	ch     chan ChangeEvent
	lagged bool
}

// changeHub fans events out to subscribers without ever blocking.
type changeHub struct {
	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	closed bool
}

func (h *changeHub) add(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(s.ch)
		return
	}
	if h.subs == nil {
		h.subs = map[*subscriber]struct{}{}
	}
	h.subs[s] = struct{}{}
}

func (h *changeHub) remove(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; ok {
		delete(h.subs, s)
		close(s.ch)
	}
}

// close closes every subscriber's channel and every later one's at once.
func (h *changeHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.subs {
		delete(h.subs, s)
		close(s.ch)
	}
}

func (h *changeHub) publish(ev ChangeEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if s.lagged {
			select {
			case s.ch <- ChangeEvent{Lagged: true}:
				s.lagged = false
			default:
				continue
			}
		}
		select {
		case s.ch <- ev:
		default:
			s.lagged = true
		}
	}
}

// broadcast wakes every waiter at once: waiter returns a channel that is
// closed by the next wake.
type broadcast struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *broadcast) waiter() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *broadcast) wake() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}
