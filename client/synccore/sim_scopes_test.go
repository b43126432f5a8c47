package synccore

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// Partial sync in the simulation (PROTOCOL.md section 19). One scope,
// "project", covers "tasks" and the membership model "members" by their
// "p" member. A device's grants are its token's values (changed by the
// operator, which cuts its session) and the live rows of members whose
// "user" is the device (written by the operator, ordered by seq with the
// data). The simulated server follows the contract: a subscription's first
// frame evicts the held values no longer followed, values followed and not
// held are backfilled from the records at the head, the tail is filtered
// by the follow set (a row moving out of it is an evict entry), and a page
// ends at a membership change of its reader, whose lost values are evicted
// with it and whose gained values are backfilled after it.

const simScope = "project"

// scopeStats counts what the schedules exercised of partial sync, for
// TestSimulation's log (the simulation runs on one goroutine).
var scopeStats struct {
	backfillPages, valueEvictions, evictEntries, moves, shares, rescopes, tokenChanges, forbidden int
}

var simScopeValues = []string{"p1", "p2", "p3"}

// simScoped reports whether the project scope covers model.
func simScoped(model string) bool { return model == "tasks" || model == "members" }

// scopeOfValue is a record value's scope value: its "p" member.
func scopeOfValue(v json.RawMessage) string {
	var x struct {
		P string `json:"p"`
	}
	if json.Unmarshal(v, &x) != nil {
		return ""
	}
	return x.P
}

// scopeEntry is the scope value of a key before and after one entry.
type scopeEntry struct{ old, new string }

// memberChange is a membership row written at seq: user holds value from
// then on while live.
type memberChange struct {
	seq         uint64
	user, value string
	live        bool
}

// session is the server's view of a connection's subscription.
type session struct {
	id     uint64
	want   syncproto.ScopeSet
	follow syncproto.ScopeSet // the values followed at sent
	head   uint64             // the head when it started: grant changes before it are already in follow
}

// simDeclared is the server's declaration: syncd --scope
// project=tasks.p,members.p --membership project=members:user.
func simDeclared() *replication.Scopes {
	sc := &replication.Scopes{}
	if err := sc.Set("project=tasks.p,members.p"); err != nil {
		panic(err)
	}
	if err := sc.SetMembership("project=members:user"); err != nil {
		panic(err)
	}
	return sc
}

// noteApplied records the scope values and membership grants of entries
// the server just applied, in order, and checks that the server's state
// machine stamped each entry with the same old and new scope values.
func (s *sim) noteApplied(entries []replication.Entry) error {
	for _, e := range entries {
		if !simScoped(e.Model) {
			continue
		}
		k := replication.RecordKey{Model: e.Model, Key: e.Key}
		old := s.scopeCur[k]
		next := old
		if !e.Deleted {
			next = scopeOfValue(e.Value)
		}
		if e.ScopeOld != old || e.ScopeValue != next {
			return fmt.Errorf("entry %d of %s/%s: the server stamped scope values %q -> %q, the simulation expects %q -> %q", e.Seq, e.Model, e.Key, e.ScopeOld, e.ScopeValue, old, next)
		}
		s.scopeHist[e.Seq] = scopeEntry{old: old, new: next}
		if old != "" && old != next {
			scopeStats.moves++
		}
		s.scopeCur[k] = next
		if e.Model == "members" {
			var m struct {
				User string `json:"user"`
			}
			if !e.Deleted {
				_ = json.Unmarshal(e.Value, &m)
			} else {
				m.User = s.memberOf[k]
			}
			s.memberOf[k] = m.User
			s.members = append(s.members, memberChange{seq: e.Seq, user: m.User, value: next, live: !e.Deleted})
		}
	}
	return nil
}

// resetScopes forgets what noteApplied recorded (a new server replays it).
func (s *sim) resetScopes() {
	s.scopeCur, s.scopeHist, s.memberOf, s.members = map[replication.RecordKey]string{}, map[uint64]scopeEntry{}, map[replication.RecordKey]string{}, nil
}

// grants are the values client holds at seq: its token's and its live
// membership rows'.
func (s *sim) grants(client string, seq uint64) syncproto.ScopeSet {
	g := syncproto.ScopeSet{simScope: slices.Clone(s.tokens[client])}
	live := map[string]bool{}
	for _, m := range s.members {
		if m.seq <= seq && m.user == client {
			live[m.value] = m.live
		}
	}
	for v, ok := range live {
		if ok {
			g[simScope] = append(g[simScope], v)
		}
	}
	g.Normalize()
	return g
}

// followed is grants filtered by a request.
func followed(grants, want syncproto.ScopeSet) syncproto.ScopeSet {
	out := syncproto.ScopeSet{}
	for _, v := range grants[simScope] {
		if want.Has(simScope, v) {
			out[simScope] = append(out[simScope], v)
		}
	}
	return out
}

// head is the server's newest seq.
func (s *sim) head() uint64 {
	h, _ := s.srv.Snapshot(replication.Scope{Tenant: simTenant, Models: []string{"-"}})
	return h
}

// startSession answers a subscribe on cn: the first frame's evictions and
// the backfills of the values followed and not held.
func (s *sim) startSession(cn *conn, m msg) {
	client := cn.client.id
	head := s.head()
	sess := &session{id: m.sub, want: m.sub0.Scopes, head: head}
	sess.follow = followed(s.grants(client, head), sess.want)
	cn.sess, cn.subscribed, cn.sent = sess, true, m.after
	var ev []syncproto.Eviction
	for _, v := range m.sub0.Have[simScope] {
		switch {
		case !sess.want.Has(simScope, v):
			ev = append(ev, syncproto.Eviction{Scope: simScope, Value: v, Reason: syncproto.EvictUnsubscribed})
		case !sess.follow.Has(simScope, v):
			ev = append(ev, syncproto.Eviction{Scope: simScope, Value: v, Reason: syncproto.EvictRevoked})
		}
	}
	if !sess.want.All(simScope) {
		for _, v := range sess.want[simScope] {
			if !sess.follow.Has(simScope, v) && !m.sub0.Have.Has(simScope, v) {
				ev = append(ev, syncproto.Eviction{Scope: simScope, Value: v, Reason: syncproto.EvictNotGranted})
			}
		}
	}
	if len(ev) > 0 {
		cn.down = append(cn.down, msg{sub: sess.id, changes: &Changes{From: m.after, Next: m.after, Evictions: ev}})
	}
	for _, v := range sess.follow[simScope] {
		if !m.sub0.Have.Has(simScope, v) {
			s.backfill(cn, v, m.sub0.Resume[simScope][v])
		}
	}
}

// backfill queues the pages of value's live rows at the head, after the
// position resume (a "model/key"; "" for the start), two rows a page.
func (s *sim) backfill(cn *conn, value, resume string) {
	head, recs := s.srv.Snapshot(replication.Scope{Tenant: simTenant, AllModels: true})
	var rows []syncproto.Change
	for _, r := range recs {
		if simScoped(r.Model) && !r.Deleted && s.scopeCur[replication.RecordKey{Model: r.Model, Key: r.Key}] == value && r.Model+"/"+r.Key > resume {
			c := s.change(r.Seq, r)
			rows = append(rows, c)
		}
	}
	for {
		n := min(len(rows), 2)
		page := &Backfill{Scope: simScope, Value: value, Entries: rows[:n], Done: n == len(rows)}
		if n > 0 {
			page.LastKey = rows[n-1].Model + "/" + rows[n-1].Key
		}
		cn.down = append(cn.down, msg{sub: cn.sess.id, backfill: page, at: head})
		scopeStats.backfillPages++
		rows = rows[n:]
		if page.Done {
			return
		}
	}
}

// sees is what the reader of sess receives of the entry at seq of model:
// the entry, an evict entry, or nothing.
func (s *sim) sees(sess *session, seq uint64, model string) (deliver, evict bool) {
	if sess == nil || !simScoped(model) {
		return true, false
	}
	h := s.scopeHist[seq]
	if sess.follow.Has(simScope, h.new) {
		return true, false
	}
	if sess.follow.Has(simScope, h.old) && !s.f.serverForgetsEvict {
		scopeStats.evictEntries++
		return false, true
	}
	return false, false
}

// regrant reports whether the entry at seq changes the membership grants
// of client after the session started.
func (s *sim) regrant(sess *session, client string, seq uint64) bool {
	if sess == nil || seq <= sess.head {
		return false
	}
	for _, m := range s.members {
		if m.seq == seq {
			return m.user == client
		}
	}
	return false
}

// refollow recomputes sess's follow set at seq, returning the evictions
// of the values lost, and queues the backfills of the values gained on cn
// (after the frame that carries the evictions: the caller queues that
// first and calls backfillGained).
func (s *sim) refollow(sess *session, client string, seq uint64) (ev []syncproto.Eviction, gained []string) {
	next := followed(s.grants(client, seq), sess.want)
	for _, v := range sess.follow[simScope] {
		if !next.Has(simScope, v) {
			ev = append(ev, syncproto.Eviction{Scope: simScope, Value: v, Reason: syncproto.EvictRevoked})
		}
	}
	for _, v := range next[simScope] {
		if !sess.follow.Has(simScope, v) {
			gained = append(gained, v)
		}
	}
	sess.follow = next
	return ev, gained
}

// rescope is the app changing what c requests: durable, then the core is
// told.
func (s *sim) rescope(c *simClient) error {
	want := syncproto.ScopeSet{simScope: {syncproto.AllValues}}
	if s.rng.IntN(3) > 0 {
		var values []string
		for _, v := range simScopeValues {
			if s.rng.IntN(2) == 0 {
				values = append(values, v)
			}
		}
		want[simScope] = values
	}
	c.want = want
	scopeStats.rescopes++
	return s.feed(c, Rescope{Want: cloneSet(want)})
}

// changeToken is the operator issuing c a token with other grants: its
// session ends, and the next one follows them.
func (s *sim) changeToken(c *simClient) {
	var values []string
	for _, v := range simScopeValues {
		if s.rng.IntN(3) == 0 {
			values = append(values, v)
		}
	}
	s.tokens[c.id] = values
	scopeStats.tokenChanges++
	s.cut(c)
}

// share is the operator writing a membership row: granting (a put) or
// revoking (a delete) a value to a device's user.
func (s *sim) share(c *simClient) error {
	v := simScopeValues[s.rng.IntN(len(simScopeValues))]
	n := len(s.writes) + len(s.history)
	m := syncproto.Mutation{OpID: fmt.Sprintf("0193a000-0000-7000-8000-%012d", n), Model: "members", Key: c.id + "-" + v, Op: syncproto.OpPut,
		HLC: syncproto.Timestamp{Wall: s.now.UnixMilli(), Origin: "operator"}}
	if s.rng.IntN(2) == 0 {
		m.Op = syncproto.OpDelete
	} else {
		m.Value = json.RawMessage(fmt.Sprintf(`{"user":%q,"p":%q}`, c.id, v))
	}
	if _, err := s.apply(s.record(serverEvent{now: s.now, clientID: "operator", muts: []syncproto.Mutation{m}, grants: []string{syncproto.AllValues}})); err != nil {
		return err
	}
	scopeStats.shares++
	return s.publish()
}

// filtered is what client may hold of the server's records at the head:
// every record of a model no scope covers, and the live rows of followed
// values.
func (s *sim) filtered(c *simClient, recs []replication.Record) map[replication.RecordKey]replication.Record {
	follow := followed(s.grants(c.id, s.head()), c.want)
	out := map[replication.RecordKey]replication.Record{}
	for _, r := range recs {
		k := replication.RecordKey{Model: r.Model, Key: r.Key}
		if simScoped(r.Model) && (r.Deleted || !follow.Has(simScope, s.scopeCur[k])) {
			continue
		}
		out[k] = r
	}
	return out
}

// held is c's replica as the app reads it: tombstones of covered models
// left out (a backfill brings live rows only).
func held(c *simClient) map[replication.RecordKey]syncproto.Change {
	out := maps.Clone(c.replica)
	maps.DeleteFunc(out, func(k replication.RecordKey, e syncproto.Change) bool { return simScoped(k.Model) && e.Deleted })
	return out
}

// applyScoped is the driver's Apply on the simulated replica: entries by
// version (an evict entry drops its row unless held newer), then the
// evictions, then the scope state.
func applyScoped(c *simClient, a Apply) {
	for _, e := range a.Entries {
		k := replication.RecordKey{Model: e.Model, Key: e.Key}
		if e.Op == syncproto.OpEvict {
			if got, ok := c.replica[k]; ok && got.Version <= e.Version {
				delete(c.replica, k)
			}
			continue
		}
		if got, ok := c.replica[k]; ok && got.Version >= e.Version {
			continue
		}
		if e.Deleted && simScoped(e.Model) && e.ScopeValue == "" {
			e.ScopeValue = c.replica[k].ScopeValue
		}
		c.replica[k] = e
	}
	for _, ev := range a.Evictions {
		scopeStats.valueEvictions++
		maps.DeleteFunc(c.replica, func(k replication.RecordKey, e syncproto.Change) bool {
			return simScoped(k.Model) && e.ScopeValue == ev.Value
		})
	}
	if a.Scopes != nil {
		c.scopes = a.Scopes.Clone()
	}
	c.cursor = a.Cursor
}

// applyBackfill is the driver's ApplyBackfill on the simulated replica.
func applyBackfill(c *simClient, a ApplyBackfill) {
	for _, e := range a.Entries {
		k := replication.RecordKey{Model: e.Model, Key: e.Key}
		if got, ok := c.replica[k]; ok && got.Version >= e.Version {
			continue
		}
		c.replica[k] = e
	}
	c.scopes = a.Scopes.Clone()
}

// keepWanted is the driver after a snapshot: rows of values not requested
// dropped, the values left held complete.
func keepWanted(c *simClient) syncproto.ScopeSet {
	have := syncproto.ScopeSet{}
	for k, e := range c.replica {
		if !simScoped(k.Model) {
			continue
		}
		if !c.want.Has(simScope, e.ScopeValue) {
			delete(c.replica, k)
			continue
		}
		have[simScope] = append(have[simScope], e.ScopeValue)
	}
	have.Normalize()
	return have
}

// barrier reports whether a frame is one the simulation never reorders
// or repeats.
func barrier(m msg) bool {
	return m.subscr || m.backfill != nil || (m.changes != nil && len(m.changes.Evictions) > 0)
}

// diffKeys names the keys one side holds and the other does not.
func diffKeys(replica map[replication.RecordKey]syncproto.Change, server map[replication.RecordKey]replication.Record) string {
	out := ""
	for k, e := range replica {
		if _, ok := server[k]; !ok {
			out += fmt.Sprintf("extra %v (scope value %q) ", k, e.ScopeValue)
		}
	}
	for k := range server {
		if _, ok := replica[k]; !ok {
			out += fmt.Sprintf("missing %v ", k)
		}
	}
	return out
}

// checkScopeStates checks what a quiescent device's status says of its
// values: every value it follows is ready and held complete; a value it
// requests by name and is not granted is not_granted (or revoked, when it
// held it before).
func (s *sim) checkScopeStates(c *simClient, head uint64) error {
	grants := s.grants(c.id, head)
	st := c.core.Status().Scopes
	for _, v := range followed(grants, c.want)[simScope] {
		if state, _ := st.Of(simScope, v); state != ScopeReady || !c.scopes.Have.Has(simScope, v) {
			return fmt.Errorf("%s: follows %s, whose state is %q (held complete: %v)", c.id, v, state, c.scopes.Have.Has(simScope, v))
		}
	}
	if c.want.All(simScope) {
		return nil
	}
	for _, v := range c.want[simScope] {
		if state, _ := st.Of(simScope, v); !grants.Has(simScope, v) && state != ScopeNotGranted && state != ScopeRevoked {
			return fmt.Errorf("%s: requests %s, not granted, whose state is %q", c.id, v, state)
		}
	}
	return nil
}
