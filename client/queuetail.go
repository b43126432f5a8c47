package client

import (
	"slices"
	"sync"

	"github.com/syncd-dev/syncd/client/synccore"
)

// maxQueueTail bounds the writes a queueTail holds: past it (a client
// writing offline) it forgets them all, and the driver reads the queue
// until it has caught up with the writes queued since.
const maxQueueTail = 1024

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
// read from the queue. Safe for concurrent use.
type queueTail struct {
	mu    sync.Mutex
	items []synccore.Item // ascending ids
}

// add hands over a fresh item, committed.
func (t *queueTail) add(it synccore.Item) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.items) >= maxQueueTail {
		t.items = t.items[:0]
	}
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
}

// page answers a ReadQueue from memory, if it can (ok), and forgets the
// items it answers with and those at or before after.
func (t *queueTail) page(r synccore.ReadQueue) (page synccore.Page, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	stale := 0
	for stale < len(t.items) && t.items[stale].ID <= r.After {
		stale++
	}
	t.items = t.items[stale:]
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
	t.items = t.items[n:]
	return page, true
}
