package replication

import (
	"encoding/json"
	"time"

	"github.com/syncd-dev/syncd/syncproto"
)

// Batch is one push as the edge (the node that received it) admitted it:
// the unit the state machine decides, and the command a cluster replicates.
//
// Everything that depends on the receiving node is settled in a Batch
// before it is decided: who sent it (from the token), the refusals that
// need the token or the clock, the policy of each model, the answer of a
// conflict hook, and the time it is stamped with. Deciding a Batch reads
// nothing else but the state it is decided against, so every replica that
// decides the same batches in the same order holds the same state.
type Batch struct {
	// Tenant and ClientID are the sender's, from its token.
	Tenant   string `json:"tenant"`
	ClientID string `json:"client_id"`
	// User is the sender's user, from its token ("" when it names none):
	// membership rows naming it grant it scope values.
	User string `json:"user,omitempty"`
	// Grants are the scope values the sender's token grants (Author.Grants).
	Grants syncproto.ScopeSet `json:"grants,omitempty"`
	// At is the edge's wall clock when it admitted the push, at millisecond
	// precision: the applied-at time of the batch's oplog entries and the
	// decided-at time of its ledger and conflict-log rows.
	At     time.Time `json:"at"`
	Writes []Write   `json:"writes"`
	// Requested, when set, records the sender's requested scope set
	// (requested.go); such a batch usually has no writes. A cluster edge
	// sends it only once every node understands it
	// (cluster.FormatRequestedSets).
	Requested *Requested `json:"requested,omitempty"`
}

// Write is one mutation of a Batch with what the edge decided about it.
type Write struct {
	Mutation syncproto.Mutation `json:"mutation"`
	// Refusal, when set, refuses the mutation before any policy sees it
	// (invalid, forbidden, a foreign or too-fast timestamp): it is answered
	// rejected with this error, and nothing is decided or recorded, so a
	// corrected resend under the same op id is heard.
	Refusal *syncproto.Error `json:"refusal,omitempty"`
	// Policy is the model's conflict policy as the edge's configuration
	// declares it.
	Policy syncproto.Policy `json:"policy,omitempty"`
	// Hook is the conflict hook's answer, for a write under syncproto.PolicyHook.
	Hook *HookAnswer `json:"hook,omitempty"`
	// Upcast, when set, is the value the write applies: the edge turned
	// the mutation's value, of an older value version, into its model's
	// current shape. The mutation stays as the device sent it, so the
	// ledger's digest and the conflict log's loser are what it sent.
	Upcast json.RawMessage `json:"upcast,omitempty"`
	// Accepted, with a needs_upgrade Refusal, names the value versions
	// the edge accepts for the model (Result.AcceptedVersions).
	Accepted []uint64 `json:"accepted,omitempty"`
}

// HookAnswer is what the edge's conflict hook answered for one write, and
// the state it answered about. Decide carries the answer out only while
// the key is still at Version; otherwise the write is stale and the edge
// asks again.
type HookAnswer struct {
	// Version is the key's record version the hook saw; 0 for an absent key.
	Version uint64 `json:"version"`
	// Result is the hook's verdict, when it gave a usable one.
	Result HookResult `json:"result"`
	// Fallback, when set, says the hook could not decide (timeout, error,
	// panic, an unusable verdict, or the key kept changing under it):
	// last-writer-wins decides instead, and Result is ignored.
	Fallback FallbackReason `json:"fallback,omitempty"`
}

// Author is who sent a push, as its credential says; the edge fills it from
// the token, never from the message.
type Author struct {
	Tenant   string
	ClientID string
	// User is the user the token names, "" when none.
	User string
	// Grants are the scope values the token grants; membership rows add to
	// them when a write is decided.
	Grants syncproto.ScopeSet
	// CanWrite reports whether the author may write model.
	CanWrite func(model string) bool
}

// Admit is the edge's half of deciding a push: it turns the mutations a
// client sent into a Batch stamped at now, refusing each mutation that no
// policy may see. A mutation is refused when it is invalid (its own
// syncproto code), names a model the author may not write
// (forbidden_model), carries a timestamp that is not the author's own
// (invalid_hlc) or is more than maxSkew ahead of now (clock_skew), or lacks
// the base version its model's optimistic policy requires
// (missing_base_version). Admit is pure.
//
// Conflict hooks are not asked here: see Resolver.AskHooks.
func Admit(a Author, muts []syncproto.Mutation, policies Config, now time.Time, maxSkew time.Duration) Batch {
	b := Batch{Tenant: a.Tenant, ClientID: a.ClientID, User: a.User, Grants: a.Grants, At: time.UnixMilli(now.UnixMilli()).UTC(), Writes: make([]Write, len(muts))}
	for i := range muts {
		m := &muts[i]
		w := Write{Mutation: *m, Policy: policies.For(m.Model)}
		w.Refusal = refusal(a, m, w.Policy, now, maxSkew)
		b.Writes[i] = w
	}
	return b
}

// refusal returns why no policy may see m, or nil.
func refusal(a Author, m *syncproto.Mutation, policy syncproto.Policy, now time.Time, maxSkew time.Duration) *syncproto.Error {
	if err := m.Validate(); err != nil {
		return syncproto.AsError(err)
	}
	if policy == syncproto.PolicyNone {
		return syncproto.Errorf(syncproto.CodeInvalidModel, "model %s is not declared on this server", m.Model)
	}
	if a.CanWrite == nil || !a.CanWrite(m.Model) {
		return syncproto.Errorf(syncproto.CodeForbiddenModel, "this token may not write model %s", m.Model)
	}
	if m.HLC.Origin != a.ClientID {
		return syncproto.Errorf(syncproto.CodeInvalidHLC, "hlc origin %q is not this token's client id", m.HLC.Origin)
	}
	if err := CheckSkew(m.HLC, now, maxSkew); err != nil {
		return syncproto.Errorf(syncproto.CodeClockSkew, "%v; re-stamp from a corrected clock and resend", err)
	}
	if policy == syncproto.PolicyOptimistic && m.BaseVersion == nil {
		return syncproto.Errorf(syncproto.CodeMissingBaseVersion, "model %s uses optimistic concurrency: base_version is required", m.Model)
	}
	return nil
}

// proposal is w's mutation as a policy sees it.
func (b *Batch) proposal(m *syncproto.Mutation) Proposal {
	return Proposal{
		Tenant: b.Tenant, OpID: m.OpID, Model: m.Model, Key: m.Key,
		Op: m.Op, Value: m.Value, HLC: m.HLC,
		BaseVersion: m.BaseVersion, SeenVersion: m.SeenVersion, ClientID: b.ClientID,
	}
}

// admitted returns the mutations of b's writes that Admit did not refuse,
// in order.
func (b *Batch) admitted() []*syncproto.Mutation {
	ms := make([]*syncproto.Mutation, 0, len(b.Writes))
	for i := range b.Writes {
		if b.Writes[i].Refusal == nil {
			ms = append(ms, &b.Writes[i].Mutation)
		}
	}
	return ms
}

// CheckpointWeight is what a transaction applying batches weighs for an
// sqlitedb.Checkpointer: a unit (some 3 to 10 pages of log) per transaction
// and per 16 KiB of mutations, each of which its record and its oplog
// entry write twice.
func CheckpointWeight(batches []*Batch) int {
	bytes := 0
	for _, b := range batches {
		for i := range b.Writes {
			m := &b.Writes[i].Mutation
			bytes += len(m.Value) + len(m.Key) + len(m.Model) + len(m.OpID) + 100
		}
	}
	return 1 + bytes/checkpointUnitBytes
}

// checkpointUnitBytes is how many bytes of mutations weigh one unit.
const checkpointUnitBytes = 16 << 10
