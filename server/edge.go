package server

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// push is the edge of the write path: everything about a push that depends
// on this node is decided here, before the batch is committed (or, in a
// cluster, replicated): the token's rights, the clock-skew bound, the
// model policies of this configuration, the conflict hook's answers. What
// is left, replication.Decide, depends only on the batch and the state.
//
// The returned request's done channel closes when every write of the push
// was decided; its fx.Results then answers the push. A push with no hook
// write is handed to the committer and returned at once, so a session
// pipelines its pushes; one with hook writes is asked, committed and
// re-asked here (the hook's answer must still be current when it is
// carried out) before push returns, so a session's pushes stay in order.
//
// paused is the session's set of models paused by a value-version refusal
// (valueVersions.check).
func (s *Server) push(ctx context.Context, p auth.Principal, muts []syncproto.Mutation, paused map[string]bool) (*pushRequest, error) {
	b := s.admitPush(p, muts, paused)
	return s.submitPush(ctx, p, &b)
}

// admitPush is push's first part, the CPU of it: the batch of muts as
// this node admits them (rights, skew, policies, value versions), noted
// in the device book. It waits for nothing.
func (s *Server) admitPush(p auth.Principal, muts []syncproto.Mutation, paused map[string]bool) replication.Batch {
	b := replication.Admit(replication.Author{Tenant: p.Tenant, ClientID: p.ClientID, User: p.User, Grants: tokenGrants(p), CanWrite: p.CanWrite},
		muts, s.cfg.Policies, s.now(), s.cfg.MaxClockSkew)
	s.versions.check(&b, paused)
	s.notePush(p, &b)
	for _, w := range b.Writes {
		if w.Refusal == nil {
			// Admitted timestamps are within the skew bound: observing
			// them cannot drag the server's clock forward unboundedly.
			s.clock.Observe(w.Mutation.HLC)
		}
	}
	return b
}

// submitPush is push's second part: b, admitted by admitPush, handed to
// the committer (it may wait for a place in its tenant's line), or asked
// of the hook and committed.
func (s *Server) submitPush(ctx context.Context, p auth.Principal, b *replication.Batch) (req *pushRequest, err error) {
	defer func() { s.notePushError(p, err) }()
	if !slices.ContainsFunc(b.Writes, isHookWrite) {
		return s.commits.submit(ctx, b)
	}
	return s.pushWithHooks(ctx, b)
}

func isHookWrite(w replication.Write) bool {
	return w.Refusal == nil && w.Policy == syncproto.PolicyHook
}

// pushWithHooks asks the hook about b's hook writes, commits, and asks again
// about the writes whose key changed in between, up to
// replication.MaxHookAttempts times; after that last-writer-wins decides
// them (FallbackStale). The results of every round are merged into one
// answer, at the writes' original positions.
func (s *Server) pushWithHooks(ctx context.Context, b *replication.Batch) (*pushRequest, error) {
	answer := newPushRequest(b, s.now())
	answer.fx.Results = make([]syncproto.Result, len(b.Writes))
	round := b
	positions := make([]int, len(b.Writes)) // round's write i is b's write positions[i]
	for i := range positions {
		positions[i] = i
	}
	for attempt := 1; ; attempt++ {
		if attempt > replication.MaxHookAttempts {
			for i := range round.Writes {
				if isHookWrite(round.Writes[i]) {
					round.Writes[i].Hook = &replication.HookAnswer{Version: round.Writes[i].Hook.Version, Fallback: replication.FallbackStale}
				}
			}
		} else if err := s.resolver.AskHooks(ctx, round, s.store.Records.Current); err != nil {
			return nil, err
		}
		s.breakers.countRefusals(round, s.resolver.BreakerOf)
		for _, w := range round.Writes {
			if isHookWrite(w) && w.Hook.Fallback != "" {
				s.metrics.hookFallbacks.Inc()
			}
		}
		req, err := s.commits.submit(ctx, round)
		if err != nil {
			return nil, err
		}
		select {
		case <-req.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if req.err != nil {
			answer.err = req.err
			close(answer.done)
			return answer, nil
		}
		for i, res := range req.fx.Results {
			answer.fx.Results[positions[i]] = res
		}
		answer.fx.Entries = append(answer.fx.Entries, req.fx.Entries...)
		answer.fx.Conflicts = append(answer.fx.Conflicts, req.fx.Conflicts...)
		answer.fx.Decisions = append(answer.fx.Decisions, req.fx.Decisions...)
		if len(req.fx.Stale) == 0 {
			close(answer.done)
			return answer, nil
		}
		// The next round carries only the stale writes, re-stamped now.
		next := &replication.Batch{Tenant: b.Tenant, ClientID: b.ClientID, At: time.UnixMilli(s.now().UnixMilli()).UTC()}
		nextPositions := make([]int, 0, len(req.fx.Stale))
		for _, i := range req.fx.Stale {
			next.Writes = append(next.Writes, round.Writes[i])
			nextPositions = append(nextPositions, positions[i])
		}
		round, positions = next, nextPositions
	}
}

// countDecided accounts for a decided push in the metrics.
func (m *metrics) countDecided(fx *replication.Effects) {
	for _, r := range fx.Results {
		if r.Status == "" {
			continue // stale: decided in a later round
		}
		m.mutations.WithLabelValues(string(r.Status)).Inc()
		if r.Status == syncproto.StatusDuplicate {
			m.ledgerHits.Inc()
		}
	}
	m.ledgerRecords.Add(float64(len(fx.Decisions)))
	for _, c := range fx.Conflicts {
		m.conflicts.WithLabelValues(string(c.Policy)).Inc()
	}
}

// tokenGrants returns the scope values p's token grants, normalized.
func tokenGrants(p auth.Principal) syncproto.ScopeSet {
	if len(p.Scopes) == 0 {
		return nil
	}
	g := syncproto.ScopeSet(maps.Clone(p.Scopes))
	for name, values := range g {
		g[name] = slices.Clone(values)
	}
	g.Normalize()
	return g
}
