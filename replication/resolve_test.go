package replication_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	r "github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// The key every table case is about, and its state before the proposal.
var (
	current = r.Record{
		Tenant: "t1", Model: "notes", Key: "k", Value: []byte(`{"v":"old"}`),
		Version: 3, HLC: ts(1000, 0, "b"), OpID: "op-cur", Seq: 7,
	}
	tombstone = r.Record{
		Tenant: "t1", Model: "notes", Key: "k",
		Version: 4, HLC: ts(1000, 0, "b"), Deleted: true, OpID: "op-del", Seq: 8,
	}
)

// put and del build the incoming proposal of a table case.
func put(hlc syncproto.Timestamp, base *uint64) r.Proposal {
	return r.Proposal{
		Tenant: "t1", OpID: "op-new", Model: "notes", Key: "k", Op: syncproto.OpPut,
		Value: []byte(`{"v":"new"}`), HLC: hlc, BaseVersion: base, ClientID: "c1",
	}
}

func del(hlc syncproto.Timestamp, base *uint64) r.Proposal {
	p := put(hlc, base)
	p.Op, p.Value = syncproto.OpDelete, nil
	return p
}

// applied is the record p produces on top of version prev.
func applied(p r.Proposal, prev uint64) r.Record {
	return r.Record{
		Tenant: p.Tenant, Model: p.Model, Key: p.Key, Value: p.Value, Version: prev + 1,
		HLC: p.HLC, Deleted: p.Op == syncproto.OpDelete, OpID: p.OpID,
	}
}

func proposalSide(p r.Proposal) r.Side {
	return r.Side{OpID: p.OpID, Value: p.Value, HLC: p.HLC, Deleted: p.Op == syncproto.OpDelete}
}

func recordSide(rec r.Record) r.Side {
	return r.Side{OpID: rec.OpID, Version: rec.Version, Value: rec.Value, HLC: rec.HLC, Deleted: rec.Deleted}
}

func conflictRow(policy syncproto.Policy, reason string, loser, winner r.Side) *r.ConflictEntry {
	return &r.ConflictEntry{Tenant: "t1", Model: "notes", Key: "k", Policy: policy, Reason: reason, Loser: loser, Winner: winner}
}

// supersededBy is the decision for a proposal losing to the current state
// under LWW.
func supersededBy(winner r.Record, p r.Proposal) r.Decision {
	return r.Decision{
		Outcome: r.OutcomeSuperseded, Policy: syncproto.PolicyLWW, Winner: winner, Reason: r.ReasonOlderHLC,
		Conflict: conflictRow(syncproto.PolicyLWW, r.ReasonOlderHLC, proposalSide(p), recordSide(winner)),
	}
}

// seen returns p carrying the version its writer had seen.
func seen(p r.Proposal, v uint64) r.Proposal {
	p.SeenVersion = &v
	return p
}

func refusedBy(winner r.Record, p r.Proposal) r.Decision {
	return refusedUnder(syncproto.PolicyOptimistic, winner, p)
}

func refusedUnder(policy syncproto.Policy, winner r.Record, p r.Proposal) r.Decision {
	return r.Decision{
		Outcome: r.OutcomeConflict, Policy: policy, Winner: winner, Reason: r.ReasonStaleBase,
		Conflict: conflictRow(policy, r.ReasonStaleBase, proposalSide(p), recordSide(winner)),
	}
}

func appliedAs(policy syncproto.Policy, rec r.Record) r.Decision {
	return r.Decision{Outcome: r.OutcomeApplied, Policy: policy, Record: rec}
}

func TestResolve(t *testing.T) {
	later := ts(2000, 0, "a")
	earlier := ts(500, 9, "z")
	staleLWW := put(later, ptr(uint64(2)))

	tests := []struct {
		name    string
		policy  syncproto.Policy
		current *r.Record // nil: the key does not exist
		p       r.Proposal
		want    r.Decision
	}{
		// Last writer wins.
		{"lww create", syncproto.PolicyLWW, nil, put(earlier, nil), appliedAs(syncproto.PolicyLWW, applied(put(earlier, nil), 0))},
		{"lww delete of an absent key leaves a tombstone", syncproto.PolicyLWW, nil, del(earlier, nil), appliedAs(syncproto.PolicyLWW, applied(del(earlier, nil), 0))},
		{"lww higher wall wins", syncproto.PolicyLWW, &current, put(later, nil), appliedAs(syncproto.PolicyLWW, applied(put(later, nil), 3))},
		{"lww same wall, higher logical wins", syncproto.PolicyLWW, &current, put(ts(1000, 1, "a"), nil), appliedAs(syncproto.PolicyLWW, applied(put(ts(1000, 1, "a"), nil), 3))},
		{"lww tie breaks on origin: higher wins", syncproto.PolicyLWW, &current, put(ts(1000, 0, "c"), nil), appliedAs(syncproto.PolicyLWW, applied(put(ts(1000, 0, "c"), nil), 3))},
		{"lww tie breaks on origin: lower loses", syncproto.PolicyLWW, &current, put(ts(1000, 0, "a"), nil), supersededBy(current, put(ts(1000, 0, "a"), nil))},
		{"lww tie breaks on origin bytewise: uppercase sorts first", syncproto.PolicyLWW, &current, put(ts(1000, 0, "B"), nil), supersededBy(current, put(ts(1000, 0, "B"), nil))},
		{"lww lower hlc is superseded and logged", syncproto.PolicyLWW, &current, put(earlier, nil), supersededBy(current, put(earlier, nil))},
		{"lww equal hlc: the current record stands", syncproto.PolicyLWW, &current, put(current.HLC, nil), supersededBy(current, put(current.HLC, nil))},
		{"lww lower hlc loses even with the current base", syncproto.PolicyLWW, &current, put(earlier, ptr(uint64(3))), supersededBy(current, put(earlier, ptr(uint64(3))))},
		{"lww current base, higher hlc: plain apply", syncproto.PolicyLWW, &current, put(later, ptr(uint64(3))), appliedAs(syncproto.PolicyLWW, applied(put(later, ptr(uint64(3))), 3))},
		{"lww stale base is a conflict even with a higher hlc", syncproto.PolicyLWW, &current, staleLWW, refusedUnder(syncproto.PolicyLWW, current, staleLWW)},
		{"lww base on an absent key is a conflict with no winner", syncproto.PolicyLWW, nil, put(later, ptr(uint64(5))), refusedUnder(syncproto.PolicyLWW, r.Record{}, put(later, ptr(uint64(5))))},
		{"lww win over a version the writer had not seen logs the overwritten state", syncproto.PolicyLWW, &current, seen(put(later, nil), 2), r.Decision{
			Outcome: r.OutcomeApplied, Policy: syncproto.PolicyLWW, Record: applied(seen(put(later, nil), 2), 3), Reason: r.ReasonUnseenOverwrite,
			Conflict: conflictRow(syncproto.PolicyLWW, r.ReasonUnseenOverwrite, recordSide(current), recordSide(applied(seen(put(later, nil), 2), 3))),
		}},
		{"lww win over the version the writer had seen logs nothing", syncproto.PolicyLWW, &current, seen(put(later, nil), 3), appliedAs(syncproto.PolicyLWW, applied(seen(put(later, nil), 3), 3))},
		{"lww loss with a stale seen version is plainly superseded", syncproto.PolicyLWW, &current, seen(put(earlier, nil), 1), supersededBy(current, seen(put(earlier, nil), 1))},
		{"lww base 0 creates an absent key", syncproto.PolicyLWW, nil, put(later, ptr(uint64(0))), appliedAs(syncproto.PolicyLWW, applied(put(later, ptr(uint64(0))), 0))},
		{"lww delete with higher hlc is a tombstone with the next version", syncproto.PolicyLWW, &current, del(later, nil), appliedAs(syncproto.PolicyLWW, applied(del(later, nil), 3))},
		{"lww delete with lower hlc is superseded", syncproto.PolicyLWW, &current, del(earlier, nil), supersededBy(current, del(earlier, nil))},
		{"lww put over a tombstone counts on from its version", syncproto.PolicyLWW, &tombstone, put(later, nil), appliedAs(syncproto.PolicyLWW, applied(put(later, nil), 4))},
		{"lww older put loses to a newer tombstone", syncproto.PolicyLWW, &tombstone, put(earlier, nil), supersededBy(tombstone, put(earlier, nil))},

		// Optimistic.
		{"optimistic current base applies", syncproto.PolicyOptimistic, &current, put(later, ptr(uint64(3))), appliedAs(syncproto.PolicyOptimistic, applied(put(later, ptr(uint64(3))), 3))},
		{"optimistic ignores hlc order", syncproto.PolicyOptimistic, &current, put(earlier, ptr(uint64(3))), appliedAs(syncproto.PolicyOptimistic, applied(put(earlier, ptr(uint64(3))), 3))},
		{"optimistic stale base is a conflict with the winner", syncproto.PolicyOptimistic, &current, put(later, ptr(uint64(2))), refusedBy(current, put(later, ptr(uint64(2))))},
		{"optimistic base from the future is a conflict", syncproto.PolicyOptimistic, &current, put(later, ptr(uint64(4))), refusedBy(current, put(later, ptr(uint64(4))))},
		{"optimistic create if absent with base 0", syncproto.PolicyOptimistic, nil, put(later, ptr(uint64(0))), appliedAs(syncproto.PolicyOptimistic, applied(put(later, ptr(uint64(0))), 0))},
		{"optimistic create over an existing key is a conflict", syncproto.PolicyOptimistic, &current, put(later, ptr(uint64(0))), refusedBy(current, put(later, ptr(uint64(0))))},
		{"optimistic update of an absent key is a conflict with no winner", syncproto.PolicyOptimistic, nil, put(later, ptr(uint64(1))), refusedBy(r.Record{}, put(later, ptr(uint64(1))))},
		{"optimistic delete with the current base", syncproto.PolicyOptimistic, &current, del(later, ptr(uint64(3))), appliedAs(syncproto.PolicyOptimistic, applied(del(later, ptr(uint64(3))), 3))},
		{"optimistic tombstone exists with its version", syncproto.PolicyOptimistic, &tombstone, put(later, ptr(uint64(4))), appliedAs(syncproto.PolicyOptimistic, applied(put(later, ptr(uint64(4))), 4))},
		{"optimistic create over a tombstone needs its version", syncproto.PolicyOptimistic, &tombstone, put(later, ptr(uint64(0))), refusedBy(tombstone, put(later, ptr(uint64(0))))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur, exists := r.Record{}, tt.current != nil
			if exists {
				cur = *tt.current
			}
			got, err := r.Resolve(tt.policy, cur, exists, tt.p)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestResolveIgnoresCurrentWhenAbsent(t *testing.T) {
	got, err := r.Resolve(syncproto.PolicyLWW, current, false, put(ts(1, 0, "a"), nil))
	require.NoError(t, err)
	require.Equal(t, uint64(1), got.Record.Version)
	require.Nil(t, got.Conflict)
}

func TestResolveRefuses(t *testing.T) {
	valid := put(ts(2000, 0, "a"), ptr(uint64(3)))
	with := func(f func(p *r.Proposal)) r.Proposal {
		p := valid
		f(&p)
		return p
	}
	tests := []struct {
		name    string
		policy  syncproto.Policy
		p       r.Proposal
		wantErr error
	}{
		{"empty op id", syncproto.PolicyLWW, with(func(p *r.Proposal) { p.OpID = "" }), r.ErrInvalidProposal},
		{"empty model", syncproto.PolicyLWW, with(func(p *r.Proposal) { p.Model = "" }), r.ErrInvalidProposal},
		{"empty key", syncproto.PolicyLWW, with(func(p *r.Proposal) { p.Key = "" }), r.ErrInvalidProposal},
		{"zero hlc", syncproto.PolicyLWW, with(func(p *r.Proposal) { p.HLC = syncproto.Timestamp{} }), r.ErrInvalidProposal},
		{"put without value", syncproto.PolicyLWW, with(func(p *r.Proposal) { p.Value = nil }), r.ErrInvalidProposal},
		{"delete with value", syncproto.PolicyLWW, with(func(p *r.Proposal) { p.Op = syncproto.OpDelete }), r.ErrInvalidProposal},
		{"unknown op", syncproto.PolicyLWW, with(func(p *r.Proposal) { p.Op = "upsert" }), r.ErrInvalidProposal},
		{"optimistic without base", syncproto.PolicyOptimistic, with(func(p *r.Proposal) { p.BaseVersion = nil }), r.ErrBaseVersionRequired},
		{"hook needs a Resolver", syncproto.PolicyHook, valid, r.ErrNoHook},
		{"unknown policy", syncproto.Policy("crdt"), valid, r.ErrUnknownPolicy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.Resolve(tt.policy, current, true, tt.p)
			require.ErrorIs(t, err, tt.wantErr)
			require.Equal(t, r.Decision{}, got)
		})
	}
}
