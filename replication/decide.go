package replication

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/syncd-dev/syncd/ledger"
	"github.com/syncd-dev/syncd/syncproto"
)

// RecordKey names a record within a batch's tenant.
type RecordKey struct{ Model, Key string }

// View is the state a batch is decided against, read by State.Load: for
// every write the edge did not refuse, the record of its key (when one
// exists, tombstones included) and the ledger's answer about its op id;
// and the oplog head.
type View struct {
	Records map[RecordKey]Record
	// Ledger holds the replay ledger's answer about each op id, as the
	// State read it before the batch.
	Ledger map[string]ledger.Answer
	// Head is the oplog's head: the batch's first applied write is Head+1.
	Head uint64
	// Scopes are the declarations writes of scoped models are checked
	// against; nil when none are declared.
	Scopes *Scopes
	// Members counts the live membership rows granting each scope value to
	// each user, for the values and users the batch's writes touch (absent:
	// none); Founded holds the (scope, value) pairs with a membership row,
	// live or deleted. State.Load fills both with loadScopes.
	Members map[MemberKey]int
	Founded map[[2]string]bool
}

// Effects is what deciding a batch produced: the answers, and the rows a
// State writes to carry it out, all in the order they were decided.
type Effects struct {
	// Results holds one answer per write of the batch, at the same index.
	// The answer of a stale write (see Stale) is the zero Result.
	Results []syncproto.Result
	// Entries are the oplog entries to append, with consecutive seqs from
	// View.Head+1 and AppliedAt set; each one's Record() is its key's new
	// state.
	Entries []Entry
	// Conflicts are the conflict-log rows, DecidedAt set, ID zero.
	Conflicts []ConflictEntry
	// Decisions are the ledger rows recording every decided write.
	Decisions []ledger.Decision
	// Requested is the requested set the batch records, nil when none.
	Requested *RequestedSet
	// Stale lists the writes (indexes into the batch) whose hook answer was
	// given about a version of the key that is no longer current: nothing
	// was decided or recorded for them, and the edge asks the hook again.
	Stale []int
}

// ErrMalformedBatch is wrapped by Decide when a batch or its view breaks
// the contract (a hook write without an answer, a view missing a write's
// ledger answer, a stored result that does not decode). Nothing of the
// batch is to be kept: it is a bug in the caller or a corrupt store.
var ErrMalformedBatch = errors.New("malformed batch")

// Decide decides every write of b against v, in order, and returns the
// answers and the rows that carry them out. It is the state machine's
// transition: pure (no clock, no I/O, no randomness), so every replica
// that decides the same batch against the same view produces the same
// effects. Later writes of the batch see the effects of earlier ones (a
// key written twice, an op id sent twice).
//
// Per write, in this order: the edge's refusal answers rejected, nothing
// recorded; the ledger answers a resend duplicate (with the first
// decision's result) or, when its content differs, rejected op_id_reused;
// an op the ledger may have forgotten is answered expired and never
// applied; otherwise the write's policy decides (LWW, optimistic, or the
// hook's answer while still current) and the decision is recorded in the
// ledger.
func Decide(v View, b Batch) (Effects, error) {
	n := len(b.Writes)
	d := decider{
		view: v, batch: &b, head: v.Head,
		records: make(map[RecordKey]int, n),
		decided: make(map[string]int, n),
		members: maps.Clone(v.Members),
		founded: maps.Clone(v.Founded),
		fx: Effects{
			Results:   make([]syncproto.Result, n),
			Entries:   make([]Entry, 0, n),
			Decisions: make([]ledger.Decision, 0, n),
		},
	}
	if d.members == nil {
		d.members, d.founded = map[MemberKey]int{}, map[[2]string]bool{}
	}
	for i := range b.Writes {
		if err := d.decide(i); err != nil {
			return Effects{}, fmt.Errorf("decide batch of %s: write %d: %w", b.ClientID, i, err)
		}
	}
	d.fx.Requested = requestedOf(&b)
	return d.fx, nil
}

// decider holds one Decide call's progress: the view, updated by the
// batch's own effects.
type decider struct {
	view    View
	batch   *Batch
	head    uint64
	records map[RecordKey]int // keys this batch wrote: the index of the last entry in fx.Entries
	decided map[string]int    // op ids this batch decided: the index in fx.Decisions
	members map[MemberKey]int // view.Members as this batch left them
	founded map[[2]string]bool
	fx      Effects
}

type recordState struct {
	rec    Record
	exists bool
}

func (d *decider) decide(i int) error {
	w := &d.batch.Writes[i]
	m := &w.Mutation
	if w.Refusal != nil {
		d.fx.Results[i] = rejected(m.OpID, w.Refusal)
		d.fx.Results[i].AcceptedVersions = w.Accepted
		return nil
	}
	digest := m.Digest()
	prior, outcome, err := d.lookup(m.OpID)
	if err != nil {
		return err
	}
	switch outcome {
	case ledger.Hit:
		if string(prior.Digest) != digest {
			d.fx.Results[i] = rejected(m.OpID, syncproto.Errorf(syncproto.CodeOpIDReused,
				"op_id %s was already decided for a different mutation", m.OpID))
			return nil
		}
		res, err := duplicateOf(prior)
		if res.Winner != nil && d.view.Scopes.Of(m.Model) != nil {
			withhold(res.Winner) // the writer's grants may have changed since
		}
		d.fx.Results[i] = res
		return err
	case ledger.Expired:
		d.fx.Results[i] = syncproto.Result{OpID: m.OpID, Status: syncproto.StatusExpired,
			Message: "older than the replay ledger covers; it may or may not have been applied, and is not applied again"}
		return nil
	}

	key := RecordKey{m.Model, m.Key}
	cur := d.record(key)
	p := d.batch.proposal(m)
	if w.Upcast != nil {
		p.Value = w.Upcast
	}
	sd := d.view.Scopes.Of(m.Model)
	var sc scoped
	if sd != nil {
		var refusal *syncproto.Error
		if sc, refusal = d.checkScope(sd, p, cur); refusal != nil {
			d.fx.Results[i] = rejected(m.OpID, refusal)
			return nil
		}
	}
	dec, stale, err := decideWrite(w, cur.rec, cur.exists, p)
	if errors.Is(err, ErrBaseVersionRequired) {
		d.fx.Results[i] = rejected(m.OpID, syncproto.Errorf(syncproto.CodeMissingBaseVersion, "model %s uses optimistic concurrency: base_version is required", m.Model))
		return nil
	}
	if err != nil {
		return err
	}
	if stale {
		d.fx.Stale = append(d.fx.Stale, i)
		return nil
	}

	var res syncproto.Result
	switch dec.Outcome {
	case OutcomeApplied:
		d.head++
		e := NewEntry(dec.Record, d.batch.ClientID)
		e.Seq, e.AppliedAt = d.head, d.batch.At
		if sd != nil {
			d.stampScope(&e, sd, sc, cur)
		}
		d.fx.Entries = append(d.fx.Entries, e)
		d.records[key] = len(d.fx.Entries) - 1
		res = syncproto.Result{OpID: m.OpID, Status: syncproto.StatusApplied, Version: e.Version, Seq: e.Seq, HLC: e.HLC, Upcast: w.Upcast != nil}
	case OutcomeSuperseded:
		res = syncproto.Result{OpID: m.OpID, Status: syncproto.StatusSuperseded, Message: dec.Reason, Winner: d.winner(sd, dec.Winner)}
	case OutcomeConflict:
		res = syncproto.Result{OpID: m.OpID, Status: syncproto.StatusConflict, Message: dec.Reason, Winner: d.winner(sd, dec.Winner)}
	default:
		return fmt.Errorf("%w: unknown outcome %q", ErrMalformedBatch, dec.Outcome)
	}
	if dec.Conflict != nil {
		c := *dec.Conflict
		c.DecidedAt = d.batch.At
		if w.Upcast != nil && c.Loser.OpID == m.OpID {
			c.Loser.Value = m.Value // the log keeps what the device sent
		}
		d.fx.Conflicts = append(d.fx.Conflicts, c)
	}
	stored, err := json.Marshal(res)
	if err != nil {
		return err
	}
	ld := ledger.Decision{Scope: d.batch.Tenant, OpID: m.OpID, OpTime: time.UnixMilli(m.HLC.Wall).UTC(),
		Digest: []byte(digest), Result: stored, DecidedAt: d.batch.At}
	d.fx.Decisions = append(d.fx.Decisions, ld)
	d.decided[m.OpID] = len(d.fx.Decisions) - 1
	d.fx.Results[i] = res
	return nil
}

// lookup answers whether op was decided: by this batch, or before it.
func (d *decider) lookup(opID string) (ledger.Decision, ledger.Outcome, error) {
	if i, ok := d.decided[opID]; ok {
		return d.fx.Decisions[i], ledger.Hit, nil
	}
	a, ok := d.view.Ledger[opID]
	if !ok {
		return ledger.Decision{}, 0, fmt.Errorf("%w: the view has no ledger answer for op %s", ErrMalformedBatch, opID)
	}
	return a.Decision, a.Outcome, nil
}

// record returns key's current state: as this batch left it, or as viewed.
func (d *decider) record(key RecordKey) recordState {
	if i, ok := d.records[key]; ok {
		return recordState{rec: d.fx.Entries[i].Record(), exists: true}
	}
	rec, ok := d.view.Records[key]
	return recordState{rec: rec, exists: ok}
}

// decideWrite applies w's policy. stale reports a hook answer about a
// version that is no longer current.
func decideWrite(w *Write, current Record, exists bool, p Proposal) (dec Decision, stale bool, err error) {
	if w.Policy != syncproto.PolicyHook {
		dec, err = Resolve(w.Policy, current, exists, p)
		return dec, false, err
	}
	if err := p.validate(); err != nil {
		return Decision{}, false, err
	}
	if !exists {
		current = Record{}
	}
	switch {
	case w.Hook == nil:
		return Decision{}, false, fmt.Errorf("%w: op %s of hook model %s has no hook answer", ErrMalformedBatch, p.OpID, p.Model)
	case w.Hook.Fallback != "":
		return lwwFallback(current, exists, p, w.Hook.Fallback), false, nil
	case w.Hook.Version != current.Version:
		return Decision{}, true, nil
	case w.Hook.Result.validate() != nil:
		return lwwFallback(current, exists, p, FallbackInvalid), false, nil
	}
	return decideHook(current, p, w.Hook.Result), false, nil
}

// winner is the wire form of the state that stands. A key that was never
// written is version 0 and deleted (PROTOCOL.md, push_result).
func winner(r Record) *syncproto.Winner {
	return &syncproto.Winner{Version: r.Version, Value: r.Value, HLC: r.HLC, Deleted: r.Deleted || r.Version == 0}
}

// rejected is the result refusing a mutation. An op id that is not a
// canonical UUID is not echoed (PROTOCOL.md 5.4): the result would not be
// valid, and the client matches it by position.
func rejected(opID string, e *syncproto.Error) syncproto.Result {
	if syncproto.ValidateOpID(opID) != nil {
		opID = ""
	}
	return syncproto.Result{OpID: opID, Status: syncproto.StatusRejected, Code: e.Code, Message: e.Message}
}

// duplicateOf answers a resend with the stored result of the first decision.
func duplicateOf(prior ledger.Decision) (syncproto.Result, error) {
	var orig syncproto.Result
	if err := json.Unmarshal(prior.Result, &orig); err != nil {
		return syncproto.Result{}, fmt.Errorf("%w: stored result of %s: %v", ErrMalformedBatch, prior.OpID, err)
	}
	orig.OriginalStatus, orig.Status = orig.Status, syncproto.StatusDuplicate
	return orig, nil
}

// scoped is what checkScope found of a write to a scoped model: its
// record's scope value and member after the write.
type scoped struct {
	value, member string
}

// holds reports whether the batch's sender holds value of scope: by its
// token, or by membership rows as the batch has left them so far.
func (d *decider) holds(scope, value string) bool {
	if d.batch.Grants.Has(scope, value) {
		return true
	}
	return d.batch.User != "" && d.members[MemberKey{scope, value, d.batch.User}] > 0
}

// checkScope checks a write to a model of scope sd (PROTOCOL.md 19.2): the
// sender must hold the record's current scope value and, for a put, the
// new one, which must be a valid scope value; a put of a membership row
// naming the sender itself founds a value nobody holds a membership row
// of.
func (d *decider) checkScope(sd *ScopeDecl, p Proposal, cur recordState) (scoped, *syncproto.Error) {
	old := ""
	if cur.exists {
		old = cur.rec.ScopeValue
	}
	if old != "" && !d.holds(sd.Name, old) {
		return scoped{}, forbiddenScope(sd, old)
	}
	if old == "" && cur.exists && !cur.rec.Deleted && !d.batch.Grants.All(sd.Name) {
		// A live record without a scope value (its value had no valid scope
		// member when the scope was declared) belongs to no value: only a
		// principal holding every value of the scope may write it.
		return scoped{}, syncproto.Errorf(syncproto.CodeForbiddenScope, "scope %s: record %s/%s has no scope value; only a grant of every value (%q) may write it", sd.Name, p.Model, p.Key, syncproto.AllValues)
	}
	if p.Op == syncproto.OpDelete {
		return scoped{value: old}, nil
	}
	value, err := sd.ValueOf(p.Model, p.Value)
	if err != nil {
		return scoped{}, err
	}
	member := sd.MemberOf(p.Model, p.Value)
	founding := member != "" && member == d.batch.User && !d.founded[[2]string{sd.Name, value}]
	if !d.holds(sd.Name, value) && !founding {
		return scoped{}, forbiddenScope(sd, value)
	}
	return scoped{value: value, member: member}, nil
}

func forbiddenScope(sd *ScopeDecl, value string) *syncproto.Error {
	return syncproto.Errorf(syncproto.CodeForbiddenScope, "scope %s value %q is not granted to this principal", sd.Name, value)
}

// stampScope sets e's scope fields from sc and the record before it, and
// records the membership grants e changes (Entry.Grants).
func (d *decider) stampScope(e *Entry, sd *ScopeDecl, sc scoped, cur recordState) {
	if cur.exists {
		e.ScopeOld = cur.rec.ScopeValue
	}
	e.ScopeValue, e.Member = sc.value, sc.member
	if sd.Membership == nil || sd.Membership.Model != e.Model {
		return
	}
	var before, after MemberKey
	if cur.exists && !cur.rec.Deleted && cur.rec.Member != "" {
		before = MemberKey{sd.Name, cur.rec.ScopeValue, cur.rec.Member}
	}
	if e.Member != "" {
		after = MemberKey{sd.Name, e.ScopeValue, e.Member}
		d.founded[[2]string{sd.Name, e.ScopeValue}] = true
	}
	if e.ScopeValue != "" {
		d.founded[[2]string{sd.Name, e.ScopeValue}] = true
	}
	if before == after {
		return
	}
	if before.User != "" {
		if d.members[before]--; d.members[before] == 0 {
			e.Grants = append(e.Grants, GrantChange{User: before.User, Scope: sd.Name, Value: before.Value, Held: false})
		}
	}
	if after.User != "" {
		if d.members[after]++; d.members[after] == 1 {
			e.Grants = append(e.Grants, GrantChange{User: after.User, Scope: sd.Name, Value: after.Value, Held: true})
		}
	}
}

// winner is the wire form of the state that stands, its value withheld
// when its record has a scope value the sender does not hold.
func (d *decider) winner(sd *ScopeDecl, r Record) *syncproto.Winner {
	w := winner(r)
	if sd != nil && r.ScopeValue != "" && !d.holds(sd.Name, r.ScopeValue) {
		withhold(w)
	}
	return w
}

// withhold leaves a winner's value out (Winner.ValueWithheld).
func withhold(w *syncproto.Winner) {
	if !w.Deleted {
		w.Value, w.ValueOmitted, w.ValueWithheld = nil, false, true
	}
}
