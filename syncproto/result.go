package syncproto

import (
	"encoding/json"
)

// Status is the server's decision on one pushed mutation.
type Status string

// Statuses. Action says what the client's queue does with each.
const (
	// StatusApplied: the write was applied; Version, Seq and HLC describe
	// the new record state.
	StatusApplied Status = "applied"
	// StatusDuplicate: the op id was decided before (a resend); the result
	// repeats the original decision, whose status is OriginalStatus.
	StatusDuplicate Status = "duplicate"
	// StatusSuperseded: the write lost last-writer-wins to a newer write,
	// described by Winner. It is kept in the server's conflict log only.
	StatusSuperseded Status = "superseded"
	// StatusConflict: the write's base_version is stale; Winner is the
	// current record.
	StatusConflict Status = "conflict"
	// StatusRejected: the write was refused; Code says why. Nothing was
	// recorded, so a resend is decided afresh.
	StatusRejected Status = "rejected"
	// StatusExpired: the op id is older than the replay ledger still covers,
	// so the server cannot tell whether it was applied; it is never applied
	// again.
	StatusExpired Status = "expired"
)

// Result is the answer for one mutation of a push, at the same index.
type Result struct {
	// OpID echoes the mutation's op id; "" when that op id was invalid.
	OpID   string `json:"op_id"`
	Status Status `json:"status"`
	// OriginalStatus is the first decision's status; duplicate only.
	OriginalStatus Status `json:"original_status,omitempty"`
	// Version is the record's version after the write (applied).
	Version uint64 `json:"version,omitempty"`
	// Seq is the oplog seq of the write (applied).
	Seq uint64 `json:"seq,omitempty"`
	// HLC is the hlc the write was applied with (applied).
	HLC Timestamp `json:"hlc,omitzero"`
	// Code is why the write was refused (rejected).
	Code Code `json:"code,omitempty"`
	// Message is for humans (rejected, expired).
	Message string `json:"message,omitempty"`
	// Winner is the record state the write lost to (superseded, conflict).
	Winner *Winner `json:"winner,omitempty"`
	// Upcast reports that an applied write was applied in its model's
	// current value shape, turned from the older value_version it was
	// sent in (applied only): the record's value is not the one sent, and
	// reaches the device by the change feed.
	Upcast bool `json:"upcast,omitempty"`
	// AcceptedVersions are the value versions the server accepts for the
	// write's model, ascending (rejected with CodeNeedsUpgrade only).
	AcceptedVersions []uint64 `json:"accepted_versions,omitempty"`
}

// Winner is the record state a losing write lost to.
type Winner struct {
	Version uint64 `json:"version"`
	// Value is the winner's value; absent when Deleted.
	Value   json.RawMessage `json:"value,omitempty"`
	HLC     Timestamp       `json:"hlc"`
	Deleted bool            `json:"deleted"`
	// ValueOmitted reports that the server left Value out so that the
	// push_result fits max_frame_bytes (EncodePushResult); Version, HLC
	// and Deleted are exact, and the winner is not deleted. A client that
	// needs the value resends the op alone: the replay ledger answers
	// duplicate with the whole winner, which always fits a frame.
	ValueOmitted bool `json:"value_omitted,omitempty"`
	// ValueWithheld reports that the winner's record has a scope value the
	// writer is not granted (PROTOCOL.md 19.2): Value is left out and will
	// not be sent on a resend either. Version, HLC and Deleted are exact.
	ValueWithheld bool `json:"value_withheld,omitempty"`
}

// isStatus reports whether s has the shape of every Status,
// ^[a-z][a-z0-9_]{0,31}$, including statuses newer than this package.
func isStatus(s Status) bool { return isLowerName(string(s), 31) }

// Validate checks that r carries the fields its status requires (see the
// Status constants). An unknown status is accepted when shaped like one, so
// an older client still reads a newer server's answers; Action treats it as
// a rejection.
func (r *Result) Validate() error {
	if r.OpID != "" {
		if err := ValidateOpID(r.OpID); err != nil {
			return err
		}
	}
	if !isStatus(r.Status) {
		return Errorf(CodeBadRequest, "status %q is not a status", truncate(string(r.Status)))
	}
	if len(r.Message) > MaxMessageBytes {
		return Errorf(CodeBadRequest, "message holds %d bytes, more than %d", len(r.Message), MaxMessageBytes)
	}
	if err := validateSeq("version", r.Version); err != nil {
		return err
	}
	if err := validateSeq("seq", r.Seq); err != nil {
		return err
	}
	if err := r.HLC.Validate(); err != nil {
		return err
	}
	if err := validateAccepted("accepted_versions", r.AcceptedVersions); err != nil {
		return err
	}
	if r.Winner != nil {
		if err := r.Winner.validate(); err != nil {
			return prefixed(err, "winner")
		}
	}
	decided := r.Status
	if r.Status == StatusDuplicate {
		switch r.OriginalStatus {
		case StatusApplied, StatusSuperseded, StatusConflict:
			decided = r.OriginalStatus
		default:
			return Errorf(CodeBadRequest, "duplicate: original_status %q is not applied, superseded or conflict", truncate(string(r.OriginalStatus)))
		}
	} else if r.OriginalStatus != "" {
		return Errorf(CodeBadRequest, "original_status on a %s result", r.Status)
	}
	switch decided {
	case StatusApplied:
		if r.OpID == "" || r.Version == 0 || r.Seq == 0 || r.HLC.IsZero() {
			return Errorf(CodeBadRequest, "applied needs op_id, version, seq and hlc")
		}
	case StatusSuperseded, StatusConflict:
		if r.OpID == "" || r.Winner == nil {
			return Errorf(CodeBadRequest, "%s needs op_id and winner", decided)
		}
	case StatusRejected:
		if !isCode(r.Code) {
			return Errorf(CodeBadRequest, "rejected needs a code, got %q", truncate(string(r.Code)))
		}
	}
	return nil
}

func (w *Winner) validate() error {
	if err := validateSeq("version", w.Version); err != nil {
		return err
	}
	if err := w.HLC.Validate(); err != nil {
		return err
	}
	if w.ValueOmitted || w.ValueWithheld {
		if w.Deleted || len(w.Value) != 0 {
			return Errorf(CodeBadRequest, "value_omitted and value_withheld are for a winner that is not deleted, without its value")
		}
	} else if w.Deleted == (len(w.Value) != 0) {
		return Errorf(CodeBadRequest, "value must be present unless deleted")
	}
	if len(w.Value) > MaxPayloadBytes {
		return Errorf(CodeBadRequest, "value holds %d bytes, more than %d", len(w.Value), MaxPayloadBytes)
	}
	return nil
}

// Action is what a client's queue does with a pushed mutation once it has
// an answer (PROTOCOL.md section 6).
type Action int

// Actions.
const (
	// ActionDone: delivered and decided; remove the item from the queue.
	ActionDone Action = iota + 1
	// ActionConflict: delivered and refused with a winner; hand the item to
	// the app's conflict handler, which rebases it under a new op id or drops
	// it.
	ActionConflict
	// ActionCharge: delivered and refused; charge one attempt and
	// dead-letter the item when the retry budget is spent.
	ActionCharge
	// ActionDeadLetter: will never be applied; dead-letter the item now.
	ActionDeadLetter
	// ActionResend: not processed; leave the item queued and charge nothing.
	ActionResend
	// ActionPause: not processed because the server does not accept the
	// write's value version (CodeNeedsUpgrade); leave it and every later
	// write of its model queued, charge nothing, and send none of them
	// until a welcome announces the version.
	ActionPause
)

var actionNames = [...]string{"", "done", "conflict", "charge", "dead_letter", "resend", "pause"}

// String returns the action's name, for logs.
func (a Action) String() string {
	if a < ActionDone || a > ActionPause {
		return "unknown"
	}
	return actionNames[a]
}

// Action returns what the client does with the mutation r answers:
//
//	applied, superseded           -> ActionDone
//	duplicate                     -> as OriginalStatus: done, or conflict when the
//	                                 original decision was a conflict the client never saw
//	conflict                      -> ActionConflict
//	rejected needs_upgrade,
//	upcast_failed                 -> ActionPause
//	rejected                      -> ActionCharge; ActionResend for
//	                                 hook_unavailable (nothing was decided or
//	                                 recorded: the model's hook is cut off)
//	expired                       -> ActionDeadLetter
//	anything else                 -> ActionCharge ("I don't know" is rejected)
func (r *Result) Action() Action {
	switch r.Status {
	case StatusApplied, StatusSuperseded:
		return ActionDone
	case StatusDuplicate:
		if r.OriginalStatus == StatusConflict {
			return ActionConflict
		}
		return ActionDone
	case StatusConflict:
		return ActionConflict
	case StatusExpired:
		return ActionDeadLetter
	case StatusRejected:
		if r.Code == CodeNeedsUpgrade || r.Code == CodeUpcastFailed {
			return ActionPause
		}
		if r.Code == CodeHookUnavailable {
			return ActionResend
		}
	}
	return ActionCharge
}

// Action returns what the client does with every mutation of a push that
// was answered by e instead of push_result: ActionResend when e is
// retryable (nothing was processed), else ActionCharge.
func (e *Error) Action() Action {
	if e.Retryable {
		return ActionResend
	}
	return ActionCharge
}

// Change is one change-feed entry: an applied write.
type Change struct {
	Seq   uint64 `json:"seq"`
	OpID  string `json:"op_id"`
	Model string `json:"model"`
	Key   string `json:"key"`
	Op    Op     `json:"op"`
	// Value is the record's value after a put; absent after a delete.
	Value   json.RawMessage `json:"value,omitempty"`
	Version uint64          `json:"version"`
	HLC     Timestamp       `json:"hlc"`
	// Deleted is true exactly when Op is delete.
	Deleted bool `json:"deleted"`
	// ScopeValue, for a record of a scoped model, is its scope value after
	// the write (PROTOCOL.md section 19); absent otherwise and on evict.
	ScopeValue string `json:"scope_value,omitempty"`
	// Reason, on an evict entry only, says why the row leaves: EvictMoved.
	Reason string `json:"reason,omitempty"`
}

// Validate checks every field of c.
func (c *Change) Validate() error {
	if c.Seq == 0 {
		return Errorf(CodeBadRequest, "seq must be positive")
	}
	if err := validateSeq("seq", c.Seq); err != nil {
		return err
	}
	if err := ValidateOpID(c.OpID); err != nil {
		return err
	}
	if err := ValidateModel(c.Model); err != nil {
		return err
	}
	if err := ValidateKey(c.Key); err != nil {
		return err
	}
	switch {
	case c.Op == OpEvict:
		if c.Deleted || len(c.Value) != 0 || c.ScopeValue != "" || c.Reason != EvictMoved {
			return Errorf(CodeInvalidOp, "an evict entry carries no value, scope_value or deleted, and reason %q", EvictMoved)
		}
	case c.Op != OpPut && c.Op != OpDelete:
		return Errorf(CodeInvalidOp, "op %q is not put, delete or evict", truncate(string(c.Op)))
	case c.Deleted != (c.Op == OpDelete) || c.Deleted == (len(c.Value) != 0):
		return Errorf(CodeInvalidOp, "deleted must be true exactly for delete, which carries no value")
	case c.Reason != "":
		return Errorf(CodeInvalidOp, "only an evict entry carries a reason")
	case c.ScopeValue != "":
		if err := ValidateScopeValue(c.ScopeValue); err != nil {
			return err
		}
	}
	if len(c.Value) > MaxPayloadBytes {
		return Errorf(CodePayloadTooLarge, "value holds %d bytes, more than %d", len(c.Value), MaxPayloadBytes)
	}
	if c.Version == 0 {
		return Errorf(CodeBadRequest, "version must be positive")
	}
	if err := validateSeq("version", c.Version); err != nil {
		return err
	}
	return validateStamp("hlc", c.HLC)
}
