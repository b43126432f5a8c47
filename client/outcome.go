package client

import (
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
