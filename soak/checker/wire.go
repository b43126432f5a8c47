package checker

import (
	"fmt"
	"sort"

	"github.com/syncd-dev/syncd/soak/journal"
)

// grantKey names one user's hold on one scope value in one tenant.
type grantKey struct{ tenant, user, scope, value string }

// holding is when one user held one scope value through membership rows:
// before the oplog's oldest retained entry (initial), and the seqs of the
// entries that changed it, ascending.
type holding struct {
	initial bool
	flips   []uint64
}

// at reports whether the value was held once the entry at seq (and every
// one before it) was applied.
func (h *holding) at(seq uint64) bool {
	n := sort.Search(len(h.flips), func(i int) bool { return h.flips[i] > seq })
	return h.initial != (n%2 == 1)
}

// memberRow is what one row of a membership model grants: its scope value
// to user ("" when the row grants nothing: absent, deleted, or naming no
// user).
type memberRow struct{ value, user string }

// grantHistory says, at every seq the oplog retains, which scope values
// each user held through rows of membership models. It is derived from
// the server's records (the state at the head) by undoing the retained
// entries of membership models from the newest: each entry's row before
// it is the key's previous retained entry, or nothing for a version 1.
// A key whose earlier entries were compacted has its row before the
// oldest retained entry taken from the grant changes the server recorded
// with that entry (the one part not derived from the rows themselves).
type grantHistory struct {
	held map[grantKey]*holding
	// fromRecorded counts the keys whose row before the oplog's floor came
	// from the server's recorded grant changes.
	fromRecorded int
}

func newGrantHistory(s *State, ix *index) *grantHistory {
	h := &grantHistory{held: map[grantKey]*holding{}}
	count := map[grantKey]int{}
	rows := map[recordKey]memberRow{}
	for i := range s.Server.Records {
		r := &s.Server.Records[i]
		sc := s.Server.membershipScope(r.Model)
		if sc == nil {
			continue
		}
		row := memberRow{value: r.ScopeValue}
		if !r.Deleted {
			row.user = r.Member
		}
		rows[recordKey{r.Tenant, r.Model, r.Key}] = row
		if row.user != "" {
			count[grantKey{r.Tenant, row.user, sc.Name, row.value}]++
		}
	}
	var entries []*OplogEntry
	for i := range s.Server.Oplog {
		if e := &s.Server.Oplog[i]; s.Server.membershipScope(e.Model) != nil {
			entries = append(entries, e)
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Seq > entries[j].Seq })
	flips := map[grantKey][]uint64{} // newest first
	for _, e := range entries {
		sc := s.Server.membershipScope(e.Model)
		k := recordKey{e.Tenant, e.Model, e.Key}
		after, before := rows[k], h.rowBefore(e, ix.oplogByKey[k], sc)
		// was: whether each grant the row gives after or before e was
		// held after e; undoing e may flip it, at e's seq.
		was := map[grantKey]bool{}
		grant := func(r memberRow) grantKey { return grantKey{e.Tenant, r.user, sc.Name, r.value} }
		for _, r := range []memberRow{after, before} {
			if _, seen := was[grant(r)]; r.user != "" && !seen {
				was[grant(r)] = count[grant(r)] > 0
			}
		}
		if after.user != "" {
			count[grant(after)]--
		}
		if before.user != "" {
			count[grant(before)]++
		}
		for g, held := range was {
			if count[g] > 0 != held {
				flips[g] = append(flips[g], e.Seq)
			}
		}
		rows[k] = before
	}
	for g, n := range count {
		h.held[g] = &holding{initial: n > 0}
	}
	for g, seqs := range flips {
		hd := h.held[g]
		if hd == nil {
			hd = &holding{}
			h.held[g] = hd
		}
		for i := len(seqs) - 1; i >= 0; i-- {
			hd.flips = append(hd.flips, seqs[i])
		}
	}
	return h
}

// rowBefore is what e's key granted before e: the key's previous retained
// entry (keyEntries is the key's retained entries, ascending), nothing
// before a version 1, else (its earlier entries compacted) the user the
// server recorded as losing e's old value through it.
func (h *grantHistory) rowBefore(e *OplogEntry, keyEntries []*OplogEntry, sc *Scope) memberRow {
	i := sort.Search(len(keyEntries), func(i int) bool { return keyEntries[i].Seq >= e.Seq })
	if i > 0 {
		p := keyEntries[i-1]
		if p.Op == "delete" {
			return memberRow{value: p.ScopeValue} // a tombstone grants nothing
		}
		return memberRow{value: p.ScopeValue, user: p.Member}
	}
	if e.Version <= 1 {
		return memberRow{}
	}
	h.fromRecorded++
	for _, g := range e.Grants {
		if !g.Held && g.Scope == sc.Name && g.Value == e.ScopeOld {
			return memberRow{value: e.ScopeOld, user: g.User}
		}
	}
	return memberRow{value: e.ScopeOld}
}

// holds reports whether user held value of scope through membership rows
// once the entry at seq was applied.
func (h *grantHistory) holds(tenant, user, scope, value string, seq uint64) bool {
	hd := h.held[grantKey{tenant, user, scope, value}]
	return hd != nil && hd.at(seq)
}

// followsAt reports whether client c followed value of scope sc once the
// entry at seq was applied: requested (Want), and granted by its token or
// by a live membership row of its user at that seq.
func (s *State) followsAt(h *grantHistory, c *Client, sc *Scope, value string, seq uint64) bool {
	if c.Want != nil && !c.Want.Has(sc.Name, value) {
		return false
	}
	if c.Grants.Has(sc.Name, value) {
		return true
	}
	return sc.Membership != "" && c.User != "" && h.holds(c.Tenant, c.User, sc.Name, value, seq)
}

// checkWire is the part of invariant 4 judged while the churn ran, from
// what each client journaled as received from the server in models a scope
// covers (journal.KindReceived, and journal.KindSnapshot for the rows of a
// snapshot it resynced from): every row (a feed entry, a backfill row or a
// snapshot row, put or delete) that reached a client at seq S must be of a scope
// value the client followed at S, both the value of the version it was
// sent (as the oplog wrote it) and the value of the key at S (a row that
// moved away and was sent as it was before is a leak too). "At S" is
// before or after the entry at S: an entry that changes a grant is sent
// with the grants before it (a revoking delete reaches the member it
// revokes). A row the client was sent of a value it did not follow is a
// leak naming the client, the row, the value and the seq. A row sent with
// a scope value other than the one the oplog wrote, or at a seq before
// the version it carries was written, is a lie of the wire and fails too.
//
// What cannot be judged is said in a note: rows received at seqs the
// compacted oplog no longer covers, rows without a position, snapshot
// rows with the client's own write pending over them, and changes a
// lagging subscription dropped.
//
// It returns how many received rows it judged.
func checkWire(s *State, ix *index, b *verdict) int {
	if len(s.Server.Scopes) == 0 {
		return 0
	}
	h := newGrantHistory(s, ix)
	floor := ix.oldestSeq
	var judged, early, unplaced, resyncs, snapshotRows, lags, clients int
	for ci := range s.Clients {
		c := &s.Clients[ci]
		received := false
		for ji, e := range c.Journal {
			switch e.Kind {
			case journal.KindResync:
				resyncs++
				continue
			case journal.KindLagged:
				lags++
				continue
			case journal.KindSnapshot:
				if cameLater(e, c.Journal[ji+1:]) {
					continue
				}
			case journal.KindReceived:
			default:
				continue
			}
			sc := s.Server.scopeOf(e.Model)
			if e.Op == "evict" || sc == nil {
				continue
			}
			received = true
			switch {
			case e.Seq == 0:
				unplaced++
				continue
			case floor == 0 || e.Seq < floor:
				early++
				continue
			}
			judged++
			if e.Kind == journal.KindSnapshot {
				snapshotRows++
			}
			b.check()
			s.judgeReceived(h, ix, c, sc, e, c.Journal[ji+1:], b)
		}
		if received {
			clients++
		}
	}
	b.note("at the wire: %d rows of scoped models received by %d clients judged against the grants at the seq each was read at (membership rows' history in the oplog, token grants)", judged, clients)
	if early > 0 {
		b.note("%d rows received at seqs before %d, which the compacted oplog no longer covers, were not judged", early, floor)
	}
	if h.fromRecorded > 0 {
		b.note("%d membership rows' state before the oplog's floor was taken from the server's recorded grant changes", h.fromRecorded)
	}
	if unplaced > 0 {
		b.note("%d received rows carried no seq and were not judged", unplaced)
	}
	if resyncs > 0 {
		b.note("%d resyncs: %d rows of their snapshots judged at the snapshot's head (counted above); rows with the client's own write pending over them are judged at quiescence only", resyncs, snapshotRows)
	}
	if lags > 0 {
		b.note("%d times a client's change subscription lagged: the changes it dropped were not journaled", lags)
	}
	return judged
}

// judgeReceived judges one received row e of client c (see checkWire);
// later is the rest of c's journal, searched for the row's eviction.
func (s *State) judgeReceived(h *grantHistory, ix *index, c *Client, sc *Scope, e journal.Entry, later []journal.Entry, b *verdict) {
	how := e.Op
	if e.Kind == journal.KindSnapshot {
		how = "in a snapshot"
	}
	row := fmt.Sprintf("%s/%s version %d (%s)", e.Model, e.Key, e.Version, how)
	keyEntries := ix.oplogByKey[recordKey{c.Tenant, e.Model, e.Key}]
	own := e.ScopeValue // the value of the version sent; the journal's when compacted
	var current *OplogEntry
	for _, oe := range keyEntries {
		if oe.Version == e.Version {
			if oe.ScopeValue != e.ScopeValue {
				b.fail("%s received %s at seq %d with scope value %q, but the oplog wrote it (seq %d) with %q", c.ID, row, e.Seq, e.ScopeValue, oe.Seq, oe.ScopeValue)
			}
			if oe.Seq > e.Seq {
				b.fail("%s received %s at seq %d, before the oplog wrote that version (seq %d)", c.ID, row, e.Seq, oe.Seq)
			}
			own = oe.ScopeValue
		}
		if oe.Seq <= e.Seq {
			current = oe
		}
	}
	values := []string{own}
	if current != nil && current.ScopeValue != own {
		values = append(values, current.ScopeValue)
	}
	for _, v := range values {
		if s.followsAt(h, c, sc, v, e.Seq-1) || s.followsAt(h, c, sc, v, e.Seq) {
			continue
		}
		why := fmt.Sprintf("of %s %q", sc.Name, v)
		if v != own {
			why = fmt.Sprintf("whose key had moved to %s %q (seq %d)", sc.Name, v, current.Seq)
		}
		b.fail("%s received %s %s at seq %d, when it did not follow that value (not granted to it, or not requested): a leak%s",
			c.ID, row, why, e.Seq, evictedLater(e, later))
	}
}

// cameLater reports whether a snapshot line's row (read from the replica
// after the snapshot was loaded) came with a change journaled after it: a
// received line of the same key at the same version.
func cameLater(e journal.Entry, later []journal.Entry) bool {
	for _, l := range later {
		if l.Kind == journal.KindReceived && l.Model == e.Model && l.Key == e.Key && l.Version == e.Version {
			return true
		}
	}
	return false
}

// evictedLater says when the client's journal shows the row leaving it
// after e, if it does.
func evictedLater(e journal.Entry, later []journal.Entry) string {
	for _, l := range later {
		if l.Kind == journal.KindReceived && l.Op == "evict" && l.Model == e.Model && l.Key == e.Key {
			return fmt.Sprintf(" (evicted later at seq %d: %s)", l.Seq, l.Reason)
		}
	}
	return ""
}
