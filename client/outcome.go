package client

import (
	"sync"
	"time"

	"github.com/syncd-dev/syncd/syncproto"
)

// OutcomeStatus is the final fate of one write.
type OutcomeStatus string

const (
	// StatusApplied: the server applied the write; Version and Seq say where.
	StatusApplied OutcomeStatus = "applied"
	// StatusSuperseded: the write lost last-writer-wins to a newer one; the
	// Winner stands.
	StatusSuperseded OutcomeStatus = "superseded"
	// StatusConflict: the write's base version was stale; the Winner stands
	// and the conflict handler decided (RebasedAs names its rebased write).
	StatusConflict OutcomeStatus = "conflict"
	// StatusDeadLettered: the write will not be applied; Reason says why,
	// and the item waits in the queue's dead-letter store.
	StatusDeadLettered OutcomeStatus = "dead_lettered"
)

// Outcome is the durable, final answer for one write (op id). It is kept on
// the device, so it can be awaited or looked up after a restart.
type Outcome struct {
	OpID    string
	Status  OutcomeStatus
	Version uint64              // the record version the write produced (applied)
	Seq     uint64              // its oplog seq (applied)
	HLC     syncproto.Timestamp // its timestamp as applied
	// Winner is the state that stands when the write was superseded or
	// refused as a conflict.
	Winner *syncproto.Winner
	// Reason says why a write was dead-lettered ("code: message").
	Reason string
	// RebasedAs is the op id of the write the conflict handler made from
	// this one, if it rebased.
	RebasedAs string
	DecidedAt time.Time
}

// DefaultMaxAttempts is the retry budget of a write the server refuses:
// the attempt that reaches it dead-letters the write.
const DefaultMaxAttempts = 5

// handoffs carries outcomes from the driver, which records them, to the
// Await calls waiting for them, so that a waiting Await need not read back
// the row just committed. An Await registers (wait) before it reads the
// replica; the replica hands an outcome over (hand) only after the commit
// that recorded it, in the form a read of its row returns (stored). So an
// Await whose read found the write pending and undecided gets, through its
// handoff, the outcome of the first commit that recorded one for the op,
// which is the one its row keeps (outcomes are never overwritten). An
// outcome not handed over (a winner's, a dead letter's) wakes Await
// through Client.outcomes instead, and Await reads it. Safe for
// concurrent use.
type handoffs struct {
	mu sync.Mutex
	m  map[string]*handoff
}

// handoff is what the Await calls of one op wait on: o is set before ch
// closes.
type handoff struct {
	ch      chan struct{}
	o       Outcome
	waiters int
}

// wait registers an Await of opID; it must call leave when it returns.
func (h *handoffs) wait(opID string) *handoff {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.m[opID]
	if w == nil {
		if h.m == nil {
			h.m = map[string]*handoff{}
		}
		w = &handoff{ch: make(chan struct{})}
		h.m[opID] = w
	}
	w.waiters++
	return w
}

// leave unregisters an Await of opID that waited on w.
func (h *handoffs) leave(opID string, w *handoff) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m[opID] != w {
		return // handed over and removed
	}
	if w.waiters--; w.waiters == 0 {
		delete(h.m, opID)
	}
}

// hand gives the Awaits of o's op the outcome o, which the replica has
// committed.
func (h *handoffs) hand(o Outcome) {
	if o.Winner != nil {
		return // read back: its row keeps the winner as JSON
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.m[o.OpID]
	if w == nil {
		return
	}
	delete(h.m, o.OpID)
	w.o = o.stored()
	close(w.ch)
}

// handed returns the outcome handed over on w, if it was.
func (w *handoff) handed() (Outcome, bool) {
	select {
	case <-w.ch:
		return w.o, true
	default:
		return Outcome{}, false
	}
}

// stored is o as a read of its row returns it: the row keeps no timestamp
// and the decision time to the millisecond.
func (o Outcome) stored() Outcome {
	o.HLC = syncproto.Timestamp{}
	o.DecidedAt = time.UnixMilli(o.DecidedAt.UnixMilli())
	return o
}
