package server

import (
	"context"
	"fmt"
	"time"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/replication"
)

// keyHistory fills ans.Events from the newest adminapi.MaxExplainScan seqs
// of the oplog: the writes of the key (written, moved, deleted) and the
// changes of ans.User's membership grants of d's values the key held
// (granted, revoked), oldest first.
func (s *Server) keyHistory(ctx context.Context, d *replication.ScopeDecl, ans *adminapi.KeyExplanation) error {
	models := []string{ans.Model}
	if m := d.Membership; m != nil && m.Model != ans.Model {
		models = append(models, m.Model)
	}
	scope := replication.Scope{Tenant: ans.Tenant, Models: models}
	b, err := s.store.Log.Bounds(ctx, scope)
	if err != nil {
		return err
	}
	after := b.Floor
	if b.Head > adminapi.MaxExplainScan && b.Head-adminapi.MaxExplainScan > after {
		after = b.Head - adminapi.MaxExplainScan
	}
	ans.ScannedFrom, ans.Head = after, b.Head
	held := map[string]bool{ans.ScopeValue: true}
	var grants []adminapi.KeyEvent
	for after < b.Head {
		page, err := s.store.Log.Read(ctx, replication.ReadRequest{After: after, Scope: scope, Limit: replication.MaxReadLimit})
		if err != nil {
			return fmt.Errorf("read the history of %s/%s: %w", ans.Model, ans.Key, err)
		}
		for _, e := range page.Entries {
			if e.Seq > b.Head {
				break
			}
			if ev, ok := keyEvent(&e, ans.Model, ans.Key); ok {
				held[ev.From], held[ev.To] = true, true
				ans.Events = append(ans.Events, ev)
			}
			for _, g := range e.Grants {
				if ans.User != "" && g.User == ans.User && g.Scope == d.Name {
					kind := adminapi.EventRevoked
					if g.Held {
						kind = adminapi.EventGranted
					}
					grants = append(grants, adminapi.KeyEvent{Seq: e.Seq, At: e.AppliedAt, Kind: kind, To: g.Value, Model: e.Model, Key: e.Key, ClientID: e.ClientID})
				}
			}
		}
		if page.Next <= after {
			break
		}
		after = page.Next
	}
	// Grant events of the values the key held, merged by seq (both lists
	// are in seq order).
	events := make([]adminapi.KeyEvent, 0, len(ans.Events)+len(grants))
	i := 0
	for _, g := range grants {
		if !held[g.To] {
			continue
		}
		for i < len(ans.Events) && ans.Events[i].Seq <= g.Seq {
			events = append(events, ans.Events[i])
			i++
		}
		events = append(events, g)
	}
	ans.Events = append(events, ans.Events[i:]...)
	return nil
}

// keyEvent returns the event e is of key model/key, if it is one.
func keyEvent(e *replication.Entry, model, key string) (adminapi.KeyEvent, bool) {
	if e.Model != model || e.Key != key {
		return adminapi.KeyEvent{}, false
	}
	ev := adminapi.KeyEvent{Seq: e.Seq, At: e.AppliedAt, From: e.ScopeOld, To: e.ScopeValue, ClientID: e.ClientID}
	switch {
	case e.Deleted:
		ev.Kind = adminapi.EventDeleted
	case e.ScopeOld != "" && e.ScopeOld != e.ScopeValue:
		ev.Kind = adminapi.EventMoved
	default:
		ev.Kind = adminapi.EventWritten
	}
	return ev, true
}

// explainKey decides ans's verdict, grant and eviction from the record,
// the device's grants (its token's, when connected; rows: its user's live
// membership rows of the key's scope), the request given, and the events.
// It does no I/O.
func explainKey(ans *adminapi.KeyExplanation, rows []adminapi.MemberRow) {
	v, scope := ans.ScopeValue, ans.Scope
	where := fmt.Sprintf("%s/%s is in %s %q", ans.Model, ans.Key, scope, v)
	if ans.Deleted {
		where += " (deleted: devices hold its tombstone)"
	}
	if ans.TokenGrants.Has(scope, v) {
		ans.Grant = &adminapi.GrantSource{Kind: "token"}
	} else {
		for i := range rows {
			if rows[i].Value == v {
				ans.Grant = &adminapi.GrantSource{Kind: "membership", Row: &rows[i]}
				break
			}
		}
	}
	switch {
	case ans.Grant == nil:
		ans.Verdict = adminapi.KeyNotGranted
		ans.Why = fmt.Sprintf("%s, which the device is not granted: %s", where, noGrant(ans))
		ans.Evicted = evictedBy(ans)
	case ans.Requested != nil && !ans.Requested.Has(scope, v):
		ans.Verdict = adminapi.KeyNotRequested
		ans.Why = fmt.Sprintf("%s, which the device is granted (%s) but does not request (%s)", where, grantSays(ans.Grant), requestSays(ans))
		ans.Evicted = fmt.Sprintf("unsubscribed: the request names no %s %q (a device evicts a value it stops requesting, reason unsubscribed)", scope, v)
	default:
		ans.Verdict = adminapi.KeyOnScopes
		ans.Why = fmt.Sprintf("%s, which the device holds through %s", where, grantSays(ans.Grant))
		if ans.Requested == nil {
			ans.Why += "; no requested set is recorded for the device (it has not subscribed with scopes since the server began recording them), so it holds the key if it requests the value"
		}
		if since := lastInto(ans); since != nil {
			ans.Why += fmt.Sprintf("; the key is in %q since seq %d (%s)", v, since.Seq, since.Kind)
		}
	}
}

// requestSays names where ans.Requested came from.
func requestSays(ans *adminapi.KeyExplanation) string {
	if ans.RequestedFrom == adminapi.RequestedWant {
		return "the request given with --want"
	}
	return fmt.Sprintf("its request recorded at its last subscribe, %s", ans.RequestedAt.UTC().Format(time.RFC3339))
}

// noGrant says why nothing grants ans's value.
func noGrant(ans *adminapi.KeyExplanation) string {
	switch {
	case ans.User == "" && !ans.Connected:
		return "the device names no user (its client id is in no user's namespace) and has no session here whose token could grant it"
	case !ans.Connected:
		return fmt.Sprintf("user %s holds no membership row of it; the device has no session here, so its token's grants are unknown (a token granting it would put the key on its scopes)", ans.User)
	case ans.User == "":
		return "its token does not grant it and it names no user for membership rows"
	default:
		return fmt.Sprintf("its token does not grant it and user %s holds no membership row of it", ans.User)
	}
}

// grantSays names a grant.
func grantSays(g *adminapi.GrantSource) string {
	if g.Kind == "token" {
		return "its token"
	}
	return fmt.Sprintf("membership row %s/%s (user %s, written at seq %d)", g.Row.Model, g.Row.Key, g.Row.User, g.Row.Seq)
}

// lastInto returns the newest event that put the key in its present value
// (written there, or moved there), nil when the scan holds none.
func lastInto(ans *adminapi.KeyExplanation) *adminapi.KeyEvent {
	for i := len(ans.Events) - 1; i >= 0; i-- {
		e := &ans.Events[i]
		if (e.Kind == adminapi.EventMoved || e.Kind == adminapi.EventWritten) && e.To == ans.ScopeValue && e.From != ans.ScopeValue {
			return e
		}
	}
	return nil
}

// evictedBy says when and why a key not granted left the device's scopes:
// the newer of the move into its value and the loss of its value's grant,
// "" when the events scanned hold neither.
func evictedBy(ans *adminapi.KeyExplanation) string {
	var moved, revoked *adminapi.KeyEvent
	for i := range ans.Events {
		e := &ans.Events[i]
		switch {
		case e.Kind == adminapi.EventMoved && e.To == ans.ScopeValue:
			moved = e
		case e.Kind == adminapi.EventRevoked && e.To == ans.ScopeValue:
			revoked = e
		}
	}
	switch {
	case revoked != nil && (moved == nil || revoked.Seq > moved.Seq):
		return fmt.Sprintf("revoked at seq %d: membership row %s/%s (written by %s) no longer grants %s %q to %s", revoked.Seq, revoked.Model, revoked.Key, revoked.ClientID, ans.Scope, ans.ScopeValue, ans.User)
	case moved != nil:
		return fmt.Sprintf("moved at seq %d from %q to %q (written by %s): a device following %q and not %q evicted it then", moved.Seq, moved.From, moved.To, moved.ClientID, moved.From, moved.To)
	}
	return ""
}
