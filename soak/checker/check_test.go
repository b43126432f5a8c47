package checker_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/soak/checker"
	"github.com/syncd-dev/syncd/soak/journal"
	"github.com/syncd-dev/syncd/syncproto"
)

const tenant = "t"

func hlc(wall int64, origin string) syncproto.Timestamp {
	return syncproto.Timestamp{Wall: wall, Origin: origin}
}

func val(w string) []byte { return journal.Value{Write: w}.Encode() }

func base(v uint64) *uint64 { return &v }

var t0 = time.UnixMilli(1_000_000)

func made(client, op string, class journal.Class, model, key, kind string, b *uint64) journal.Entry {
	return journal.Entry{Kind: journal.KindMade, At: t0, Client: client, OpID: op, Class: class, Model: model, Key: key, Op: kind, Base: b, Write: client + "/" + op}
}

// fixture is a small, consistent end state of a run. Client a may read
// everything, b only notes and audit.
//
//	a: op-a1 lww notes/k1 applied (seq 1, v1)      b: op-b1 lww notes/k1 applied (seq 2, v2)
//	a: op-a2 lww notes/k1 superseded by op-b1      b: op-b2 lww notes/k2 applied (seq 3, v1)
//	a: op-a3 opt docs/d1 base 0 applied (seq 4)    b: op-b3 delete notes/k2 applied (seq 6, v2)
//	a: op-a4 opt docs/d1 base 0: conflict, rebased as op-a5 (base 1): applied (seq 5, v2)
//	a: op-a6 poison audit/x: dead-lettered
func fixture() *checker.State {
	entry := func(seq uint64, op, model, key, kind string, value []byte, version uint64, wall int64, client string) checker.OplogEntry {
		return checker.OplogEntry{Seq: seq, Tenant: tenant, Model: model, Key: key, OpID: op, Op: kind, Value: value, Version: version, HLC: hlc(wall, client), ClientID: client}
	}
	oplog := []checker.OplogEntry{
		entry(1, "op-a1", "notes", "k1", "put", val("a/op-a1"), 1, 1000, "a"),
		entry(2, "op-b1", "notes", "k1", "put", val("b/op-b1"), 2, 2000, "b"),
		entry(3, "op-b2", "notes", "k2", "put", val("b/op-b2"), 1, 2100, "b"),
		entry(4, "op-a3", "docs", "d1", "put", val("a/op-a3"), 1, 2200, "a"),
		entry(5, "op-a5", "docs", "d1", "put", val("a/rebase/op-a4"), 2, 2400, "a"),
		entry(6, "op-b3", "notes", "k2", "delete", nil, 2, 2500, "b"),
	}
	applied := func(e checker.OplogEntry) checker.Decision {
		return checker.Decision{Tenant: tenant, OpID: e.OpID, Result: syncproto.Result{OpID: e.OpID, Status: syncproto.StatusApplied, Version: e.Version, Seq: e.Seq, HLC: e.HLC}}
	}
	ledger := []checker.Decision{
		{Tenant: tenant, OpID: "op-a2", Result: syncproto.Result{OpID: "op-a2", Status: syncproto.StatusSuperseded, Winner: &syncproto.Winner{Version: 2}}},
		{Tenant: tenant, OpID: "op-a4", Result: syncproto.Result{OpID: "op-a4", Status: syncproto.StatusConflict, Winner: &syncproto.Winner{Version: 1}}},
	}
	for _, e := range oplog {
		ledger = append(ledger, applied(e))
	}
	record := func(e checker.OplogEntry) checker.Record {
		return checker.Record{Tenant: tenant, Model: e.Model, Key: e.Key, Value: e.Value, Version: e.Version, HLC: e.HLC, Deleted: e.Op == "delete", OpID: e.OpID, Seq: e.Seq}
	}
	outcome := func(op, model, key, status string, seq, version uint64) checker.Outcome {
		return checker.Outcome{OpID: op, Model: model, Key: key, Status: status, Seq: seq, Version: version, DecidedAt: t0.Add(time.Duration(seq) * time.Millisecond)}
	}
	a4 := outcome("op-a4", "docs", "d1", "conflict", 0, 0)
	a4.RebasedAs = "op-a5"
	a6 := outcome("op-a6", "audit", "x", "dead_lettered", 0, 0)
	a6.Reason = "forbidden_model: this token may not write model audit"
	ok := []string{"ok"}
	replicaA := []checker.ReplicaRecord{
		{Model: "notes", Key: "k1", Value: val("b/op-b1"), Version: 2},
		{Model: "notes", Key: "k2", Version: 2, Deleted: true},
		{Model: "docs", Key: "d1", Value: val("a/rebase/op-a4"), Version: 2},
	}
	return &checker.State{
		Server: checker.Server{
			Policies: map[string]string{"notes": "lww", "docs": "optimistic"},
			Oplog:    oplog, Head: 6, AppliedSeq: 6,
			Records: []checker.Record{record(oplog[1]), record(oplog[5]), record(oplog[4])},
			Ledger:  ledger,
			Conflicts: []checker.Conflict{
				{Tenant: tenant, Model: "notes", Key: "k1", Policy: "lww", Reason: "hlc not newer than current", LoserOpID: "op-a2", LoserHLC: hlc(1500, "a"), WinnerOpID: "op-b1", WinnerHLC: hlc(2000, "b"), WinnerVersion: 2},
				{Tenant: tenant, Model: "docs", Key: "d1", Policy: "optimistic", Reason: "stale base version", LoserOpID: "op-a4", WinnerOpID: "op-a3", WinnerVersion: 1},
			},
			Integrity: ok,
		},
		Clients: []checker.Client{
			{
				ID: "a", Tenant: tenant, Read: []string{"*"},
				Journal: []journal.Entry{
					made("a", "op-a1", journal.ClassLWW, "notes", "k1", "put", nil),
					made("a", "op-a2", journal.ClassLWW, "notes", "k1", "put", nil),
					made("a", "op-a3", journal.ClassOptimistic, "docs", "d1", "put", base(0)),
					made("a", "op-a4", journal.ClassOptimistic, "docs", "d1", "put", base(0)),
					{Kind: journal.KindHandler, At: t0, Client: "a", OpID: "op-a4", Model: "docs", Key: "d1", Decision: journal.DecisionRebase, Write: "a/rebase/op-a4", Base: base(1)},
					made("a", "op-a6", journal.ClassPoison, "audit", "x", "put", nil),
				},
				Queue: checker.Queue{Kind: checker.QueueNDJSON, Integrity: ok,
					DeadLetters: []checker.DeadLetter{{QueueItem: checker.QueueItem{ID: 6, OpID: "op-a6", Attempts: 5}, Reason: a6.Reason}}},
				Replica: checker.Replica{
					Records: replicaA, Cursor: 6, Integrity: ok,
					Outcomes: map[string]checker.Outcome{
						"op-a1": outcome("op-a1", "notes", "k1", "applied", 1, 1),
						"op-a2": outcome("op-a2", "notes", "k1", "superseded", 0, 0),
						"op-a3": outcome("op-a3", "docs", "d1", "applied", 4, 1),
						"op-a4": a4,
						"op-a5": outcome("op-a5", "docs", "d1", "applied", 5, 2),
						"op-a6": a6,
					},
				},
			},
			{
				ID: "b", Tenant: tenant, Read: []string{"notes", "audit"},
				Journal: []journal.Entry{
					made("b", "op-b1", journal.ClassLWW, "notes", "k1", "put", nil),
					made("b", "op-b2", journal.ClassLWW, "notes", "k2", "put", nil),
					made("b", "op-b3", journal.ClassDelete, "notes", "k2", "delete", nil),
				},
				Queue: checker.Queue{Kind: checker.QueueSQLite, Integrity: ok},
				Replica: checker.Replica{
					Records: []checker.ReplicaRecord{{Model: "notes", Key: "k1", Value: val("b/op-b1"), Version: 2}},
					Cursor:  6, Integrity: ok,
					Outcomes: map[string]checker.Outcome{
						"op-b1": outcome("op-b1", "notes", "k1", "applied", 2, 2),
						"op-b2": outcome("op-b2", "notes", "k2", "applied", 3, 1),
						"op-b3": outcome("op-b3", "notes", "k2", "applied", 6, 2),
					},
				},
			},
		},
		Process: checker.Process{Measured: true,
			Baseline:  checker.Sample{Goroutines: 12, FDs: 15, DatabaseFDs: 3},
			Final:     checker.Sample{Goroutines: 13, FDs: 19, DatabaseFDs: 7},
			Tolerance: checker.Sample{Goroutines: 3, FDs: 3, DatabaseFDs: 12}},
	}
}

// violated lists the invariants that do not hold.
func violated(r checker.Result) []checker.Invariant {
	var out []checker.Invariant
	for _, v := range r.Verdicts {
		if !v.Holds {
			out = append(out, v.Invariant)
		}
	}
	return out
}

func TestFixtureHolds(t *testing.T) {
	res := checker.Check(fixture())
	for _, v := range res.Verdicts {
		assert.True(t, v.Holds, "invariant %d: %v", int(v.Invariant), v.Evidence)
		assert.Positive(t, v.Checked, "invariant %d checked nothing", int(v.Invariant))
	}
	require.True(t, res.Holds())
	st := res.Stats
	assert.Equal(t, map[journal.Class]int{journal.ClassLWW: 4, journal.ClassOptimistic: 2, journal.ClassPoison: 1, journal.ClassDelete: 1, journal.ClassRebase: 1}, st.Made)
	assert.Equal(t, 1, st.Rebased)
	assert.Equal(t, 1, st.DeadLetters)
	assert.Equal(t, map[string]int{"applied": 6, "superseded": 1, "conflict": 1, "dead_lettered": 1}, st.Outcomes)
	assert.Equal(t, 9, st.Latency.N)
}

func TestCheckDoesNotModifyState(t *testing.T) {
	s := fixture()
	checker.Check(s)
	require.Equal(t, fixture(), s)
}

func client(s *checker.State, id string) *checker.Client {
	for i := range s.Clients {
		if s.Clients[i].ID == id {
			return &s.Clients[i]
		}
	}
	panic("no client " + id)
}

// TestCheckerNamesTheBrokenInvariant doctors the fixture the way a real bug
// would leave the state and requires exactly the broken invariants, with
// evidence that says what happened.
func TestCheckerNamesTheBrokenInvariant(t *testing.T) {
	for name, tc := range map[string]struct {
		doctor   func(s *checker.State)
		violated []checker.Invariant
		evidence string
	}{
		"a journal write the server never saw": {
			doctor: func(s *checker.State) {
				a := client(s, "a")
				a.Journal = append(a.Journal, made("a", "op-a9", journal.ClassLWW, "notes", "k9", "put", nil))
			},
			violated: []checker.Invariant{checker.Accounted},
			evidence: "op-a9 (notes/k9) is lost",
		},
		"an op id twice in the oplog": {
			doctor: func(s *checker.State) {
				dup := s.Server.Oplog[0]
				dup.Seq, dup.Key, dup.Version = 7, "k7", 1
				s.Server.Oplog = append(s.Server.Oplog, dup)
				s.Server.Head, s.Server.AppliedSeq = 7, 7
				s.Server.Records = append(s.Server.Records, checker.Record{Tenant: tenant, Model: "notes", Key: "k7", Value: dup.Value, Version: 1, HLC: dup.HLC, OpID: dup.OpID, Seq: 7})
				for i := range s.Clients {
					s.Clients[i].Replica.Cursor = 7
					s.Clients[i].Replica.Records = append(s.Clients[i].Replica.Records, checker.ReplicaRecord{Model: "notes", Key: "k7", Value: dup.Value, Version: 1})
				}
			},
			violated: []checker.Invariant{checker.ExactlyOnce},
			evidence: "op op-a1 appears 2 times in the oplog (seqs [1 7])",
		},
		"a resend decided again": {
			doctor: func(s *checker.State) {
				o := client(s, "a").Replica.Outcomes["op-a1"]
				o.Status, o.Seq, o.Version = "superseded", 0, 0
				client(s, "a").Replica.Outcomes["op-a1"] = o
			},
			violated: []checker.Invariant{checker.ExactlyOnce},
			evidence: "a was told superseded for op op-a1, but the oplog applied it at seq 1",
		},
		"a replica with a changed value": {
			doctor: func(s *checker.State) {
				client(s, "b").Replica.Records[0].Value = val("b/tampered")
			},
			violated: []checker.Invariant{checker.Converged},
			evidence: "b: notes/k1 is version 2",
		},
		"a record that is not the oplog's last write": {
			doctor: func(s *checker.State) {
				s.Server.Records[0].Value = val("b/tampered")
				client(s, "a").Replica.Records[0].Value = val("b/tampered")
				client(s, "b").Replica.Records[0].Value = val("b/tampered")
			},
			violated: []checker.Invariant{checker.ReferenceModel},
			evidence: "t:notes/k1: the record",
		},
		"LWW let an older write win": {
			doctor: func(s *checker.State) {
				s.Server.Oplog[1].HLC = hlc(900, "b")
				s.Server.Records[0].HLC = hlc(900, "b")
			},
			violated: []checker.Invariant{checker.ReferenceModel},
			evidence: "under LWW, seq 2",
		},
		"an optimistic write applied over a stale base": {
			doctor: func(s *checker.State) {
				client(s, "a").Journal[2].Base = base(5)
			},
			violated: []checker.Invariant{checker.ReferenceModel},
			evidence: "over base version 5 was applied as version 1",
		},
		"a write left in the queue": {
			doctor: func(s *checker.State) {
				b := client(s, "b")
				b.Journal = append(b.Journal, made("b", "op-b9", journal.ClassLWW, "notes", "k9", "put", nil))
				b.Queue.Pending = []checker.QueueItem{{ID: 9, OpID: "op-b9", Attempts: 2}}
			},
			violated: []checker.Invariant{checker.Accounted, checker.Drained},
			evidence: "still queued, undecided",
		},
		"a dead letter charged nothing": {
			doctor: func(s *checker.State) {
				client(s, "a").Queue.DeadLetters[0].Attempts = 0
			},
			violated: []checker.Invariant{checker.Drained},
			evidence: "was charged no attempt",
		},
		"a gap in the oplog": {
			doctor: func(s *checker.State) {
				shift := func(seq *uint64) {
					if *seq >= 4 {
						*seq++
					}
				}
				for i := range s.Server.Oplog {
					shift(&s.Server.Oplog[i].Seq)
				}
				for i := range s.Server.Records {
					shift(&s.Server.Records[i].Seq)
				}
				for i := range s.Server.Ledger {
					if s.Server.Ledger[i].Result.Status == syncproto.StatusApplied {
						shift(&s.Server.Ledger[i].Result.Seq)
					}
				}
				for i := range s.Clients {
					for op, o := range s.Clients[i].Replica.Outcomes {
						if o.Status == "applied" {
							shift(&o.Seq)
							s.Clients[i].Replica.Outcomes[op] = o
						}
					}
					s.Clients[i].Replica.Cursor = 7
				}
				s.Server.Head, s.Server.AppliedSeq = 7, 7
			},
			violated: []checker.Invariant{checker.Drained},
			evidence: "oplog gap: seq 5 follows seq 3",
		},
		"a damaged replica": {
			doctor: func(s *checker.State) {
				client(s, "a").Replica.Integrity = []string{"row 3 missing from index pending_by_key"}
			},
			violated: []checker.Invariant{checker.Drained},
			evidence: "a replica: integrity check says row 3 missing",
		},
		"a poison write the server applied": {
			doctor: func(s *checker.State) {
				a := client(s, "a")
				a.Journal[5].Class = journal.ClassPoison
				a.Journal[0].Class = journal.ClassPoison
			},
			violated: []checker.Invariant{checker.Accounted},
			evidence: "poison write op-a1 (notes/k1) ended applied: the server must refuse it",
		},
		"a dead-lettered write that was not poison": {
			doctor: func(s *checker.State) {
				client(s, "a").Journal[5].Class = journal.ClassLWW
			},
			violated: []checker.Invariant{checker.Accounted},
			evidence: "was dead-lettered, but only poison and scoped writes may be",
		},
		"a scoped write dead-lettered for another reason than forbidden_scope": {
			doctor: func(s *checker.State) {
				client(s, "a").Journal[5].Class = journal.ClassScoped
			},
			violated: []checker.Invariant{checker.Accounted},
			evidence: "a scoped write may be only for forbidden_scope: forbidden_model",
		},
		"a conflict the app's handler never saw": {
			doctor: func(s *checker.State) {
				a := client(s, "a")
				a.Journal = slices.Delete(a.Journal, 4, 5)
			},
			violated: []checker.Invariant{checker.Accounted},
			evidence: "ended in a conflict the app's handler never saw",
		},
		"an applied op nobody made": {
			doctor: func(s *checker.State) {
				client(s, "b").Journal = client(s, "b").Journal[1:]
				delete(client(s, "b").Replica.Outcomes, "op-b1")
			},
			violated: []checker.Invariant{checker.Accounted},
			evidence: "b: the server applied op op-b1 (seq 2, put notes/k1) that no journal entry of this client made",
		},
		"a replica holding a model it may not read": {
			doctor: func(s *checker.State) {
				b := client(s, "b")
				b.Replica.Records = append(b.Replica.Records, checker.ReplicaRecord{Model: "docs", Key: "d1", Value: val("a/rebase/op-a4"), Version: 2})
			},
			violated: []checker.Invariant{checker.Converged},
			evidence: "b holds docs/d1 of model docs, which its token may not read",
		},
		"a decided write left in the pending overlay": {
			doctor: func(s *checker.State) {
				client(s, "a").Replica.Pending = []string{"op-a1"}
			},
			violated: []checker.Invariant{checker.Converged},
			evidence: "a: 1 writes still in the pending overlay, so reads show them over the server's records (first: op-a1, decided applied",
		},
		"a replica behind the feed": {
			doctor: func(s *checker.State) {
				client(s, "b").Replica.Cursor = 3
			},
			violated: []checker.Invariant{checker.Converged},
			evidence: "b: its cursor 3 is behind seq 6",
		},
		"leaked goroutines": {
			doctor: func(s *checker.State) {
				s.Process.Final.Goroutines = 40
			},
			violated: []checker.Invariant{checker.NoLeaks},
			evidence: "syncd runs 40 goroutines at quiescence, baseline 12 (+3 allowed)",
		},
		"leaked sockets": {
			doctor: func(s *checker.State) {
				s.Process.Final.FDs = 60
			},
			violated: []checker.Invariant{checker.NoLeaks},
			evidence: "syncd holds 53 open files besides its database's at quiescence, baseline 12",
		},
		"not measured": {
			doctor: func(s *checker.State) {
				s.Process = checker.Process{Error: "connection refused"}
			},
			violated: []checker.Invariant{checker.NoLeaks},
			evidence: "not measured: connection refused",
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := fixture()
			tc.doctor(s)
			res := checker.Check(s)
			require.Equal(t, tc.violated, violated(res))
			var all []string
			for _, i := range tc.violated {
				all = append(all, res.Verdict(i).Evidence...)
			}
			assert.Contains(t, strings.Join(all, "\n"), tc.evidence)
		})
	}
}

// A ledger that evicted decisions by retention is not a violation for the
// ops its tenant's floor covers, whether the floor is the tenant's own or
// the one a migrated ledger gives every tenant.
func TestLedgerRetentionIsNotAViolation(t *testing.T) {
	for name, evict := range map[string]func(*checker.Server){
		"tenant's floor": func(s *checker.Server) { s.LedgerFloors = map[string]time.Time{tenant: time.UnixMilli(10_000)} },
		"base floor":     func(s *checker.Server) { s.LedgerBaseFloor = time.UnixMilli(10_000) },
	} {
		t.Run(name, func(t *testing.T) {
			s := fixture()
			s.Server.Ledger = nil
			evict(&s.Server)
			res := checker.Check(s)
			assert.Empty(t, violated(res), "%v %v", res.Verdict(checker.Accounted).Evidence, res.Verdict(checker.ExactlyOnce).Evidence)
		})
	}
}

// Another tenant's floor exempts nothing: decisions missing from a tenant
// whose own ledger evicted nothing are violations (one tenant's volume
// expiring another's writes, issue 11's first finding).
func TestAnotherTenantsLedgerFloorExemptsNothing(t *testing.T) {
	s := fixture()
	s.Server.Ledger = nil
	s.Server.LedgerFloors = map[string]time.Time{"flooder": time.UnixMilli(10_000)}
	res := checker.Check(s)
	assert.Equal(t, []checker.Invariant{checker.Accounted, checker.ExactlyOnce}, violated(res))
}

// Evidence is capped; the count is not.
func TestEvidenceIsCapped(t *testing.T) {
	s := fixture()
	a := client(s, "a")
	for i := range checker.MaxEvidence * 2 {
		a.Journal = append(a.Journal, made("a", "lost-"+string(rune('a'+i)), journal.ClassLWW, "notes", "k", "put", nil))
	}
	v := checker.Check(s).Verdict(checker.Accounted)
	assert.Len(t, v.Evidence, checker.MaxEvidence)
	assert.Equal(t, checker.MaxEvidence*2, v.Violations)
}
