package client

import (
	"slices"
	"sync"

	"github.com/syncd-dev/syncd/client/synccore"
)

// maxQueueTail and maxQueueTailBytes bound the writes a queueTail holds,
// in count and in payload bytes: past either (a client writing offline) it
// forgets them all, and the driver reads the queue until it has caught up
// with the writes queued since.
const (
	maxQueueTail      = 1024
	maxQueueTailBytes = 4 << 20
)

// queueTail holds the writes this client queued (fresh items of the queue,
// never charged an attempt) that the driver has not read yet, so it can
// answer the core's ReadQueue from memory instead of reading and decoding
// the queue: a Put hands its item over after its commit and before it
// wakes the driver (Client.kick).
//
// A read is answered only when the tail holds every id from its After on,
// up to its newest, without a gap: queue ids are assigned in commit order
// without gaps and the driver alone removes items, and only items it has
// read, so those are then exactly the queue's items after After, as a
// read would find them, but for writes committed and not yet handed over,
// which their Put announces afterwards (Enqueued) as it would for a write
// queued after the read. Items it answers with, or that a read went past,
// leave the tail, so it never answers with an item the driver may have
// removed since. Any other case (a gap: a write not handed over yet, or
// queued some other way; a pass starting again from the queue's head) is
// read from the queue. A write queued some other way (a requeued dead
// letter) is never handed over, and its wake-up may be the one a Put's
// merged into: it marks the tail (queuedElsewhere) so that the next read
// goes to the queue. Safe for concurrent use.
type queueTail struct {
	mu    sync.Mutex
	items []synccore.Item // ascending ids
	bytes int             // the items' payload bytes
	// read is the highest id the driver has read, from the queue or the
	// tail: an item handed over after the driver read it from the queue
	// (its Put was slow to hand it over) is not taken, so the tail never
	// answers with an item the driver may have settled or charged since.
	read uint64
	// readQueue sends the next read to the queue.
	readQueue bool
	// misses counts the reads page did not answer (the driver read the
	// queue instead); see missedSince.
	misses uint64
}

// add hands over a fresh item, committed or about to be; it returns the
// count of reads missed so far, for missedSince.
func (t *queueTail) add(it synccore.Item) (misses uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if it.ID <= t.read {
		return t.misses
	}
	if len(t.items) >= maxQueueTail || t.bytes+it.Size > maxQueueTailBytes {
		t.forget()
	}
	t.bytes += it.Size
	i, _ := slices.BinarySearchFunc(t.items, it.ID, func(x synccore.Item, id uint64) int {
		switch {
		case x.ID < id:
			return -1
		case x.ID > id:
			return 1
		}
		return 0
	})
	t.items = slices.Insert(t.items, i, it)
	return t.misses
}

// page answers a ReadQueue from memory, if it can (ok), and forgets the
// items it answers with and those at or before after.
func (t *queueTail) page(r synccore.ReadQueue) (page synccore.Page, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	defer func() {
		if !ok {
			t.misses++
		}
	}()
	stale := 0
	for stale < len(t.items) && t.items[stale].ID <= r.After {
		stale++
	}
	t.drop(stale)
	if t.readQueue {
		t.readQueue = false
		return synccore.Page{}, false
	}
	if r.Limit <= 0 || len(t.items) == 0 || t.items[0].ID != r.After+1 {
		return synccore.Page{}, false
	}
	for i := 1; i < len(t.items); i++ {
		if t.items[i].ID != t.items[i-1].ID+1 {
			return synccore.Page{}, false // a write not handed over yet
		}
	}
	n := min(len(t.items), r.Limit)
	page = synccore.Page{Read: r.Read, Items: slices.Clone(t.items[:n]), End: n < r.Limit}
	t.read = max(t.read, t.items[n-1].ID)
	t.drop(n)
	return page, true
}

// readFromQueue records that the driver read the queue up to id.
func (t *queueTail) readFromQueue(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.read = max(t.read, id)
}

// missedSince reports whether a read was not answered from the tail (it
// went to the queue) since add returned misses.
func (t *queueTail) missedSince(misses uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.misses != misses
}

// queuedElsewhere sends the next read to the queue: a write was queued
// without being handed over. Call it after that write's commit and before
// its wake-up.
func (t *queueTail) queuedElsewhere() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.readQueue = true
}

// drop forgets the first n items, clearing their slots so their values
// are not kept alive by the array. The caller holds mu.
func (t *queueTail) drop(n int) {
	for _, it := range t.items[:n] {
		t.bytes -= it.Size
	}
	t.items = slices.Delete(t.items, 0, n)
}

// forget drops every item. The caller holds mu.
func (t *queueTail) forget() {
	clear(t.items)
	t.items, t.bytes = t.items[:0], 0
}
