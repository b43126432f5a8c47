package replication

import (
	"errors"
	"fmt"

	"github.com/syncd-dev/syncd/syncproto"
)

// Outcome is what a policy decided about one proposal.
type Outcome string

// The outcomes.
const (
	// OutcomeApplied: the proposal becomes the key's new state
	// (Decision.Record). The caller logs it and stores it.
	OutcomeApplied Outcome = "applied"
	// OutcomeSuperseded: the proposal lost to a newer write under last-writer
	// wins (Decision.Winner). It was delivered and decided; nothing changes.
	OutcomeSuperseded Outcome = "superseded"
	// OutcomeConflict: the proposal was refused (a stale base version, or a
	// hook rejected it); the client gets Decision.Winner to rebase on.
	OutcomeConflict Outcome = "conflict"
)

// Reasons recorded in Decision.Reason and in conflict-log rows by the
// built-in policies. A hook's own reasons are prefixed with ReasonHookReject.
const (
	// ReasonOlderHLC: under LWW the incoming write's HLC was not higher than
	// the current record's.
	ReasonOlderHLC = "hlc not newer than current"
	// ReasonUnseenOverwrite: under LWW the incoming write won over a
	// version its writer had not seen (Proposal.SeenVersion); the state it
	// overwrote is the loser.
	ReasonUnseenOverwrite = "overwrote a version the writer had not seen"
	// ReasonStaleBase: the incoming write's base version was not the current
	// version, so the conditional write is refused, under every policy.
	ReasonStaleBase = "stale base version"
	// ReasonHookReject prefixes the reason a hook gave for rejecting.
	ReasonHookReject = "hook rejected"
	// ReasonHookMerge: the hook merged the incoming value with the current
	// one; the loser row keeps the value as it was proposed.
	ReasonHookMerge = "hook merged"
)

// ErrBaseVersionRequired is wrapped by Resolve when a model under
// syncproto.PolicyOptimistic receives a proposal without a base version. Nothing was
// applied; the client must resend with the version it based the write on
// (0 to create).
var ErrBaseVersionRequired = errors.New("base version required")

// Side is one party to a conflict: the proposal that lost, or the state that
// won. Version is 0 for a proposal that was never applied.
type Side struct {
	OpID    string
	Version uint64
	Value   []byte
	HLC     syncproto.Timestamp
	Deleted bool
}

// Decision is the result of resolving one proposal against the current
// record. It is pure data: the caller performs it (see the package manual).
type Decision struct {
	Outcome Outcome
	// Policy is the policy that decided: the model's policy, or syncproto.PolicyLWW
	// when a hook could not decide (then Fallback says why).
	Policy syncproto.Policy
	// Record is the key's new state when Outcome is OutcomeApplied; its
	// Version is exactly one more than the current record's (1 when absent)
	// and its Seq is 0 until the caller logs it.
	Record Record
	// Winner is the state that stands when the proposal was not applied: the
	// current record, or a zero Record (Version 0) when the key is absent
	// (an optimistic write based on a version the key never had, or a
	// create a hook rejected).
	Winner Record
	// Conflict is the conflict-log row this decision calls for, or nil. Its
	// ID and DecidedAt are filled by ConflictLog.Insert.
	Conflict *ConflictEntry
	// Reason says in words why the proposal was not applied as sent (one of
	// the Reason constants, or a hook's reason); "" for a plain apply.
	Reason string
	// Fallback is set when the model's policy is syncproto.PolicyHook and the hook
	// failed to decide, so syncproto.PolicyLWW decided instead; "" otherwise.
	Fallback FallbackReason
}

// Resolve decides p against the current record under one of the built-in
// policies, syncproto.PolicyLWW or syncproto.PolicyOptimistic. It is pure: no I/O, no clock.
// exists reports whether the key has a record (a tombstone counts); when it
// is false current is ignored.
//
// syncproto.PolicyHook needs the embedder's hook; use Resolver. Errors wrap
// ErrInvalidProposal, ErrBaseVersionRequired, ErrNoHook or ErrUnknownPolicy;
// in every error case nothing is to be applied.
func Resolve(policy syncproto.Policy, current Record, exists bool, p Proposal) (Decision, error) {
	if err := p.validate(); err != nil {
		return Decision{}, err
	}
	if !exists {
		current = Record{}
	}
	switch policy {
	case syncproto.PolicyLWW:
		return resolveLWW(current, exists, p), nil
	case syncproto.PolicyOptimistic:
		return resolveOptimistic(current, p)
	case syncproto.PolicyHook:
		return Decision{}, fmt.Errorf("resolve %s/%s: %w: use a Resolver with a Hook", p.Model, p.Key, ErrNoHook)
	}
	return Decision{}, fmt.Errorf("resolve %s/%s: %w: %q", p.Model, p.Key, ErrUnknownPolicy, policy)
}

// resolveLWW: the higher HLC wins; on equal timestamps the current record
// stands, so a write stamped twice can never flap a key.
func resolveLWW(current Record, exists bool, p Proposal) Decision {
	// A write that names the version it was made over is conditional under
	// every policy (PROTOCOL.md, section 8): a stale base is a conflict,
	// whatever its timestamp, and goes to the client's conflict handler.
	if p.BaseVersion != nil && *p.BaseVersion != current.Version {
		return staleBase(syncproto.PolicyLWW, current, p)
	}
	if exists && p.HLC.Compare(current.HLC) <= 0 {
		return Decision{
			Outcome:  OutcomeSuperseded,
			Policy:   syncproto.PolicyLWW,
			Winner:   current,
			Reason:   ReasonOlderHLC,
			Conflict: newConflict(p, syncproto.PolicyLWW, ReasonOlderHLC, p.side(), current.side()),
		}
	}
	d := Decision{Outcome: OutcomeApplied, Policy: syncproto.PolicyLWW, Record: p.record(current.Version)}
	if exists && p.SeenVersion != nil && *p.SeenVersion < current.Version {
		// A race the writer was not part of: log the state it overwrote,
		// so both sides of an LWW race reach the conflict log.
		d.Reason = ReasonUnseenOverwrite
		d.Conflict = newConflict(p, syncproto.PolicyLWW, ReasonUnseenOverwrite, current.side(), d.Record.side())
	}
	return d
}

// staleBase refuses a conditional write whose base version is not the
// current one; the current record is the winner.
func staleBase(policy syncproto.Policy, current Record, p Proposal) Decision {
	return Decision{
		Outcome:  OutcomeConflict,
		Policy:   policy,
		Winner:   current,
		Reason:   ReasonStaleBase,
		Conflict: newConflict(p, policy, ReasonStaleBase, p.side(), current.side()),
	}
}

// resolveOptimistic: applied only when the base version is the current
// version (0 for an absent key; a tombstone has its own version).
func resolveOptimistic(current Record, p Proposal) (Decision, error) {
	if p.BaseVersion == nil {
		return Decision{}, fmt.Errorf("resolve %s/%s op %s: %w (model uses %s)", p.Model, p.Key, p.OpID, ErrBaseVersionRequired, syncproto.PolicyOptimistic)
	}
	if *p.BaseVersion != current.Version {
		return staleBase(syncproto.PolicyOptimistic, current, p), nil
	}
	return Decision{Outcome: OutcomeApplied, Policy: syncproto.PolicyOptimistic, Record: p.record(current.Version)}, nil
}

// newConflict returns the conflict-log row for a decision about p.
func newConflict(p Proposal, policy syncproto.Policy, reason string, loser, winner Side) *ConflictEntry {
	return &ConflictEntry{
		Tenant: p.Tenant,
		Model:  p.Model,
		Key:    p.Key,
		Policy: policy,
		Reason: reason,
		Loser:  loser,
		Winner: winner,
	}
}
