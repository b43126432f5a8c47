package server

import (
	"context"

	"github.com/syncd-dev/syncd/replication"
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
