package server

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// Feed routing (issue 21, item 5): a commit wakes only the live
// subscriptions of this node it concerns, found by map lookups on what
// each entry is (its tenant and model, its old and new scope values, the
// users whose membership grants it changed), so the feed's cost per write
// is proportional to the subscriptions that receive it, not to the
// subscriptions of the node or of the tenant, nor to the declared values.
//
// The feed tail routes every entry it appends (feedTail.append), whether a
// commit of this node's committer handed it over (feedTail.committed) or a
// refill read it from the log (a cluster node's materializer, or a commit
// the committer could not hand over). A goroutine of the router (drive)
// refills the tail at every commit the log reports while at least one
// subscription is registered, so no entry waits for a subscriber's read
// to be routed.
//
// What a subscription may rely on:
//   - it registers (subscribe) before it reads, so every entry concerning
//     it is either seen by a read after the registration or routed to it
//     after that (wake is buffered: a wake that races its read is kept);
//   - routed.pending holds the smallest seq routed to it since it last
//     woke: every entry between its cursor and that seq concerns it not, so
//     it may move its cursor there without reading ("nothing for you up to
//     seq N"), which keeps its cursor above compaction floors that removed
//     only entries of others, and its admin position honest (feedPosition);
//   - when the tail restarts empty (a refill met compacted entries) or a
//     refill fails, entries may go unrouted: every subscription is woken
//     to read from its own cursor (broadcast), as before routing;
//   - wakes may be spurious; a subscription reads and finds nothing.

// routeRetry is how long the router's driver waits after a failed refill
// of the feed tail before it tries again (every subscription was woken to
// read the log itself meanwhile).
const routeRetry = 100 * time.Millisecond

// routeKind says what a routeKey names.
type routeKind uint8

const (
	// routeModel: entries of model a, a model no scope covers; a is "*"
	// for every such model.
	routeModel routeKind = iota
	// routeValue: entries of the models of scope a whose old or new scope
	// value is b; b is syncproto.AllValues for every value of the scope.
	routeValue
	// routeUser: entries changing the membership grants of user a.
	routeUser
)

// routeKey is what a subscription follows of one tenant, in the terms an
// entry is looked up by.
type routeKey struct {
	kind   routeKind
	tenant string
	a, b   string
}

// router maps what subscriptions follow to the subscriptions. It is safe
// for concurrent use; route runs in the goroutine appending to the feed
// tail (the committer's, or a refill's), one call at a time.
type router struct {
	decl       *replication.Scopes
	wakes      prometheus.Counter
	broadcasts prometheus.Counter
	drive      func(context.Context) // refills the tail at each commit until ctx ends

	mu         sync.RWMutex
	keys       map[routeKey]map[*routeSub]struct{}
	every      map[*routeSub]struct{} // every registered subscription
	allTenants map[*routeSub]struct{} // subscriptions of every tenant (operator scopes): every entry concerns them

	routed atomic.Uint64 // every entry up to this seq was routed (or broadcast)

	driveMu   sync.Mutex // orders the driver's start and stop
	stopDrive context.CancelFunc
	driveDone chan struct{}
}

// newRouter returns a router for the declared scopes decl, registering its
// metrics with reg.
func newRouter(decl *replication.Scopes, reg prometheus.Registerer) *router {
	r := &router{
		decl: decl,
		wakes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_feed_route_wakes_total", Help: "Live subscriptions woken by the feed router for an entry that concerns them (one per wake, however many entries it covers).",
		}),
		broadcasts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_feed_route_broadcasts_total", Help: "Times the feed router woke every live subscription of the node, because entries could not be routed (the feed tail restarted or a refill failed).",
		}),
		keys:       map[routeKey]map[*routeSub]struct{}{},
		every:      map[*routeSub]struct{}{},
		allTenants: map[*routeSub]struct{}{},
	}
	reg.MustRegister(r.wakes, r.broadcasts)
	return r
}

// routeSub is one registered subscription: its wake channel and what the
// router knows of where it stands.
type routeSub struct {
	r    *router
	wake chan struct{} // a token when an entry concerning it was routed

	// pending is the smallest seq routed to it since its last wait took
	// it; 0 for none.
	pending atomic.Uint64
	// idleAt is 1 + the cursor it waits at, caught up, for a wake; 0 while
	// it reads or sends.
	idleAt atomic.Uint64

	// owned by the router's mu
	scope replication.Scope // Tenant, Models, AllModels, AllTenants only
	keys  []routeKey
}

// subscribe registers a subscription reading with scope and returns it;
// close it when the subscription ends. Register before the first read.
func (r *router) subscribe(scope replication.Scope) *routeSub {
	s := &routeSub{r: r, wake: make(chan struct{}, 1)}
	r.driveMu.Lock()
	defer r.driveMu.Unlock()
	r.mu.Lock()
	r.every[s] = struct{}{}
	r.setLocked(s, scope)
	first := len(r.every) == 1
	r.mu.Unlock()
	if first {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		r.stopDrive, r.driveDone = cancel, done
		go func() {
			defer close(done)
			r.drive(ctx)
		}()
	}
	return s
}

// update changes what s follows to scope (its follow set changed at a
// grant). Call it before the next read.
func (s *routeSub) update(scope replication.Scope) {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.setLocked(s, scope)
}

// close unregisters s; the router's driver stops with the last one.
func (s *routeSub) close() {
	r := s.r
	r.driveMu.Lock()
	defer r.driveMu.Unlock()
	r.mu.Lock()
	r.dropLocked(s)
	delete(r.every, s)
	last := len(r.every) == 0
	r.mu.Unlock()
	if last && r.stopDrive != nil {
		r.stopDrive()
		<-r.driveDone
		r.stopDrive, r.driveDone = nil, nil
	}
}

// setLocked replaces s's keys by those of scope. The caller holds mu.
func (r *router) setLocked(s *routeSub, scope replication.Scope) {
	r.dropLocked(s)
	s.scope = replication.Scope{Tenant: scope.Tenant, AllTenants: scope.AllTenants, Models: slices.Clone(scope.Models), AllModels: scope.AllModels}
	if scope.AllTenants {
		r.allTenants[s] = struct{}{}
		return
	}
	s.keys = routeKeys(r.decl, scope)
	for _, k := range s.keys {
		set := r.keys[k]
		if set == nil {
			set = map[*routeSub]struct{}{}
			r.keys[k] = set
		}
		set[s] = struct{}{}
	}
}

// dropLocked removes s's keys. The caller holds mu.
func (r *router) dropLocked(s *routeSub) {
	delete(r.allTenants, s)
	for _, k := range s.keys {
		if set := r.keys[k]; set != nil {
			delete(set, s)
			if len(set) == 0 {
				delete(r.keys, k)
			}
		}
	}
	s.keys = nil
}

// routeKeys returns the keys of every entry a reader of scope may receive
// (replication.Scope.Sees: delivered or evicted) or must stop at
// (grant changes of scope.User), for one tenant: one per model of no scope
// it reads (or "*"), one per value it follows of each scope covering a
// model it reads (or AllValues), and its user.
func routeKeys(decl *replication.Scopes, scope replication.Scope) []routeKey {
	var keys []routeKey
	t := scope.Tenant
	if scope.AllModels {
		keys = append(keys, routeKey{kind: routeModel, tenant: t, a: "*"})
	} else {
		for _, m := range scope.Models {
			if decl.Of(m) == nil {
				keys = append(keys, routeKey{kind: routeModel, tenant: t, a: m})
			}
		}
	}
	for _, name := range decl.Names() {
		d := decl.Named(name)
		reads := false
		for m := range d.Fields {
			reads = reads || scope.Selects(t, m)
		}
		switch {
		case !reads:
		case scope.Follow == nil || scope.Scopes == nil || scope.Follow.All(name):
			keys = append(keys, routeKey{kind: routeValue, tenant: t, a: name, b: syncproto.AllValues})
		default:
			for _, v := range scope.Follow[name] {
				keys = append(keys, routeKey{kind: routeValue, tenant: t, a: name, b: v})
			}
		}
	}
	if scope.User != "" {
		keys = append(keys, routeKey{kind: routeUser, tenant: t, a: scope.User})
	}
	return keys
}

// route wakes the subscriptions each entry concerns; entries are the
// next ones after those routed before, in seq order. Its cost is a few
// map lookups per entry and one wake per subscription found.
func (r *router) route(entries []replication.Entry) {
	if len(entries) == 0 {
		return
	}
	r.mu.RLock()
	for i := range entries {
		e := &entries[i]
		for s := range r.allTenants {
			r.notify(s, e.Seq)
		}
		if d := r.decl.Of(e.Model); d != nil {
			r.lookup(routeKey{kind: routeValue, tenant: e.Tenant, a: d.Name, b: e.ScopeValue}, e)
			if e.ScopeOld != e.ScopeValue {
				r.lookup(routeKey{kind: routeValue, tenant: e.Tenant, a: d.Name, b: e.ScopeOld}, e)
			}
			r.lookup(routeKey{kind: routeValue, tenant: e.Tenant, a: d.Name, b: syncproto.AllValues}, e)
		} else {
			r.lookup(routeKey{kind: routeModel, tenant: e.Tenant, a: e.Model}, e)
			r.lookup(routeKey{kind: routeModel, tenant: e.Tenant, a: "*"}, e)
		}
		for _, g := range e.Grants {
			r.lookup(routeKey{kind: routeUser, tenant: e.Tenant, a: g.User}, e)
		}
	}
	r.mu.RUnlock()
	r.advance(entries[len(entries)-1].Seq)
}

// lookup wakes the subscriptions registered under k that read e's model
// (a grant change of their user concerns them whatever its model). The
// caller holds mu for reading.
func (r *router) lookup(k routeKey, e *replication.Entry) {
	if k.kind == routeValue && k.b == "" {
		return // no scope value: no subscription follows it by value
	}
	for s := range r.keys[k] {
		if k.kind == routeUser || s.scope.Selects(e.Tenant, e.Model) {
			r.notify(s, e.Seq)
		}
	}
}

// notify records that seq concerns s and wakes it.
func (r *router) notify(s *routeSub, seq uint64) {
	for {
		old := s.pending.Load()
		if (old != 0 && old <= seq) || s.pending.CompareAndSwap(old, seq) {
			break
		}
	}
	select {
	case s.wake <- struct{}{}:
		r.wakes.Inc()
	default:
	}
}

// broadcast wakes every subscription to read from its own cursor (none
// skips anything after seq-1), because entries after seq-1, up to head,
// may go unrouted.
func (r *router) broadcast(seq, head uint64) {
	r.broadcasts.Inc()
	r.mu.RLock()
	for s := range r.every {
		r.notify(s, max(seq, 1))
	}
	r.mu.RUnlock()
	r.advance(head)
}

// advance records that every entry up to seq was routed.
func (r *router) advance(seq uint64) {
	for {
		old := r.routed.Load()
		if old >= seq || r.routed.CompareAndSwap(old, seq) {
			return
		}
	}
}

// wait blocks, once the subscription read everything up to cursor, until
// an entry after it concerning the subscription is routed (or ctx ends:
// ok false). It returns the cursor to read after: cursor, or further when
// nothing routed to it lies between (the subscription may move there
// without reading).
func (s *routeSub) wait(ctx context.Context, cursor uint64) (next uint64, ok bool) {
	for {
		s.idleAt.Store(cursor + 1)
		select {
		case <-s.wake:
		case <-ctx.Done():
			s.idleAt.Store(0)
			return cursor, false
		}
		// idleAt goes before pending is taken: a reader of position that
		// sees nothing pending sees it not idle either.
		s.idleAt.Store(0)
		p := s.pending.Swap(0)
		if p == 0 {
			// The token of an entry a read after the last take covered.
			continue
		}
		return max(cursor, p-1), true
	}
}

// feedPosition is a session's position on its live feed, as the admin API
// reports it (cursor, lag): the newest seq sent to it, or, while its
// subscription waits caught up with nothing routed to it, the seq up to
// which the router found nothing for it.
type feedPosition struct {
	sent atomic.Uint64
	sub  atomic.Pointer[routeSub]
}

// Store records that the feed sent everything up to seq.
func (p *feedPosition) Store(seq uint64) { p.sent.Store(seq) }

// Load returns the position: the seq sent last, or the router's routed
// head when the subscription waits caught up at that seq and nothing was
// routed to it since (every entry up to that head concerns it not).
func (p *feedPosition) Load() uint64 {
	s := p.sub.Load()
	if s == nil {
		return p.sent.Load()
	}
	// In this order: a route up to routed stored pending before routed,
	// and a wait clears idleAt before it takes pending, so nothing pending
	// with idleAt still set means nothing up to routed is owed.
	routed := s.r.routed.Load()
	quiet := s.pending.Load() == 0
	idle := s.idleAt.Load()
	sent := p.sent.Load()
	if quiet && idle == sent+1 {
		return max(sent, routed)
	}
	return sent
}

// follow makes the position read s's routing (nil: sent only).
func (p *feedPosition) follow(s *routeSub) { p.sub.Store(s) }
