package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"time"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// Partial sync at the session (PROTOCOL.md section 19): what a principal
// is granted, what a subscription follows, which values it evicts and
// backfills, and how a grant change met by the feed's walk changes that.
// The planning here is pure (no I/O): the session's feed goroutine owns
// one subscriptionScopes and drives it.

// grantsOf returns what p holds of the declared scopes: its token's grants
// (AllValues standing for the whole scope) united with its user's
// membership grants, sorted. nil when no scope is declared.
func (s *Server) grantsOf(ctx context.Context, p auth.Principal) (syncproto.ScopeSet, error) {
	return s.grantsAt(ctx, p, math.MaxUint64)
}

// grantsAt returns what p held of the declared scopes at seq cursor (its
// membership grants rewound to that seq, replication.RewindGrants), or
// now for a cursor at or past the records: what a walk of the log from
// cursor starts from, so that it reads each entry with the grants at the
// entry's own seq. A cursor the log no longer holds gets the grants now
// (the walk answers it resync).
func (s *Server) grantsAt(ctx context.Context, p auth.Principal, cursor uint64) (syncproto.ScopeSet, error) {
	if s.declared().Empty() {
		return nil, nil
	}
	out := declaredTokenGrants(s.declared(), p)
	if p.User == "" {
		return out, nil
	}
	held, at, err := s.store.Records.GrantsAt(ctx, p.Tenant, p.User, s.declared())
	if err != nil {
		return nil, fmt.Errorf("read grants of %s: %w", p.User, err)
	}
	if cursor < at {
		then, err := replication.RewindGrants(ctx, s.store.Log, s.declared(), p.Tenant, p.User, held, cursor, at)
		var ce *replication.CursorError
		switch {
		case err == nil:
			held = then
		case !errors.As(err, &ce):
			return nil, fmt.Errorf("read grants of %s at %d: %w", p.User, cursor, err)
		}
	}
	for name, values := range held {
		if !out.All(name) && scopesDeclare(s.declared(), name) {
			out[name] = append(out[name], values...)
		}
	}
	out.Normalize()
	return out, nil
}

// declaredTokenGrants returns the grants p's token carries of the
// declared scopes (tokenGrants): a scope granted AllValues among other
// values is granted AllValues alone.
func declaredTokenGrants(scopes *replication.Scopes, p auth.Principal) syncproto.ScopeSet {
	out := syncproto.ScopeSet{}
	for name, values := range tokenGrants(p) {
		switch {
		case !scopesDeclare(scopes, name) || len(values) == 0:
		case slices.Contains(values, syncproto.AllValues):
			out[name] = []string{syncproto.AllValues}
		default:
			out[name] = values
		}
	}
	return out
}

func scopesDeclare(scopes *replication.Scopes, name string) bool { return scopes.Named(name) != nil }

// capGrants returns grants with at most max values in all (welcome lists
// at most Limits.MaxScopeValues), the first by scope name then value.
func capGrants(grants syncproto.ScopeSet, max int) syncproto.ScopeSet {
	if grants.Count() <= max {
		return grants
	}
	names := sortedScopes(grants)
	out, left := syncproto.ScopeSet{}, max
	for _, n := range names {
		take := grants[n][:min(left, len(grants[n]))]
		if len(take) > 0 {
			out[n] = take
		}
		left -= len(take)
	}
	return out
}

// backfillJob is one value a subscription backfills: its pages are read
// after position after until done.
type backfillJob struct {
	scope, value string
	after        string
	started      time.Time // when its first page was read
}

// subscriptionScopes is what one subscription (or pull) follows and owes:
// the follow set the feed reads with, the evictions of its first frame,
// the values still to backfill. The feed goroutine owns it.
type subscriptionScopes struct {
	decl *replication.Scopes
	// legacy: the request carried no scopes. It follows every grant and is
	// answered resync (scopes_changed) when that changes.
	legacy bool
	// token holds the token's grants: a membership change never takes
	// them away.
	token syncproto.ScopeSet
	// follow is what the feed delivers (replication.Scope.Follow).
	follow syncproto.ScopeSet
	// all names the scopes requested with AllValues: values granted later
	// join follow. wanted holds, for the other scopes, the values
	// requested (granted or not: a value granted later joins follow).
	all       map[string]bool
	wanted    syncproto.ScopeSet
	max       int
	evictions []syncproto.Eviction // for the subscription's first frame
	backfills []backfillJob        // in order; the first is in progress
}

// planScopes plans a subscription (or, with have and resume nil, a pull)
// of a principal holding grants (tokenOnly: those of its token) against
// the declarations: the follow set, the first frame's evictions and the
// backfills (PROTOCOL.md 19.3). requested nil is a request without scopes.
// It refuses an undeclared scope (invalid_scope) and a follow set, have or
// resume larger than max (too_many_scope_values), before anything grows
// with them.
func planScopes(decl *replication.Scopes, grants, token, requested, have syncproto.ScopeSet, resume map[string]map[string]string, max int) (*subscriptionScopes, *syncproto.Error) {
	sc := &subscriptionScopes{decl: decl, token: token, max: max, all: map[string]bool{}, wanted: syncproto.ScopeSet{}}
	if requested == nil {
		sc.legacy = true
		sc.follow = cloneSet(grants)
		if n := sc.follow.Count(); n > max {
			return nil, syncproto.Errorf(syncproto.CodeTooManyScopeValues, "the principal holds %d scope values, more than max_scope_values %d: subscribe with scopes naming at most %d", n, max, max)
		}
		return sc, nil
	}
	for _, field := range []struct {
		name string
		set  syncproto.ScopeSet
	}{{"scopes", requested}, {"have", have}} {
		for name := range field.set {
			if decl.Named(name) == nil {
				return nil, syncproto.Errorf(syncproto.CodeInvalidScope, "%s: scope %q is not declared on this server", field.name, name)
			}
		}
	}
	for name := range resume {
		if decl.Named(name) == nil {
			return nil, syncproto.Errorf(syncproto.CodeInvalidScope, "resume: scope %q is not declared on this server", name)
		}
	}
	if n := have.Count(); n > max {
		return nil, syncproto.Errorf(syncproto.CodeTooManyScopeValues, "have holds %d scope values, more than max_scope_values %d", n, max)
	}
	resumes := 0
	for _, byValue := range resume {
		resumes += len(byValue)
	}
	if resumes > max {
		return nil, syncproto.Errorf(syncproto.CodeTooManyScopeValues, "resume holds %d scope values, more than max_scope_values %d", resumes, max)
	}
	sc.follow = syncproto.ScopeSet{}
	count := 0
	for _, name := range sortedScopes(requested) {
		values := requested[name]
		if requested.All(name) {
			sc.all[name] = true
			sc.follow[name] = slices.Clone(grants[name])
			count += len(grants[name])
			continue
		}
		sc.wanted[name] = slices.Clone(values)
		count += len(values)
		for _, v := range values {
			if grants.Has(name, v) {
				sc.follow[name] = append(sc.follow[name], v)
			} else if !have.Has(name, v) {
				sc.evictions = append(sc.evictions, syncproto.Eviction{Scope: name, Value: v, Reason: syncproto.EvictNotGranted})
			}
		}
	}
	if count > max {
		return nil, syncproto.Errorf(syncproto.CodeTooManyScopeValues, "scopes request %d scope values (after %q is expanded to the values granted), more than max_scope_values %d", count, syncproto.AllValues, max)
	}
	sc.follow.Normalize()
	for _, name := range sortedScopes(have) {
		for _, v := range have[name] {
			switch {
			case !sc.requests(name, v):
				sc.evictions = append(sc.evictions, syncproto.Eviction{Scope: name, Value: v, Reason: syncproto.EvictUnsubscribed})
			case !grants.Has(name, v):
				sc.evictions = append(sc.evictions, syncproto.Eviction{Scope: name, Value: v, Reason: syncproto.EvictRevoked})
			}
		}
	}
	// A value whose backfill was left unfinished (resume) is held in part:
	// it leaves the device as a value of have would.
	for _, name := range slices.Sorted(maps.Keys(resume)) {
		for _, v := range slices.Sorted(maps.Keys(resume[name])) {
			switch {
			case have.Has(name, v):
			case !sc.requests(name, v):
				sc.evictions = append(sc.evictions, syncproto.Eviction{Scope: name, Value: v, Reason: syncproto.EvictUnsubscribed})
			case sc.all[name] && !grants.Has(name, v):
				sc.evictions = append(sc.evictions, syncproto.Eviction{Scope: name, Value: v, Reason: syncproto.EvictRevoked})
			}
		}
	}
	for _, name := range sortedScopes(sc.follow) {
		if sc.follow.All(name) {
			// A request of every value under a grant of every value is
			// not backfilled value by value (PROTOCOL.md 19.4).
			continue
		}
		for _, v := range sc.follow[name] {
			if !have.Has(name, v) {
				sc.backfills = append(sc.backfills, backfillJob{scope: name, value: v, after: resume[name][v]})
			}
		}
	}
	return sc, nil
}

// requests reports whether the subscription asks for value of scope.
func (sc *subscriptionScopes) requests(scope, value string) bool {
	if sc.all[scope] {
		return true
	}
	return slices.Contains(sc.wanted[scope], value)
}

// readScope returns the replication scope the feed reads with: base
// narrowed to the follow set, its pages ending at the user's grant
// changes.
func (sc *subscriptionScopes) readScope(base replication.Scope, user string) replication.Scope {
	if sc == nil {
		return base
	}
	base.Follow, base.Scopes, base.User = sc.follow, sc.decl, user
	return base
}

// grantsChanged takes the membership grant changes the feed met at one
// seq (replication.Page.Grants) and returns the evictions of the frame
// holding that seq (revoked values the token does not grant either) and
// whether the follow set changed at all. Values gained that the request
// wants join the follow set and are queued for backfill. A legacy
// subscription changes nothing here: changed tells it to resync.
func (sc *subscriptionScopes) grantsChanged(changes []replication.GrantChange) (evictions []syncproto.Eviction, changed bool, refusal *syncproto.Error) {
	for _, g := range changes {
		if sc.decl.Named(g.Scope) == nil || sc.token.Has(g.Scope, g.Value) {
			continue // a token grant covers it whatever the rows say
		}
		if sc.legacy {
			// Any change of its grants the walk meets, even one the
			// grants read at its start already reflect: a device that
			// was offline while it lost a value still holds its rows.
			changed = true
			continue
		}
		following := sc.follow.Has(g.Scope, g.Value)
		switch {
		case !g.Held && following:
			changed = true
			sc.follow[g.Scope] = slices.DeleteFunc(sc.follow[g.Scope], func(v string) bool { return v == g.Value })
			sc.backfills = slices.DeleteFunc(sc.backfills, func(j backfillJob) bool { return j.scope == g.Scope && j.value == g.Value })
			evictions = append(evictions, syncproto.Eviction{Scope: g.Scope, Value: g.Value, Reason: syncproto.EvictRevoked})
		case g.Held && !following && sc.requests(g.Scope, g.Value):
			changed = true
			if sc.follow.Count() >= sc.max {
				return evictions, changed, syncproto.Errorf(syncproto.CodeTooManyScopeValues, "scope %q value %q was granted, but the subscription already follows max_scope_values %d: subscribe again with fewer", g.Scope, g.Value, sc.max)
			}
			sc.follow[g.Scope] = append(sc.follow[g.Scope], g.Value)
			slices.Sort(sc.follow[g.Scope])
			sc.backfills = append(sc.backfills, backfillJob{scope: g.Scope, value: g.Value})
		}
	}
	return evictions, changed, nil
}

// snapshotURL is the snapshot a resync of this subscription names: every
// grant for a legacy one, else the values it follows (PROTOCOL.md 19.6).
func (sc *subscriptionScopes) snapshotURL() string {
	if sc == nil || sc.legacy {
		return syncproto.SnapshotPath
	}
	q := url.Values{"scoped": {"1"}}
	for _, name := range sortedScopes(sc.follow) {
		for _, v := range sc.follow[name] {
			q.Add("scope", name+":"+v)
		}
	}
	// A scope followed for every value later granted, none yet: the
	// snapshot names it so that a later grant's rows come with it.
	for _, name := range slices.Sorted(maps.Keys(sc.all)) {
		if len(sc.follow[name]) == 0 {
			q.Add("scope", name+":"+syncproto.AllValues)
		}
	}
	return syncproto.SnapshotPath + "?" + q.Encode()
}

// sortedScopes returns the scope names of s, sorted.
func sortedScopes(s syncproto.ScopeSet) []string { return slices.Sorted(maps.Keys(s)) }

func cloneSet(s syncproto.ScopeSet) syncproto.ScopeSet {
	out := make(syncproto.ScopeSet, len(s))
	for n, v := range s {
		out[n] = slices.Clone(v)
	}
	return out
}

// maxScopeValues is limits.max_scope_values.
func (s *Server) maxScopeValues() int {
	if s.cfg.MaxScopeValues > 0 {
		return s.cfg.MaxScopeValues
	}
	return syncproto.DefaultMaxScopeValues
}

// noScopes stands for Config.Scopes when it is nil.
var noScopes = &replication.Scopes{}

// declared returns the declared scopes, never nil.
// devicesDatabaseID is the database id devices see (welcome.database_id),
// which a device compares with the one its cursor came from: another id
// makes it resync from a snapshot instead of resuming. A single node's
// store gets a new id when the scope declarations change
// (replication.OpenStore), so devices see the store's. A cluster's store id
// is the cluster's and never changes, so its devices see it joined with a
// digest of the declarations: the same on every node (the configuration
// agreement keeps nodes that declare otherwise from serving), and another
// one once the declarations change, so a device resyncs instead of keeping
// rows the new declarations no longer give it. A cluster without
// declarations keeps its plain id, as before scopes existed.
func devicesDatabaseID(storeID string, cluster bool, declared *replication.Scopes) string {
	if !cluster || declared.Empty() {
		return storeID
	}
	sum := sha256.Sum256([]byte(declared.String()))
	return storeID + "." + hex.EncodeToString(sum[:8])
}

func (s *Server) declared() *replication.Scopes {
	if s.cfg.Scopes == nil {
		return noScopes
	}
	return s.cfg.Scopes
}
