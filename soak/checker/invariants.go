package checker

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// checkExactlyOnce is invariant 2. The oplog holds each op id once; the
// ledger and the oplog agree (an op the ledger calls applied is in the
// oplog at that seq and nothing else is); and every answer a client holds
// is the first decision: the oplog's entry when the op was applied, else
// the ledger's. A resend the ledger failed to answer is
// decided again, and a second decision of the same op differs from the
// first (a replayed LWW write no longer beats itself; a replayed optimistic
// write meets its own version), so it shows here.
func checkExactlyOnce(s *State, ix *index) Verdict {
	b := newVerdict(ExactlyOnce)
	// The most telling violations first, so they lead the evidence.
	for i := range s.Server.Oplog {
		e := &s.Server.Oplog[i]
		b.check()
		if es := ix.oplogByOp[tenantOp{e.Tenant, e.OpID}]; len(es) > 1 && es[0] == e {
			seqs := make([]uint64, len(es))
			for i, d := range es {
				seqs[i] = d.Seq
			}
			b.fail("op %s appears %d times in the oplog (seqs %v)", e.OpID, len(es), seqs)
		}
	}
	for i := range s.Server.Ledger {
		d := &s.Server.Ledger[i]
		b.check()
		es := ix.oplogByOp[tenantOp{d.Tenant, d.OpID}]
		switch d.Result.Status {
		case syncproto.StatusApplied:
			if len(es) == 0 && d.Result.Seq >= ix.oldestSeq {
				b.fail("the ledger says op %s was applied at seq %d; the oplog has no such entry", d.OpID, d.Result.Seq)
			}
		case syncproto.StatusSuperseded, syncproto.StatusConflict:
			if len(es) > 0 {
				b.fail("op %s is in the oplog at seq %d, but the ledger's decision is %s: it was decided twice", d.OpID, es[0].Seq, d.Result.Status)
			}
		}
	}
	var undecided []string
	for ci := range s.Clients {
		c := &s.Clients[ci]
		for _, op := range sortedKeys(c.Replica.Outcomes) {
			o := c.Replica.Outcomes[op]
			if o.Status == string(client.StatusDeadLettered) {
				continue // refusals are never recorded in the ledger
			}
			b.check()
			d := ix.ledger[tenantOp{c.Tenant, op}]
			es := ix.oplogByOp[tenantOp{c.Tenant, op}]
			switch {
			case len(es) > 0 && (o.Status != string(client.StatusApplied) || o.Seq != es[0].Seq || o.Version != es[0].Version):
				b.fail("%s was told %s for op %s, but the oplog applied it at seq %d (version %d): a resend was decided again instead of answered from the ledger",
					c.ID, describeOutcome(o), op, es[0].Seq, es[0].Version)
			case d == nil && s.Server.LedgerFloor(c.Tenant).IsZero():
				undecided = append(undecided, fmt.Sprintf("%s holds outcome %s for op %s, which the ledger never decided", c.ID, o.Status, op))
			case d != nil && !agrees(o, d.Result):
				b.fail("%s was told %s for op %s, but the ledger's first decision was %s: a resend was decided again instead of answered from the ledger",
					c.ID, describeOutcome(o), op, describeResult(d.Result))
			}
		}
	}
	for _, u := range undecided {
		b.fail("%s", u)
	}
	for i := range s.Server.Oplog {
		e := &s.Server.Oplog[i]
		b.check()
		d := ix.ledger[tenantOp{e.Tenant, e.OpID}]
		switch {
		case d == nil:
			if s.ledgerCovers(e.Tenant, e.HLC.Wall) {
				b.fail("oplog seq %d (op %s) has no ledger decision", e.Seq, e.OpID)
			}
		case d.Result.Status == syncproto.StatusApplied && (d.Result.Seq != e.Seq || d.Result.Version != e.Version):
			b.fail("op %s: the ledger says applied at seq %d version %d, the oplog at seq %d version %d", e.OpID, d.Result.Seq, d.Result.Version, e.Seq, e.Version)
		}
	}
	return b.done()
}

func agrees(o Outcome, r syncproto.Result) bool {
	switch client.OutcomeStatus(o.Status) {
	case client.StatusApplied:
		return r.Status == syncproto.StatusApplied && r.Seq == o.Seq && r.Version == o.Version
	case client.StatusSuperseded:
		return r.Status == syncproto.StatusSuperseded
	case client.StatusConflict:
		return r.Status == syncproto.StatusConflict
	}
	return false
}

func describeOutcome(o Outcome) string {
	if o.Status == string(client.StatusApplied) {
		return fmt.Sprintf("applied (seq %d, version %d)", o.Seq, o.Version)
	}
	return o.Status
}

func describeResult(r syncproto.Result) string {
	if r.Status == syncproto.StatusApplied {
		return fmt.Sprintf("applied (seq %d, version %d)", r.Seq, r.Version)
	}
	return string(r.Status)
}

// checkReferenceModel is invariant 3. It replays the oplog per key: versions
// count 1, 2, 3, ... with no gap; under LWW every entry's HLC is newer than
// the one it replaced; the last entry is the record the server holds. An
// optimistic write was applied on its base version (version = base + 1);
// an LWW loser in the conflict log is not newer than its winner; the
// records are materialized up to the log's head.
func checkReferenceModel(s *State, ix *index, acc accounting) Verdict {
	b := newVerdict(ReferenceModel)
	compacted := ix.oldestSeq > 1
	if compacted {
		b.note("the oplog was compacted below seq %d: each key's first retained entry is taken as given", ix.oldestSeq)
	}
	keys := make([]recordKey, 0, len(ix.oplogByKey))
	for k := range ix.oplogByKey {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keyLess(keys[i], keys[j]) })
	for _, k := range keys {
		es := ix.oplogByKey[k]
		b.check()
		name := k.tenant + ":" + k.model + "/" + k.key
		lww := s.policy(k.model) == string(syncproto.PolicyLWW)
		for i, e := range es {
			if (e.Op == "delete") != (len(e.Value) == 0) {
				b.fail("%s seq %d: a %s with value %s", name, e.Seq, e.Op, short(e.Value))
			}
			if i == 0 {
				if !compacted && e.Version != 1 {
					b.fail("%s: the first write (seq %d) has version %d, not 1", name, e.Seq, e.Version)
				}
				continue
			}
			prev := es[i-1]
			if e.Version != prev.Version+1 {
				b.fail("%s: version %d (seq %d) follows version %d (seq %d)", name, e.Version, e.Seq, prev.Version, prev.Seq)
			}
			if lww && e.HLC.Compare(prev.HLC) <= 0 {
				b.fail("%s: under LWW, seq %d (hlc %s) replaced seq %d (hlc %s), which is not older", name, e.Seq, e.HLC, prev.Seq, prev.HLC)
			}
		}
		last := es[len(es)-1]
		r := ix.records[k]
		if r == nil {
			b.fail("%s: no record, but the oplog's last entry is seq %d", name, last.Seq)
			continue
		}
		deleted := last.Op == "delete"
		if r.Version != last.Version || r.Deleted != deleted || r.OpID != last.OpID || r.Seq != last.Seq || r.HLC != last.HLC || (!deleted && !sameJSON(r.Value, last.Value)) {
			b.fail("%s: the record (version %d, seq %d, op %s, deleted %t, value %s) is not the reference (version %d, seq %d, op %s, deleted %t, value %s)",
				name, r.Version, r.Seq, r.OpID, r.Deleted, short(r.Value), last.Version, last.Seq, last.OpID, deleted, short(last.Value))
		}
	}
	for _, r := range s.Server.Records {
		if _, ok := ix.oplogByKey[recordKey{r.Tenant, r.Model, r.Key}]; !ok && !compacted {
			b.check()
			b.fail("%s:%s/%s: a record (version %d) no oplog entry wrote", r.Tenant, r.Model, r.Key, r.Version)
		}
	}
	b.check()
	if s.Server.AppliedSeq != s.Server.Head {
		b.fail("the records are materialized to seq %d, the oplog's head is %d", s.Server.AppliedSeq, s.Server.Head)
	}
	for _, w := range acc.writes {
		if w.base == nil || s.policy(w.model) != string(syncproto.PolicyOptimistic) {
			continue
		}
		b.check()
		for _, e := range ix.oplogByOp[tenantOp{w.tenant, w.opID}] {
			if e.Version != *w.base+1 {
				b.fail("optimistic write %s on %s/%s over base version %d was applied as version %d", w.opID, w.model, w.key, *w.base, e.Version)
			}
		}
	}
	for _, c := range s.Server.Conflicts {
		if c.Policy != string(syncproto.PolicyLWW) || c.Reason != replication.ReasonOlderHLC {
			continue
		}
		b.check()
		if c.LoserHLC.Compare(c.WinnerHLC) > 0 {
			b.fail("%s:%s/%s: LWW loser %s (hlc %s) is newer than its winner %s (hlc %s)", c.Tenant, c.Model, c.Key, c.LoserOpID, c.LoserHLC, c.WinnerOpID, c.WinnerHLC)
		}
	}
	return b.done()
}

func keyLess(a, b recordKey) bool {
	if a.tenant != b.tenant {
		return a.tenant < b.tenant
	}
	if a.model != b.model {
		return a.model < b.model
	}
	return a.key < b.key
}

// checkConverged is invariant 4: every replica holds exactly the server's
// live records of its tenant and readable models (same version, same
// value; a tombstone and an absent key read alike), nothing it may not
// read, no pending overlay, and a cursor at or past the newest entry it may
// read.
//
// It also judges what each client received while the run went on
// (checkWire) and returns how many rows that judged.
func checkConverged(s *State, ix *index) (Verdict, int) {
	b := newVerdict(Converged)
	for ci := range s.Clients {
		c := &s.Clients[ci]
		want := map[string]*Record{}
		// unfollowed holds the server's records of scoped models the
		// client does not follow: a replica row of one is a leak.
		unfollowed := map[string]*Record{}
		for i := range s.Server.Records {
			r := &s.Server.Records[i]
			if r.Tenant != c.Tenant || !c.CanRead(r.Model) {
				continue
			}
			if sc := s.Server.scopeOf(r.Model); sc != nil && !s.Server.follows(c, sc, r.ScopeValue) {
				unfollowed[r.Model+"/"+r.Key] = r
				continue
			}
			want[r.Model+"/"+r.Key] = r
		}
		got := map[string]*ReplicaRecord{}
		for i := range c.Replica.Records {
			r := &c.Replica.Records[i]
			k := r.Model + "/" + r.Key
			if !c.CanRead(r.Model) {
				b.check()
				b.fail("%s holds %s of model %s, which its token may not read", c.ID, k, r.Model)
				continue
			}
			if u := unfollowed[k]; u != nil && !r.Deleted {
				b.check()
				b.fail("%s holds %s, whose scope value %q it does not follow (not granted, or not requested): a leak", c.ID, k, u.ScopeValue)
				continue
			}
			got[k] = r
		}
		keys := sortedKeys(want)
		for k := range got {
			if _, ok := want[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			b.check()
			w, g := want[k], got[k]
			wLive, gLive := w != nil && !w.Deleted, g != nil && !g.Deleted
			switch {
			case !wLive && !gLive:
			case wLive && !gLive:
				b.fail("%s: %s is version %d %s on the server but absent from the replica", c.ID, k, w.Version, short(w.Value))
			case !wLive:
				b.fail("%s: %s is absent on the server but version %d %s in the replica", c.ID, k, g.Version, short(g.Value))
			case w.Version != g.Version || !sameJSON(w.Value, g.Value):
				b.fail("%s: %s is version %d %s on the server but version %d %s in the replica", c.ID, k, w.Version, short(w.Value), g.Version, short(g.Value))
			}
		}
		b.check()
		if n := len(c.Replica.Pending); n > 0 {
			first, fate := c.Replica.Pending[0], "undecided"
			if o, ok := c.Replica.Outcomes[first]; ok {
				fate = "decided " + o.Status + " at " + o.DecidedAt.UTC().Format(time.RFC3339Nano)
			}
			b.fail("%s: %d writes still in the pending overlay, so reads show them over the server's records (first: %s, %s)", c.ID, n, first, fate)
		}
		// Entries of scoped models are left out: a device receives a value
		// gained later by backfill, which does not move its cursor
		// (PROTOCOL.md 19.3), and never receives entries of values it does
		// not follow.
		var newest uint64
		for _, e := range s.Server.Oplog {
			if e.Tenant == c.Tenant && c.CanRead(e.Model) && s.Server.scopeOf(e.Model) == nil {
				newest = max(newest, e.Seq)
			}
		}
		switch {
		case c.Replica.Cursor < newest:
			b.fail("%s: its cursor %d is behind seq %d, the newest entry it may read", c.ID, c.Replica.Cursor, newest)
		case c.Replica.Cursor > s.Server.Head:
			b.fail("%s: its cursor %d is past the server's head %d", c.ID, c.Replica.Cursor, s.Server.Head)
		}
	}
	received := checkWire(s, ix, b)
	return b.done(), received
}

// checkDrained is invariant 5: no queue holds a pending item, every dead
// letter has a reason and was charged the refusal that put it there, the
// oplog's seqs are consecutive up to its head, and
// every database and queue file passed its integrity check.
func checkDrained(s *State) Verdict {
	b := newVerdict(Drained)
	for ci := range s.Clients {
		c := &s.Clients[ci]
		b.check()
		for _, it := range c.Queue.Pending {
			b.fail("%s: queue item %d (op %s, %d attempts) is still pending", c.ID, it.ID, it.OpID, it.Attempts)
		}
		for _, d := range c.Queue.DeadLetters {
			if d.Reason == "" {
				b.fail("%s: dead letter %d (op %s) has no reason", c.ID, d.ID, d.OpID)
			}
			if d.Attempts == 0 {
				// The refusal that dead-lettered it charged an attempt.
				b.fail("%s: dead letter %d (op %s) was charged no attempt", c.ID, d.ID, d.OpID)
			}
		}
		b.integrity(c.ID+" queue ("+c.Queue.Kind+")", c.Queue.Integrity)
		b.integrity(c.ID+" replica", c.Replica.Integrity)
	}
	b.integrity("syncd database", s.Server.Integrity)
	b.check()
	log := s.Server.Oplog
	for i := 1; i < len(log); i++ {
		if log[i].Seq != log[i-1].Seq+1 {
			b.fail("oplog gap: seq %d follows seq %d", log[i].Seq, log[i-1].Seq)
		}
	}
	if n := len(log); n > 0 && log[n-1].Seq != s.Server.Head {
		b.fail("the oplog's head is %d but its newest entry is seq %d", s.Server.Head, log[n-1].Seq)
	}
	if len(log) > 0 && log[0].Seq > 1 {
		b.note("the oplog starts at seq %d (compacted); gaps are checked from there", log[0].Seq)
	}
	return b.done()
}

func (b *verdict) integrity(what string, rows []string) {
	b.check()
	if len(rows) != 1 || rows[0] != "ok" {
		if len(rows) == 0 {
			rows = []string{"not checked"}
		}
		b.fail("%s: integrity check says %s", what, join(rows))
	}
}

// checkNoLeaks is invariant 6: syncd's goroutines, its open files other
// than its database's, and its database's open files at quiescence are
// each within tolerance of the baseline. The database's files are judged
// apart because SQLite keeps the descriptor of a closed connection open
// while another connection of the process holds a lock on the file (as
// every WAL connection does), and reuses it for the next connection: they
// follow the peak number of connections at once, not the work done.
func checkNoLeaks(s *State) Verdict {
	b := newVerdict(NoLeaks)
	p := s.Process
	b.check()
	if !p.Measured {
		b.fail("not measured: %s", p.Error)
		return b.done()
	}
	base, final, tol := p.Baseline, p.Final, p.Tolerance
	b.note("baseline %d goroutines, %d open files (%d of the database); at quiescence %d and %d (%d); tolerance +%d, +%d, +%d",
		base.Goroutines, base.FDs, base.DatabaseFDs, final.Goroutines, final.FDs, final.DatabaseFDs, tol.Goroutines, tol.FDs, tol.DatabaseFDs)
	if final.Goroutines > base.Goroutines+tol.Goroutines {
		b.fail("syncd runs %d goroutines at quiescence, baseline %d (+%d allowed)", final.Goroutines, base.Goroutines, tol.Goroutines)
	}
	if other, baseOther := final.FDs-final.DatabaseFDs, base.FDs-base.DatabaseFDs; other > baseOther+tol.FDs {
		b.fail("syncd holds %d open files besides its database's at quiescence, baseline %d (+%d allowed)", other, baseOther, tol.FDs)
	}
	if final.DatabaseFDs > base.DatabaseFDs+tol.DatabaseFDs {
		b.fail("syncd holds %d descriptors of its database's files at quiescence, baseline %d (+%d allowed)", final.DatabaseFDs, base.DatabaseFDs, tol.DatabaseFDs)
	}
	return b.done()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
