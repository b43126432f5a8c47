package offlinequeue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ID identifies an item within one queue. IDs increase with insertion and are
// never reused by a durable queue, not even after the item is done and the
// queue has been compacted and reopened. An ID means nothing outside its queue:
// the idempotency key is what identifies an operation across devices and restarts.
type ID uint64

// Attempts is a durable count of delivered-but-refused replays of one item.
// It is a distinct type so that SetAttempts(id, n) cannot be called with its
// arguments swapped: an ID does not convert to Attempts without a visible cast.
type Attempts uint32

// Item is one pending entry of a queue.
type Item struct {
	ID         ID
	Payload    []byte   // opaque to the queue; never empty
	Key        string   // idempotency key; empty means "no key, never dedup"
	Attempts   Attempts // durable count, see SetAttempts
	EnqueuedAt time.Time
}

// DeadLetter is an item moved out of the pending queue because it cannot be
// delivered. It keeps the item's last ID, payload, key and attempts.
type DeadLetter struct {
	Item
	Reason string    // why it was dead-lettered, as given to MoveToDeadLetters
	DeadAt time.Time // when it was moved
}

// Stats is a snapshot of a queue's counts.
type Stats struct {
	Pending     int // items waiting to be delivered
	DeadLetters int // items in the dead-letter store
	MaxDepth    int // capacity of the pending queue in force (DefaultMaxDepth unless configured)
}

// Queue is a durable FIFO of mutations waiting for delivery, with a
// dead-letter store beside it. Every implementation is safe for concurrent use.
//
// Durability: for a durable implementation, a mutating call that returned nil
// is durable (it survives a process crash and, with the default settings, a
// power cut). A call that returned an error did not happen: nothing of it is
// visible now or after a reopen. The one exception is ErrPoisoned, which says
// the handle can no longer promise either and must be reopened.
//
// Context: ctx is checked before a call starts. Once a mutation has been handed
// to storage it runs to completion, so its error never means "perhaps".
type Queue interface {
	// Enqueue appends payload with an optional idempotency key and returns its
	// ID. A non-empty key already carried by a pending item is a dedup hit:
	// nothing is written and the pending item's ID is returned, even when the
	// queue is full. An empty key never dedups. The key is released when its
	// item is marked done or dead-lettered.
	// Errors: ErrEmptyPayload, *TooLargeError, *FullError, ErrClosed, ErrPoisoned.
	Enqueue(ctx context.Context, payload []byte, key string) (ID, error)

	// Peek returns up to limit pending items with ID greater than after, in
	// enqueue order, without removing them. Page through a queue of any size
	// by passing the last ID of the previous page; after=0 starts at the head.
	// A limit of zero or less returns no items.
	Peek(ctx context.Context, after ID, limit int) ([]Item, error)

	// MarkDone removes delivered items. Unknown or already-done IDs are
	// ignored, so a repeated MarkDone is harmless.
	MarkDone(ctx context.Context, ids ...ID) error

	// SetAttempts durably records the attempt count of a pending item.
	// An unknown ID is ErrNotFound, never a silent no-op: a lost attempt
	// count would let a poison item replay forever.
	SetAttempts(ctx context.Context, id ID, n Attempts) error

	// Len returns the number of pending items.
	Len(ctx context.Context) (int, error)

	// MaxDepth returns the capacity in force: the configured one, or
	// DefaultMaxDepth.
	MaxDepth() int

	// Stats returns pending and dead-letter counts.
	Stats(ctx context.Context) (Stats, error)

	// MoveToDeadLetters moves a pending item to the dead-letter store with a
	// reason, atomically: the item is either pending or dead, never both or
	// neither. An unknown ID is ErrNotFound. If the store then holds more
	// than MaxDeadLetters, the longest-dead letters are evicted in the same
	// write (see Options.MaxDeadLetters).
	MoveToDeadLetters(ctx context.Context, id ID, reason string) error

	// DeadLetters returns up to limit dead letters with ID greater than
	// after, in ID order. A limit of zero or less returns no items.
	DeadLetters(ctx context.Context, after ID, limit int) ([]DeadLetter, error)

	// Requeue moves dead letters back to the tail of the pending queue with
	// their attempts reset to zero; each gets a new ID. A dead letter whose
	// key is pending again is dropped instead (the pending item already
	// carries the operation). Unknown IDs are ignored. Requeue is atomic per
	// call and is not bounded by MaxDepth: requeueing is an operator's
	// decision, and refusing it halfway would split the batch.
	Requeue(ctx context.Context, ids ...ID) error

	// Purge deletes dead letters for good. Unknown IDs are ignored.
	Purge(ctx context.Context, ids ...ID) error

	// Close releases the queue. It is idempotent; every later call returns
	// ErrClosed.
	Close() error
}

// Named limits. Options may lower them; a zero Options field means the default.
const (
	// DefaultMaxDepth is the pending items a queue holds when
	// Options.MaxDepth is 0. At about 200 bytes a write it is some 20 MB of
	// queue, and several minutes of replay once the device is online.
	DefaultMaxDepth = 100_000
	// DefaultMaxDeadLetters is the dead letters a queue keeps when
	// Options.MaxDeadLetters is 0.
	DefaultMaxDeadLetters = 10_000
	// DefaultMaxPayloadBytes is the largest payload Enqueue accepts by default.
	DefaultMaxPayloadBytes = 1 << 20
	// MaxKeyBytes is the longest idempotency key Enqueue accepts.
	MaxKeyBytes = 256
	// MaxReasonBytes is the longest dead-letter reason kept; longer reasons
	// are truncated (at a UTF-8 boundary), not refused, so a dead letter is
	// never lost for the length of its explanation.
	MaxReasonBytes = 1024
)

var (
	// ErrClosed is returned by every call on a closed queue. Nothing happened.
	ErrClosed = errors.New("offlinequeue: queue closed")
	// ErrEmptyPayload refuses an empty payload. Nothing was written.
	ErrEmptyPayload = errors.New("offlinequeue: empty payload")
	// ErrKeyTooLong refuses a key longer than MaxKeyBytes. Nothing was written.
	ErrKeyTooLong = fmt.Errorf("offlinequeue: idempotency key longer than %d bytes", MaxKeyBytes)
	// ErrNotFound says the ID names no pending item (or no dead letter).
	ErrNotFound = errors.New("offlinequeue: no such item")
	// ErrFull matches every *FullError (errors.Is).
	ErrFull = errors.New("offlinequeue: queue full")
	// ErrTooLarge matches every *TooLargeError (errors.Is).
	ErrTooLarge = errors.New("offlinequeue: payload too large")
	// ErrPoisoned says a failed write could not be rolled back, so the
	// handle refuses every later write. Reopen the queue: opening heals the
	// torn record, and an operation whose call failed is not present.
	ErrPoisoned = errors.New("offlinequeue: handle poisoned by a failed rollback; reopen the queue")
)

// FullError is returned by Enqueue when a bounded queue holds MaxDepth items.
// The newest item is refused; nothing is ever evicted.
type FullError struct {
	Depth    int // pending items at the time of the refusal
	Capacity int // the configured MaxDepth
}

func (e *FullError) Error() string {
	return fmt.Sprintf("offlinequeue: queue full (%d of %d items)", e.Depth, e.Capacity)
}

// Is makes errors.Is(err, ErrFull) true.
func (e *FullError) Is(target error) bool { return target == ErrFull }

// TooLargeError is returned by Enqueue for a payload over the limit.
type TooLargeError struct {
	Size  int // payload bytes offered
	Limit int // the configured maximum
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("offlinequeue: payload of %d bytes exceeds the limit of %d", e.Size, e.Limit)
}

// Is makes errors.Is(err, ErrTooLarge) true.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// Options configure a queue. The zero value means the defaults.
type Options struct {
	// MaxDepth bounds the pending queue: an Enqueue that would make it
	// deeper is refused with *FullError. 0 means DefaultMaxDepth; a negative
	// value is refused by the durable queues. There is no unbounded queue:
	// a device that stays offline long enough fills any disk. It is not
	// stored on disk: pass the same value on every open.
	MaxDepth int
	// MaxDeadLetters bounds the dead-letter store. A MoveToDeadLetters that
	// would exceed it evicts, in the same durable write, the dead letters
	// that have been dead longest (oldest DeadAt, then lowest ID; never the
	// one it adds, whatever the clock did), counted
	// by syncd_client_queue_dead_letters_evicted_total. 0 means
	// DefaultMaxDeadLetters; a negative value is refused by the durable
	// queues. Requeue and Purge are how an operator keeps below it.
	MaxDeadLetters int
	// MaxPayloadBytes bounds one payload; 0 means DefaultMaxPayloadBytes.
	MaxPayloadBytes int
	// Now is the clock for EnqueuedAt and DeadAt; nil means time.Now.
	Now func() time.Time
	// Metrics, when non-nil, receives depth and overflow updates.
	Metrics *Metrics
	// UnsyncedWindow bounds how long a write made without its own sync
	// (MarkDoneUnsynced of the durable queues) may stay exposed to a power
	// cut: the queue's next synced write makes it durable, and if none
	// comes within the window the queue syncs it itself. 0 means
	// DefaultUnsyncedWindow; a negative value is refused by the durable
	// queues.
	UnsyncedWindow time.Duration
}

// DefaultUnsyncedWindow is Options.UnsyncedWindow's default: a write made
// by MarkDoneUnsynced is durable at most this long after it returned (on a
// device writing steadily, at its next enqueue).
const DefaultUnsyncedWindow = 100 * time.Millisecond

// validateEnqueue checks an Enqueue's arguments against the limits.
func (o Options) validateEnqueue(payload []byte, key string) error {
	if len(payload) == 0 {
		return ErrEmptyPayload
	}
	if limit := o.maxPayload(); len(payload) > limit {
		return &TooLargeError{Size: len(payload), Limit: limit}
	}
	if len(key) > MaxKeyBytes {
		return ErrKeyTooLong
	}
	return nil
}

// withDefaults returns o with its zero limits replaced by their defaults,
// so that every implementation reads the limits in force from one place.
func (o Options) withDefaults() Options {
	if o.MaxDepth <= 0 {
		o.MaxDepth = DefaultMaxDepth
	}
	if o.UnsyncedWindow <= 0 {
		o.UnsyncedWindow = DefaultUnsyncedWindow
	}
	if o.MaxDeadLetters <= 0 {
		o.MaxDeadLetters = DefaultMaxDeadLetters
	}
	return o
}

// longestDead returns the IDs of the n letters dead longest: oldest DeadAt
// first, then lowest ID. letters is not modified.
func longestDead(letters []DeadLetter, n int) []ID {
	order := slices.Clone(letters)
	slices.SortFunc(order, func(a, b DeadLetter) int {
		if c := a.DeadAt.Compare(b.DeadAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	ids := make([]ID, 0, n)
	for _, d := range order[:min(n, len(order))] {
		ids = append(ids, d.ID)
	}
	return ids
}

// checkLimits refuses negative limits, for the durable queues' open.
func (o Options) checkLimits() error {
	if o.MaxDepth < 0 || o.MaxDeadLetters < 0 || o.MaxPayloadBytes < 0 || o.UnsyncedWindow < 0 {
		return fmt.Errorf("offlinequeue: negative limit (MaxDepth %d, MaxDeadLetters %d, MaxPayloadBytes %d, UnsyncedWindow %v)", o.MaxDepth, o.MaxDeadLetters, o.MaxPayloadBytes, o.UnsyncedWindow)
	}
	return nil
}

func (o Options) maxPayload() int {
	if o.MaxPayloadBytes > 0 {
		return o.MaxPayloadBytes
	}
	return DefaultMaxPayloadBytes
}

func (o Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// truncateReason caps a dead-letter reason at MaxReasonBytes on a rune boundary.
func truncateReason(reason string) string {
	if len(reason) <= MaxReasonBytes {
		return reason
	}
	cut := MaxReasonBytes
	for cut > 0 && !utf8RuneStart(reason[cut]) {
		cut--
	}
	return reason[:cut]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
