package synccore

import (
	"maps"
	"slices"
	"strings"

	"github.com/syncd-dev/syncd/syncproto"
)

// Scopes is a device's durable partial-sync state (PROTOCOL.md section
// 19): what it requests, what it holds complete at its cursor, and where
// each interrupted backfill resumes. The driver keeps it durably (with the
// records it describes, in one transaction) and gives it back in Welcomed.
type Scopes struct {
	// Want is the request sent as subscribe.scopes: by declared scope,
	// its values or syncproto.AllValues. Never nil once welcomed: a
	// subscription always carries scopes.
	Want syncproto.ScopeSet
	// Have are the values held complete at the cursor (subscribe.have).
	Have syncproto.ScopeSet
	// Resume is, by scope and value, the last_key of the last backfill
	// page applied of a value not yet complete (subscribe.resume).
	Resume map[string]map[string]string
	// Lost is, by scope and value, why a value was evicted (revoked,
	// not_granted, unsubscribed), until it is backfilled again; at most
	// MaxLostScopes values.
	Lost map[string]map[string]string
}

// Clone returns a deep copy of s.
func (s Scopes) Clone() Scopes {
	out := Scopes{Want: cloneSet(s.Want), Have: cloneSet(s.Have), Resume: cloneNested(s.Resume), Lost: cloneNested(s.Lost)}
	if out.Want == nil {
		out.Want = syncproto.ScopeSet{}
	}
	return out
}

func cloneNested(m map[string]map[string]string) map[string]map[string]string {
	out := make(map[string]map[string]string, len(m))
	for name, byValue := range m {
		out[name] = maps.Clone(byValue)
	}
	return out
}

func cloneSet(s syncproto.ScopeSet) syncproto.ScopeSet {
	if s == nil {
		return syncproto.ScopeSet{}
	}
	out := make(syncproto.ScopeSet, len(s))
	for name, values := range s {
		out[name] = slices.Clone(values)
	}
	return out
}

// add puts value into s[scope], keeping it sorted and unique.
func add(s syncproto.ScopeSet, scope, value string) {
	values := s[scope]
	if i, found := slices.BinarySearch(values, value); !found {
		s[scope] = slices.Insert(values, i, value)
	}
}

// remove takes value out of s[scope]; a scope left empty is deleted.
func remove(s syncproto.ScopeSet, scope, value string) {
	values := s[scope]
	if i, found := slices.BinarySearch(values, value); found {
		values = slices.Delete(values, i, i+1)
		if len(values) == 0 {
			delete(s, scope)
			return
		}
		s[scope] = values
	}
}

// ScopeState is what a device knows of one scope value it requested or
// holds.
type ScopeState string

// Scope states (ScopeStatus.State).
const (
	// ScopeBackfilling: requested and not yet complete (its backfill has
	// not arrived in full, or the server has not answered the request).
	ScopeBackfilling ScopeState = "backfilling"
	// ScopeReady: held complete at the cursor; followed live.
	ScopeReady ScopeState = "ready"
	// ScopeRevoked: the principal lost the value's grant; its rows left.
	ScopeRevoked ScopeState = syncproto.EvictRevoked
	// ScopeNotGranted: requested, but the principal is not granted it.
	ScopeNotGranted ScopeState = syncproto.EvictNotGranted
	// ScopeUnsubscribed: no longer requested; its rows left.
	ScopeUnsubscribed ScopeState = syncproto.EvictUnsubscribed
)

// ScopeStatus is one scope value's state.
type ScopeStatus struct {
	Scope, Value string
	State        ScopeState
}

// ScopeStatuses is the state of every scope value a device requested by
// name, holds, is backfilling, or lost since it started; sorted by scope
// and value. A new set replaces it on every change, so Status stays
// comparable with ==.
type ScopeStatuses struct{ Values []ScopeStatus }

// Of returns the state of value of scope, and whether it has one.
func (s *ScopeStatuses) Of(scope, value string) (ScopeState, bool) {
	if s == nil {
		return "", false
	}
	i, found := slices.BinarySearchFunc(s.Values, ScopeStatus{Scope: scope, Value: value}, compareStatus)
	if !found {
		return "", false
	}
	return s.Values[i].State, true
}

func compareStatus(a, b ScopeStatus) int {
	if c := strings.Compare(a.Scope, b.Scope); c != 0 {
		return c
	}
	return strings.Compare(a.Value, b.Value)
}

// scopeKey names one value of one scope.
type scopeKey struct{ scope, value string }

// statuses derives the status of every value c's scope state names.
func (c *Core) scopeStatuses() *ScopeStatuses {
	states := map[scopeKey]ScopeState{}
	for k, reason := range c.lostScopes {
		states[k] = ScopeState(reason)
	}
	for name, values := range c.scopes.Want {
		for _, v := range values {
			if v == syncproto.AllValues {
				continue
			}
			if _, lost := states[scopeKey{name, v}]; !lost {
				states[scopeKey{name, v}] = ScopeBackfilling
			}
		}
	}
	for name, byValue := range c.scopes.Resume {
		for v := range byValue {
			states[scopeKey{name, v}] = ScopeBackfilling
		}
	}
	for name, values := range c.scopes.Have {
		for _, v := range values {
			states[scopeKey{name, v}] = ScopeReady
		}
	}
	if len(states) == 0 {
		return nil
	}
	out := &ScopeStatuses{Values: make([]ScopeStatus, 0, len(states))}
	for k, st := range states {
		out.Values = append(out.Values, ScopeStatus{Scope: k.scope, Value: k.value, State: st})
	}
	slices.SortFunc(out.Values, compareStatus)
	return out
}

// refreshScopes replaces c.status.Scopes when what it says changed: only
// after an input that changed the scope state (scopesDirty), so an input
// of the feed or of a push costs nothing per value followed.
func (c *Core) refreshScopes() {
	if !c.scopesDirty {
		return
	}
	c.scopesDirty = false
	next := c.scopeStatuses()
	if cur := c.status.Scopes; (cur == nil) == (next == nil) && (cur == nil || slices.Equal(cur.Values, next.Values)) {
		return
	}
	c.status.Scopes = next
}

// durable returns the scope state to store: c.scopes with the lost values.
func (c *Core) durable() Scopes {
	s := c.scopes.Clone()
	s.Lost = map[string]map[string]string{}
	for _, k := range c.lostOrder {
		if s.Lost[k.scope] == nil {
			s.Lost[k.scope] = map[string]string{}
		}
		s.Lost[k.scope][k.value] = c.lostScopes[k]
	}
	return s
}

// restore takes up a durable scope state.
func (c *Core) restore(s Scopes) {
	c.scopes = s.Clone()
	c.scopes.Lost = nil
	c.lostScopes, c.lostOrder = map[scopeKey]string{}, nil
	for _, name := range slices.Sorted(maps.Keys(s.Lost)) {
		for _, v := range slices.Sorted(maps.Keys(s.Lost[name])) {
			c.lose(scopeKey{name, v}, s.Lost[name][v])
		}
	}
	c.scopesDirty = true
}

// subscribe is the Subscribe action from the cursor with c's scope state.
func (c *Core) subscribe() Subscribe {
	s := c.scopes.Clone()
	a := Subscribe{After: c.cursor}
	if len(s.Want) > 0 {
		a.Scopes = s.Want
	}
	if len(s.Have) > 0 {
		a.Have = s.Have
	}
	if len(s.Resume) > 0 {
		a.Resume = s.Resume
	}
	return a
}

// backfill applies a backfill page to the scope state and returns the
// action that stores it with its entries.
func (c *Core) backfill(in Backfill, out []Action) []Action {
	if !c.welcomed || c.resyncing || in.Scope == "" {
		return out
	}
	k := scopeKey{in.Scope, in.Value}
	if c.scopes.Have.Has(in.Scope, in.Value) && !c.scopes.Have.All(in.Scope) {
		return out // already complete: a page repeated
	}
	c.regain(k)
	if in.Done {
		if byValue := c.scopes.Resume[in.Scope]; byValue != nil {
			delete(byValue, in.Value)
			if len(byValue) == 0 {
				delete(c.scopes.Resume, in.Scope)
			}
		}
		add(c.scopes.Have, in.Scope, in.Value)
	} else if in.LastKey != "" {
		if c.scopes.Resume[in.Scope] == nil {
			c.scopes.Resume[in.Scope] = map[string]string{}
		}
		c.scopes.Resume[in.Scope][in.Value] = in.LastKey
	}
	return append(out, ApplyBackfill{Scope: in.Scope, Value: in.Value, Entries: in.Entries, Done: in.Done, Scopes: c.durable(), At: in.At})
}

// evict applies changes.evictions to the scope state; it reports whether
// the state changed.
func (c *Core) evict(evictions []syncproto.Eviction) bool {
	for _, e := range evictions {
		remove(c.scopes.Have, e.Scope, e.Value)
		if byValue := c.scopes.Resume[e.Scope]; byValue != nil {
			delete(byValue, e.Value)
			if len(byValue) == 0 {
				delete(c.scopes.Resume, e.Scope)
			}
		}
		c.lose(scopeKey{e.Scope, e.Value}, e.Reason)
	}
	return len(evictions) > 0
}

// MaxLostScopes bounds the values lost (evicted) whose state Status keeps
// reporting: beyond it the longest lost is forgotten (its WaitScope then
// says unsubscribed when the request does not hold it, else waits).
const MaxLostScopes = 1000

// lose records that k was evicted for reason.
func (c *Core) lose(k scopeKey, reason string) {
	if _, ok := c.lostScopes[k]; !ok {
		c.lostOrder = append(c.lostOrder, k)
	}
	c.lostScopes[k] = reason
	for len(c.lostOrder) > MaxLostScopes {
		old := c.lostOrder[0]
		c.lostOrder = c.lostOrder[1:]
		delete(c.lostScopes, old)
	}
}

// regain forgets that k was lost: it is followed again.
func (c *Core) regain(k scopeKey) {
	if _, ok := c.lostScopes[k]; ok {
		delete(c.lostScopes, k)
		c.lostOrder = slices.DeleteFunc(c.lostOrder, func(x scopeKey) bool { return x == k })
	}
}

// Scopes returns a copy of the core's scope state.
func (c *Core) Scopes() Scopes { return c.durable() }
