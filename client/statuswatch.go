package client

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/client/synccore"
)

// StateClosed is the state WatchStatus reports last, once the Client is
// closed.
const StateClosed = synccore.StateClosed

// StatusRefreshInterval is how often, while anyone watches, the status is
// recomputed even if nothing announced a change: a backstop for changes
// that have no event of their own (the time of the last sync). Announced
// changes (network, connection, refusal, a write, an outcome) are
// delivered at once.
const StatusRefreshInterval = time.Second

// WatchStatus returns a channel that receives the client's Status: the
// current one at once, then every change of what it reports (state, last
// error, pending and dead-letter counts, cursor, last sync).
//
// Delivery coalesces and never blocks the client: the channel holds one
// Status, and a reader that falls behind finds the newest one, never a
// backlog. The channel receives a last Status with State StateClosed and
// is closed when the Client is closed; it is closed without one when ctx
// ends. On a closed Client it is closed at once.
func (c *Client) WatchStatus(ctx context.Context) <-chan Status {
	ch := make(chan Status, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		close(ch)
		return ch
	}
	if c.watch.add(ch) {
		c.wg.Go(c.runStatusWatch)
	}
	context.AfterFunc(ctx, func() { c.watch.remove(ch) })
	c.statusChanged()
	return ch
}

// statusChanged tells the status watchers that something Status reports
// may have changed. It never blocks.
func (c *Client) statusChanged() {
	select {
	case c.watch.poke <- struct{}{}:
	default:
	}
}

// runStatusWatch computes the status whenever it may have changed and
// hands it to the watchers; it ends when the client closes. It is started
// by the first WatchStatus and owned by c.wg.
func (c *Client) runStatusWatch() {
	tick := time.NewTicker(StatusRefreshInterval)
	defer tick.Stop()
	for {
		select {
		case <-c.ctx.Done():
			c.watch.close()
			return
		case <-c.watch.poke:
		case <-tick.C:
		}
		if !c.watch.watched() {
			continue
		}
		st, err := c.Status(c.ctx)
		if err != nil {
			if c.ctx.Err() == nil {
				c.log.Warn("status for watchers", "err", err)
			}
			continue
		}
		c.watch.publish(st)
	}
}

// statusHub fans statuses out to WatchStatus channels, newest wins.
type statusHub struct {
	poke chan struct{} // capacity 1: pending recomputation

	mu      sync.Mutex
	subs    map[chan Status]struct{}
	last    Status
	hasLast bool
	started bool // runStatusWatch was started
}

func newStatusHub() *statusHub { return &statusHub{poke: make(chan struct{}, 1)} }

// add registers ch and hands it the last status; it reports whether the
// watch goroutine must be started (the first add).
func (h *statusHub) add(ch chan Status) (start bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = map[chan Status]struct{}{}
	}
	h.subs[ch] = struct{}{}
	if h.hasLast {
		ch <- h.last
	}
	start = !h.started
	h.started = true
	return start
}

func (h *statusHub) remove(ch chan Status) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[ch]; ok {
		delete(h.subs, ch)
		close(ch)
	}
}

func (h *statusHub) watched() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs) > 0
}

// publish hands st to every watcher if it differs from the last one.
func (h *statusHub) publish(st Status) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hasLast && sameStatus(h.last, st) {
		return
	}
	h.last, h.hasLast = st, true
	for ch := range h.subs {
		offer(ch, st)
	}
}

// close hands every watcher a closed status and closes its channel.
func (h *statusHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	final := h.last
	final.State, final.Online, final.Connected = StateClosed, false, false
	for ch := range h.subs {
		offer(ch, final)
		delete(h.subs, ch)
		close(ch)
	}
}

// offer puts st in ch (capacity 1), replacing a status the reader has not
// taken yet. Only the hub sends, under its lock, so the second send finds
// room.
func offer(ch chan Status, st Status) {
	select {
	case <-ch:
	default:
	}
	ch <- st
}

// sameStatus compares statuses by what they say: a refusal repeated by each
// reconnect attempt is a new error value with the same text.
func sameStatus(a, b Status) bool {
	ea, eb := a.LastError, b.LastError
	if a.Online != b.Online || a.Connected != b.Connected || a.Pending != b.Pending || a.DeadLetters != b.DeadLetters ||
		!a.LastSync.Equal(b.LastSync) || a.Cursor != b.Cursor || a.DatabaseID != b.DatabaseID || a.State != b.State ||
		!slices.EqualFunc(a.Paused, b.Paused, samePause) || (ea == nil) != (eb == nil) {
		return false
	}
	return ea == nil || ea.Error() == eb.Error()
}

func samePause(a, b PausedModel) bool {
	return a.Model == b.Model && a.Version == b.Version && a.Code == b.Code && slices.Equal(a.Accepted, b.Accepted)
}
