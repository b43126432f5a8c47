package client

import (
	"time"

	"github.com/syncd-dev/syncd/client/offlinequeue"
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

// verdict is what the sync worker does with one queued write after the
// server's answer (DESIGN 4.2). It is pure data, decided by judge.
type verdict struct {
	action   verdictAction
	outcome  Outcome               // done, conflict, dead letter
	attempts offlinequeue.Attempts // charge and dead letter: the new count
	reason   string                // dead letter
}

type verdictAction int

const (
	// markDone: delivered and decided; record the outcome, mark done.
	markDone verdictAction = iota + 1
	// handleConflict: ask the conflict handler, then as markDone.
	handleConflict
	// chargeAttempt: refused; persist the new attempt count, keep queued.
	chargeAttempt
	// deadLetter: will never apply; record, move to the dead-letter store.
	deadLetter
	// leaveQueued: not processed; charge nothing, resend later.
	leaveQueued
	// restamp: refused for clock skew; re-stamp from the corrected clock
	// and resend, charging nothing (a device clock is not the write's fault).
	restamp
)

// judge maps the server's result for a queued write to the worker's action.
// A rejected write is charged an attempt; the attempt that reaches
// maxAttempts dead-letters it with the server's reason.
func judge(r *syncproto.Result, attempts offlinequeue.Attempts, maxAttempts int, now time.Time) verdict {
	o := Outcome{OpID: r.OpID, Version: r.Version, Seq: r.Seq, HLC: r.HLC, Winner: r.Winner, DecidedAt: now}
	status := r.Status
	if status == syncproto.StatusDuplicate {
		status = r.OriginalStatus
	}
	if r.Status == syncproto.StatusRejected && r.Code == syncproto.CodeClockSkew {
		return verdict{action: restamp}
	}
	switch r.Action() {
	case syncproto.ActionDone:
		o.Status = OutcomeStatus(status)
		if status != syncproto.StatusSuperseded {
			o.Status = StatusApplied
		}
		return verdict{action: markDone, outcome: o}
	case syncproto.ActionConflict:
		o.Status = StatusConflict
		return verdict{action: handleConflict, outcome: o}
	case syncproto.ActionDeadLetter:
		return deadVerdict(o, string(r.Status)+": "+r.Message)
	case syncproto.ActionResend:
		return verdict{action: leaveQueued}
	}
	// A rejection names its code; a status newer than this client has none,
	// so the status itself is the reason's head.
	why := string(r.Code)
	if why == "" {
		why = string(r.Status)
	}
	reason := why + ": " + r.Message
	next := attempts + 1
	if int(next) < maxAttempts {
		return verdict{action: chargeAttempt, attempts: next, reason: reason}
	}
	v := deadVerdict(o, reason)
	v.attempts = next
	return v
}

func deadVerdict(o Outcome, reason string) verdict {
	o.Status, o.Reason = StatusDeadLettered, reason
	o.Version, o.Seq, o.Winner = 0, 0, nil
	return verdict{action: deadLetter, outcome: o, reason: reason}
}
