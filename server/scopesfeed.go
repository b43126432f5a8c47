package server

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/syncproto"
)

// planScopes plans what a pull or subscription of this session from
// cursor follows (planScopes), from the principal's grants at cursor
// (grantsAt). nil when the server
// declares no scope; a request naming scopes is then refused
// invalid_scope.
func (ss *session) planScopes(ctx context.Context, cursor uint64, requested, have syncproto.ScopeSet, resume map[string]map[string]string) (*subscriptionScopes, *syncproto.Error) {
	decl := ss.srv.declared()
	if decl.Empty() {
		if requested != nil || have != nil || resume != nil {
			return nil, syncproto.Errorf(syncproto.CodeInvalidScope, "this server declares no scope")
		}
		return nil, nil
	}
	grants, err := ss.srv.grantsAt(ctx, ss.p, cursor)
	if err != nil {
		ss.log.Error("read scope grants", "err", err)
		return nil, internalError(err)
	}
	return planScopes(decl, grants, declaredTokenGrants(decl, ss.p), requested, have, resume, ss.srv.maxScopeValues())
}

// scopeTurn applies what sc learns from page, which the feed (or a pull)
// is about to send: the evictions the page's frame carries (the plan's on
// the first frame, revoked values at the page's grant change), or, for a
// subscription without scopes whose visible set changed (a row moved out,
// a grant lost or gained), the resync (scopes_changed) to send instead,
// or the refusal that ends the subscription (too many values gained).
func (ss *session) scopeTurn(id string, page replication.Page, sc *subscriptionScopes, first bool) ([]syncproto.Eviction, *syncproto.Resync, *syncproto.Error) {
	if sc == nil {
		return nil, nil, nil
	}
	evictions, changed, refusal := sc.grantsChanged(page.Grants)
	if sc.legacy {
		for _, e := range page.Entries {
			changed = changed || e.Op == syncproto.OpEvict
		}
		if changed {
			ss.srv.metrics.resyncs.Inc()
			return nil, &syncproto.Resync{ID: id, Reason: syncproto.ResyncScopesChanged, SnapshotURL: syncproto.SnapshotPath, Head: page.Head}, nil
		}
		return nil, nil, nil
	}
	if first {
		evictions = append(sc.evictions, evictions...)
		sc.evictions = nil
	}
	return evictions, nil, refusal
}

// backfill sends the next page of sc's first backfill and reports whether
// the feed goes on. A page of a value held only through membership rows is
// sent only when the value is still granted after the page was read: a
// grant lost meanwhile drops the backfill (the feed's walk meets the loss
// and evicts the value).
func (ss *session) backfill(ctx context.Context, id string, sc *subscriptionScopes, inFlight chan struct{}) bool {
	j := &sc.backfills[0]
	if j.started.IsZero() {
		j.started = ss.srv.now()
	}
	d := ss.srv.declared().Named(j.scope)
	p, err := ss.srv.store.Records.ReadScopeValue(ctx, nil, ss.p.Tenant, ss.p.User, d, j.value, j.after, syncproto.MaxPullLimit, feedPageBytes)
	if err != nil {
		if ctx.Err() == nil {
			ss.log.Error("read backfill page", "scope", j.scope, "err", err)
			ss.sendFeed(ctx, outbound{msg: internalError(err).WithID(id)})
		}
		return false
	}
	if !p.Member && !sc.token.Has(j.scope, j.value) {
		ss.srv.metrics.scopeBackfills.WithLabelValues(backfillRevoked).Inc()
		sc.backfills = sc.backfills[1:]
		return true
	}
	msg := &syncproto.Backfill{ID: id, Scope: j.scope, Value: j.value, At: p.At, LastKey: p.Last, Done: p.Done, Entries: make([]syncproto.Change, 0, len(p.Records))}
	for _, rec := range p.Records {
		if !ss.p.CanRead(rec.Model) {
			continue
		}
		e := replication.NewEntry(rec, "")
		e.Seq, e.ScopeValue = rec.Seq, j.value
		msg.Entries = append(msg.Entries, e.Change)
	}
	select {
	case inFlight <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	done, started := p.Done, j.started
	if !ss.sendFeed(ctx, outbound{msg: msg, onSent: func() {
		if done {
			ss.srv.metrics.scopeBackfills.WithLabelValues(backfillDone).Inc()
			ss.srv.metrics.scopeBackfillTime.Observe(ss.srv.now().Sub(started).Seconds())
		}
		<-inFlight
	}}) {
		return false
	}
	j.after = p.Last
	if done {
		sc.backfills = sc.backfills[1:]
	}
	return true
}

// abortBackfills counts the backfills a subscription that ended left
// unfinished.
func (ss *session) abortBackfills(sc *subscriptionScopes) {
	if sc == nil {
		return
	}
	for range sc.backfills {
		ss.srv.metrics.scopeBackfills.WithLabelValues(backfillAborted).Inc()
	}
}

// The results of comparing a subscription's request with the device's
// recorded requested set (syncd_scope_requested_sets_total).
const (
	requestedUnchanged = "unchanged" // the same set: nothing written
	requestedNew       = "new"       // the device had none: recorded
	requestedChanged   = "changed"   // another set: recorded
	requestedCleared   = "cleared"   // a subscription without scopes: the set removed
	requestedFailed    = "failed"    // not recorded (logged); the subscription goes on
	requestedDeferred  = "deferred"  // a cluster node of an older release: not recorded
)

// requestedTimeout bounds how long a subscribe waits for its requested set
// to be recorded before its feed starts anyway.
const requestedTimeout = 5 * time.Second

func (m *metrics) registerRequested(reg prometheus.Registerer) {
	m.scopeRequested = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "syncd_scope_requested_sets_total",
		Help: "Subscriptions compared with their device's recorded requested scope set, by result (unchanged: nothing written; new, changed, cleared: recorded through the committer; failed: not recorded; deferred: a node of the cluster does not understand requested sets yet).",
	}, []string{"result"})
	for _, r := range []string{requestedUnchanged, requestedNew, requestedChanged, requestedCleared, requestedFailed, requestedDeferred} {
		m.scopeRequested.WithLabelValues(r)
	}
	reg.MustRegister(m.scopeRequested)
}

// recordRequested compares requested, the scopes of a subscribe the
// session accepted (nil: none), with the set recorded for the device, and
// when they differ records it through the committer (replication's
// requested sets: part of the replicated log, so every cluster node holds
// it), returning once it is applied here or requestedTimeout passed (also
// when the session ends meanwhile). The subscription's feed is started
// first: recording never delays it. A
// subscription without scopes removes a recorded set (it follows every
// grant) and records nothing. The same set writes nothing: a reconnect
// costs no commit. A failure is logged and counted; the subscription goes
// on, as the device's own request (and its have) is what its feed follows.
func (ss *session) recordRequested(ctx context.Context, requested syncproto.ScopeSet) {
	s := ss.srv
	if s.declared().Empty() {
		return
	}
	stored, found, err := s.store.RequestedSet(ctx, ss.p.Tenant, ss.p.ClientID)
	if err != nil {
		ss.log.Error("read requested set", "err", err)
		s.metrics.scopeRequested.WithLabelValues(requestedFailed).Inc()
		return
	}
	req := &replication.Requested{User: ss.p.User}
	result := requestedNew
	switch {
	case requested == nil && !found:
		return
	case requested == nil:
		req.Clear, result = true, requestedCleared
	default:
		req.Scopes = cloneSet(requested)
		req.Scopes.Normalize()
		if found && stored.User == ss.p.User && replication.SameRequest(stored.Scopes, req.Scopes) {
			s.metrics.scopeRequested.WithLabelValues(requestedUnchanged).Inc()
			return
		}
		if found {
			result = requestedChanged
		}
	}
	if c := s.cfg.Cluster; c != nil && !c.Uses(cluster.FormatRequestedSets) {
		s.metrics.scopeRequested.WithLabelValues(requestedDeferred).Inc()
		return
	}
	if err := ss.submitRequested(ctx, req); err != nil {
		ss.log.Warn("record requested set", "err", err)
		result = requestedFailed
	}
	s.metrics.scopeRequested.WithLabelValues(result).Inc()
}

// submitRequested commits a batch recording req for the session's device
// and waits, at most requestedTimeout, until it is applied.
func (ss *session) submitRequested(ctx context.Context, req *replication.Requested) error {
	// A device that disconnects at once still has its set recorded.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestedTimeout)
	defer cancel()
	b := &replication.Batch{Tenant: ss.p.Tenant, ClientID: ss.p.ClientID, User: ss.p.User,
		At: time.UnixMilli(ss.srv.now().UnixMilli()).UTC(), Writes: []replication.Write{}, Requested: req}
	r, err := ss.srv.commits.submit(ctx, b)
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
