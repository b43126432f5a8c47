package synccore

import "github.com/syncd-dev/syncd/syncproto"

// VerdictAction is what the driver does with one answered item.
type VerdictAction int

// Verdict actions: what the driver does with each server answer.
const (
	// Done: delivered and decided; record Outcome, then mark the item done.
	Done VerdictAction = iota + 1
	// Conflict: refused with a winner; hand to the conflict handler, then
	// as Done.
	Conflict
	// Charge: refused transiently; persist Attempts, keep the item queued.
	Charge
	// DeadLetter: will never apply; record Outcome, persist Attempts, move
	// the item to the dead-letter store with Reason.
	DeadLetter
	// Left: not processed; keep the item queued, charge nothing.
	Left
	// Restamp: refused for clock skew; keep queued uncharged, re-stamp from
	// the corrected clock before it is sent again.
	Restamp
	// Pause: refused for its value version (needs_upgrade, upcast_failed);
	// keep it queued uncharged. Its model is paused (Status.Paused): none
	// of its writes is sent until a welcome accepts the version. Never a
	// dead letter: an upgrade on either side makes it applicable.
	Pause
)

// Verdict is the decision about one answered item.
type Verdict struct {
	Action   VerdictAction
	Status   syncproto.Status // the decided status: applied, superseded, conflict (Done, Conflict)
	Attempts int              // Charge and DeadLetter: the new count (each refusal charges one)
	Reason   string           // Charge and DeadLetter: "code: message"
	Result   syncproto.Result // the server's answer
}

// Permanent reports whether a refusal with code can never succeed on a
// resend of the same write, so the write is dead-lettered at once instead
// of charged: the model is unknown or forbidden, the write is malformed,
// its op id was used for another write, or its scope value is one the
// writer is not granted or not a valid one (PROTOCOL.md 19.2).
func Permanent(code syncproto.Code) bool {
	switch code {
	case syncproto.CodeForbiddenModel, syncproto.CodeInvalidModel, syncproto.CodeMissingBaseVersion,
		syncproto.CodeOpIDReused, syncproto.CodeInvalidKey, syncproto.CodeInvalidOp,
		syncproto.CodeInvalidOpID, syncproto.CodePayloadTooLarge, syncproto.CodeMalformed,
		syncproto.CodeForbiddenScope, syncproto.CodeInvalidScopeValue:
		return true
	}
	return false
}

// Judge maps the server's answer r for a write already charged attempts
// times to its verdict. Every refusal charges one attempt, so a dead
// letter counts the answers that refused it. A transient refusal is
// charged an attempt and the
// attempt that reaches maxAttempts dead-letters the write; a permanent one
// (see Permanent) dead-letters it at once; a clock-skew refusal is
// re-stamped, never charged.
func Judge(r *syncproto.Result, attempts, maxAttempts int) Verdict {
	v := Verdict{Result: *r}
	if r.Status == syncproto.StatusRejected && r.Code == syncproto.CodeClockSkew {
		v.Action = Restamp
		return v
	}
	switch r.Action() {
	case syncproto.ActionDone:
		v.Action, v.Status = Done, r.Status
		if r.Status == syncproto.StatusDuplicate {
			v.Status = r.OriginalStatus
		}
		if v.Status != syncproto.StatusSuperseded {
			v.Status = syncproto.StatusApplied
		}
		return v
	case syncproto.ActionConflict:
		v.Action, v.Status = Conflict, syncproto.StatusConflict
		return v
	case syncproto.ActionDeadLetter:
		v.Action, v.Reason, v.Attempts = DeadLetter, string(r.Status)+": "+r.Message, attempts+1
		return v
	case syncproto.ActionResend:
		v.Action = Left
		return v
	case syncproto.ActionPause:
		v.Action, v.Reason = Pause, string(r.Code)+": "+r.Message
		return v
	}
	why := string(r.Code)
	if why == "" {
		why = string(r.Status)
	}
	v.Reason = why + ": " + r.Message
	v.Attempts = attempts + 1
	if v.Attempts < maxAttempts && !Permanent(r.Code) {
		v.Action = Charge
		return v
	}
	v.Action = DeadLetter
	return v
}
