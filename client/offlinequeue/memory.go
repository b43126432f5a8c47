package offlinequeue

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
)

// Memory is a Queue held in process memory. It keeps the whole contract
// except durability: its contents end with Close or with the process. Use it
// in tests and wherever losing the backlog with the process is acceptable.
//
// Memory is safe for concurrent use. Enqueue, Peek, MarkDone and SetAttempts
// cost O(log n) in the number of pending items (amortized), plus the size of
// what they return: Peek copies only the page it returns. The dead-letter
// calls are linear in the number of dead letters.
type Memory struct {
	opts Options
	rec  recorder

	mu     sync.Mutex
	closed bool
	lastID ID
	// items holds pending items in ID order. MarkDone and MoveToDeadLetters
	// leave a tombstone (removed) so that removal from the middle costs no
	// copying; removeLocked drops the tombstones once they outnumber the
	// live items.
	items   []memItem
	live    int           // items not removed
	keys    map[string]ID // non-empty key -> ID of the pending item carrying it
	letters []DeadLetter  // in ID order
}

type memItem struct {
	Item
	removed bool
}

// NewMemory returns an empty in-memory queue. Its metrics carry the queue
// label "memory".
func NewMemory(opts Options) *Memory {
	q := &Memory{opts: opts.withDefaults(), rec: opts.Metrics.recorder("memory"), keys: map[string]ID{}}
	q.rec.setCounts(0, 0)
	return q
}

var _ Queue = (*Memory)(nil)

// lock checks ctx, then takes the lock of an open queue. On success the
// caller must unlock.
func (q *Memory) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// Enqueue implements Queue.
func (q *Memory) Enqueue(ctx context.Context, payload []byte, key string) (ID, error) {
	if err := q.opts.validateEnqueue(payload, key); err != nil {
		return 0, err
	}
	if err := q.lock(ctx); err != nil {
		return 0, err
	}
	defer q.mu.Unlock()
	if id, ok := q.keys[key]; ok && key != "" {
		return id, nil
	}
	if q.live >= q.opts.MaxDepth {
		q.rec.overflowed()
		return 0, &FullError{Depth: q.live, Capacity: q.opts.MaxDepth}
	}
	id := q.appendLocked(Item{Payload: slices.Clone(payload), Key: key, EnqueuedAt: q.opts.now()})
	q.publishLocked()
	return id, nil
}

// appendLocked gives it the next ID and appends it at the tail.
func (q *Memory) appendLocked(it Item) ID {
	q.lastID++
	it.ID = q.lastID
	q.items = append(q.items, memItem{Item: it})
	q.live++
	if it.Key != "" {
		q.keys[it.Key] = it.ID
	}
	return it.ID
}

// Peek implements Queue. A limit of zero or less returns no items.
func (q *Memory) Peek(ctx context.Context, after ID, limit int) ([]Item, error) {
	if err := q.lock(ctx); err != nil {
		return nil, err
	}
	defer q.mu.Unlock()
	if limit <= 0 {
		return nil, nil
	}
	start, found := slices.BinarySearchFunc(q.items, after, compareItem)
	if found {
		start++
	}
	var page []Item
	for _, m := range q.items[start:] {
		if len(page) == limit {
			break
		}
		if !m.removed {
			page = append(page, cloneItem(m.Item))
		}
	}
	return page, nil
}

// findLocked returns the index of the pending item id, or -1.
func (q *Memory) findLocked(id ID) int {
	i, ok := slices.BinarySearchFunc(q.items, id, compareItem)
	if !ok || q.items[i].removed {
		return -1
	}
	return i
}

// removeLocked tombstones the pending item at index i and releases its key.
func (q *Memory) removeLocked(i int) {
	m := &q.items[i]
	m.removed = true
	if m.Key != "" {
		delete(q.keys, m.Key)
	}
	m.Payload = nil
	q.live--
	if dead := len(q.items) - q.live; dead > 64 && dead > q.live {
		q.items = slices.DeleteFunc(q.items, func(m memItem) bool { return m.removed })
	}
}

// MarkDone implements Queue.
func (q *Memory) MarkDone(ctx context.Context, ids ...ID) error {
	if err := q.lock(ctx); err != nil {
		return err
	}
	defer q.mu.Unlock()
	for _, id := range ids {
		if i := q.findLocked(id); i >= 0 {
			q.removeLocked(i)
		}
	}
	q.publishLocked()
	return nil
}

// SetAttempts implements Queue.
func (q *Memory) SetAttempts(ctx context.Context, id ID, n Attempts) error {
	if err := q.lock(ctx); err != nil {
		return err
	}
	defer q.mu.Unlock()
	i := q.findLocked(id)
	if i < 0 {
		return ErrNotFound
	}
	q.items[i].Attempts = n
	return nil
}

// Len implements Queue.
func (q *Memory) Len(ctx context.Context) (int, error) {
	if err := q.lock(ctx); err != nil {
		return 0, err
	}
	defer q.mu.Unlock()
	return q.live, nil
}

// MaxDepth implements Queue.
func (q *Memory) MaxDepth() int { return q.opts.MaxDepth }

// Stats implements Queue.
func (q *Memory) Stats(ctx context.Context) (Stats, error) {
	if err := q.lock(ctx); err != nil {
		return Stats{}, err
	}
	defer q.mu.Unlock()
	return Stats{Pending: q.live, DeadLetters: len(q.letters), MaxDepth: q.opts.MaxDepth}, nil
}

func compareItem(m memItem, id ID) int      { return cmp.Compare(m.ID, id) }
func compareLetter(d DeadLetter, id ID) int { return cmp.Compare(d.ID, id) }

// MoveToDeadLetters implements Queue.
func (q *Memory) MoveToDeadLetters(ctx context.Context, id ID, reason string) error {
	return q.moveToDead(ctx, id, reason, nil)
}

// MoveToDeadLettersWith moves an item to the dead letters like
// MoveToDeadLetters and runs with just before, as File's
// MoveToDeadLettersWith does: under the queue's lock, so every call on the
// queue that begins once with's effects can be seen sees the item dead.
// An unknown ID is ErrNotFound and does not run with; an error from with
// moves nothing. with must not call the queue.
func (q *Memory) MoveToDeadLettersWith(ctx context.Context, id ID, reason string, with func(ctx context.Context) error) error {
	return q.moveToDead(ctx, id, reason, with)
}

// moveToDead is MoveToDeadLetters, and MoveToDeadLettersWith when with is
// not nil.
func (q *Memory) moveToDead(ctx context.Context, id ID, reason string, with func(ctx context.Context) error) error {
	if err := q.lock(ctx); err != nil {
		return err
	}
	defer q.mu.Unlock()
	i := q.findLocked(id)
	if i < 0 {
		return ErrNotFound
	}
	if with != nil {
		if err := with(ctx); err != nil {
			return fmt.Errorf("offlinequeue: move to dead letters: %w", err)
		}
	}
	d := DeadLetter{Item: q.items[i].Item, Reason: truncateReason(reason), DeadAt: q.opts.now()}
	q.removeLocked(i)
	// Evicted from the letters already there: the newest is never evicted.
	if over := len(q.letters) + 1 - q.opts.MaxDeadLetters; over > 0 {
		for _, gone := range longestDead(q.letters, over) {
			at, _ := slices.BinarySearchFunc(q.letters, gone, compareLetter)
			q.letters = slices.Delete(q.letters, at, at+1)
		}
		q.rec.evicted(over)
	}
	at, _ := slices.BinarySearchFunc(q.letters, id, compareLetter)
	q.letters = slices.Insert(q.letters, at, d)
	q.publishLocked()
	return nil
}

// DeadLetters implements Queue. A limit of zero or less returns no items.
func (q *Memory) DeadLetters(ctx context.Context, after ID, limit int) ([]DeadLetter, error) {
	if err := q.lock(ctx); err != nil {
		return nil, err
	}
	defer q.mu.Unlock()
	if limit <= 0 {
		return nil, nil
	}
	start, found := slices.BinarySearchFunc(q.letters, after, compareLetter)
	if found {
		start++
	}
	end := min(len(q.letters), start+limit)
	if start >= end {
		return nil, nil
	}
	page := slices.Clone(q.letters[start:end])
	for i := range page {
		page[i].Item = cloneItem(page[i].Item)
	}
	return page, nil
}

// Requeue implements Queue. Dead letters are requeued in ID order; of two
// dead letters with the same key, the older one is requeued and the younger
// one dropped. A requeued item's EnqueuedAt is the time of the requeue.
func (q *Memory) Requeue(ctx context.Context, ids ...ID) error {
	if err := q.lock(ctx); err != nil {
		return err
	}
	defer q.mu.Unlock()
	taken := q.takeLettersLocked(ids)
	now := q.opts.now()
	for _, d := range taken {
		if _, pending := q.keys[d.Key]; pending && d.Key != "" {
			continue
		}
		q.appendLocked(Item{Payload: d.Payload, Key: d.Key, EnqueuedAt: now})
	}
	q.publishLocked()
	return nil
}

// Purge implements Queue.
func (q *Memory) Purge(ctx context.Context, ids ...ID) error {
	if err := q.lock(ctx); err != nil {
		return err
	}
	defer q.mu.Unlock()
	q.takeLettersLocked(ids)
	q.publishLocked()
	return nil
}

// takeLettersLocked removes the dead letters named by ids and returns them in
// ID order. Unknown and repeated IDs are ignored.
func (q *Memory) takeLettersLocked(ids []ID) []DeadLetter {
	want := make(map[ID]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	var taken []DeadLetter
	q.letters = slices.DeleteFunc(q.letters, func(d DeadLetter) bool {
		if want[d.ID] {
			taken = append(taken, d)
			return true
		}
		return false
	})
	return taken
}

// Close implements Queue. It drops the queue's contents.
func (q *Memory) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.items, q.keys, q.letters = nil, nil, nil
	return nil
}

func (q *Memory) publishLocked() { q.rec.setCounts(q.live, len(q.letters)) }

// cloneItem returns it with a payload the caller may modify.
func cloneItem(it Item) Item {
	it.Payload = slices.Clone(it.Payload)
	return it
}
