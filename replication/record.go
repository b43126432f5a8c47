package replication

import (
	"errors"
	"fmt"

	"github.com/syncd-dev/syncd/syncproto"
)

// Record is the current state of one key: the materialization of the last
// applied write. Records are keyed (Tenant, Model, Key).
//
// A key that was never written has no record; Resolve and Records.Get say
// so with an exists flag, and a zero Record stands in for it (Version 0).
// A deleted key has a record: a tombstone with Deleted set, a nil Value and
// its own version, so versions keep counting across deletes.
type Record struct {
	Tenant string
	Model  string
	Key    string
	// Value is the raw JSON value; nil for a tombstone.
	Value []byte
	// Version counts the applied writes to this key: 1 for the first, and
	// exactly one more for each later one, whatever the policy.
	Version uint64
	// HLC is the timestamp of the write that produced this state.
	HLC     syncproto.Timestamp
	Deleted bool
	// OpID is the op id of the write that produced this state.
	OpID string
	// Seq is the oplog sequence of that write; 0 until it is logged.
	Seq uint64
	// ScopeValue is the record's scope value when its model is covered by a
	// scope (Scopes), kept by a delete; "" otherwise.
	ScopeValue string
	// Member is the user a live row of a membership model grants its scope
	// value to; "" otherwise.
	Member string
}

// Proposal is an incoming mutation, after protocol validation, before any
// policy has decided it.
type Proposal struct {
	// Tenant is the tenant of the principal that sent the mutation (the
	// server fills it from the token, never from the client's message).
	Tenant string
	OpID   string
	Model  string
	Key    string
	Op     syncproto.Op
	// Value is the raw JSON value of a put; it must be nil for a delete.
	Value []byte
	// HLC is the client's timestamp for the write; it must not be zero.
	HLC syncproto.Timestamp
	// BaseVersion is the version the client saw when it made the write (0:
	// "the key did not exist"); nil when it did not say. syncproto.PolicyOptimistic
	// requires it; under every policy a write that carries it is
	// conditional: a stale base is a conflict.
	BaseVersion *uint64
	// SeenVersion is the version the client had seen when it made the write
	// (information only, never a condition): a LWW write that wins over a
	// newer version logs the state it overwrote. nil when it did not say.
	SeenVersion *uint64
	ClientID    string
}

// ErrInvalidProposal is wrapped when a Proposal is not well formed (empty
// op id, model or key, unknown op, a put without a value or a delete with
// one, a zero HLC). Nothing was applied; resending the same mutation fails
// the same way. Protocol validation should have caught it first.
var ErrInvalidProposal = errors.New("invalid proposal")

// validate checks the invariants every policy relies on.
func (p Proposal) validate() error {
	var problem string
	switch {
	case p.OpID == "":
		problem = "empty op id"
	case p.Model == "":
		problem = "empty model"
	case p.Key == "":
		problem = "empty key"
	case p.HLC.IsZero():
		problem = "zero hlc"
	case p.Op == syncproto.OpPut && p.Value == nil:
		problem = "put without a value"
	case p.Op == syncproto.OpDelete && p.Value != nil:
		problem = "delete with a value"
	case p.Op != syncproto.OpPut && p.Op != syncproto.OpDelete:
		problem = fmt.Sprintf("unknown op %q", p.Op)
	default:
		return nil
	}
	return fmt.Errorf("%w: op %s on %s/%s: %s", ErrInvalidProposal, p.OpID, p.Model, p.Key, problem)
}

// record returns the state p produces when applied on top of a record at
// version prev.
func (p Proposal) record(prev uint64) Record {
	return Record{
		Tenant:  p.Tenant,
		Model:   p.Model,
		Key:     p.Key,
		Value:   p.Value,
		Version: prev + 1,
		HLC:     p.HLC,
		Deleted: p.Op == syncproto.OpDelete,
		OpID:    p.OpID,
	}
}

// side returns p as one side of a conflict.
func (p Proposal) side() Side {
	return Side{OpID: p.OpID, Value: p.Value, HLC: p.HLC, Deleted: p.Op == syncproto.OpDelete}
}

// side returns r as one side of a conflict.
func (r Record) side() Side {
	return Side{OpID: r.OpID, Version: r.Version, Value: r.Value, HLC: r.HLC, Deleted: r.Deleted}
}
