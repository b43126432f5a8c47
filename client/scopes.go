package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/syncd-dev/syncd/client/synccore"
	"github.com/syncd-dev/syncd/syncproto"
)

// Partial sync (PROTOCOL.md section 19). A server may declare scopes: a
// scope names the models it covers and, per model, the value member whose
// string is a record's scope value. The device holds, of a covered model,
// only the rows whose scope value it follows: granted to its principal
// and requested by the app (Config.Scopes, SetScopes). What it requests
// and what it holds are kept in the replica and sent on every connect.

// ErrScope is wrapped by every *ScopeError.
var ErrScope = errors.New("client: scope value not followed")

// Scope reasons (ScopeError.Reason) beyond the eviction reasons
// (syncproto.EvictRevoked, EvictNotGranted, EvictUnsubscribed).
const (
	// ScopeUndeclared: the server's last welcome declares no such scope.
	ScopeUndeclared = "undeclared"
)

// ScopeError says a scope value cannot be followed: Reason is
// ScopeUndeclared, or, for a value, not_granted (the last welcome's grants
// do not hold it), revoked or unsubscribed.
type ScopeError struct {
	Scope, Value string
	Reason       string
}

func (e *ScopeError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("client: scope %q: %s", e.Scope, e.Reason)
	}
	return fmt.Sprintf("client: scope %q value %q: %s", e.Scope, e.Value, e.Reason)
}

func (e *ScopeError) Unwrap() error { return ErrScope }

// ScopeState is a scope value's state (ScopeStatus.State): backfilling,
// ready, revoked, not_granted or unsubscribed.
type ScopeState = synccore.ScopeState

// Scope states.
const (
	ScopeBackfilling  = synccore.ScopeBackfilling
	ScopeReady        = synccore.ScopeReady
	ScopeRevoked      = synccore.ScopeRevoked
	ScopeNotGranted   = synccore.ScopeNotGranted
	ScopeUnsubscribed = synccore.ScopeUnsubscribed
)

// ScopeStatus is one scope value's state, as Status.Scopes lists it.
type ScopeStatus = synccore.ScopeStatus

// SetScopes sets which values of scope this device follows: values, or
// syncproto.AllValues alone for every value granted now or later, or none
// to follow none of its rows. The request is durable before it returns
// and replaces Config.Scopes for that scope; the client subscribes again
// from its cursor at once: an added value is backfilled (WaitScope waits
// for it), a removed one's rows leave the replica (ChangeEvent.Evicted
// unsubscribed). Values are checked against the last welcome: a scope it
// does not declare, or a value neither its grants nor Status.Scopes
// (ready: granted since, and backfilled) hold (unless values is
// AllValues), is a *ScopeError and nothing changes; before any welcome
// the server checks them (not_granted in Status.Scopes). A malformed value
// or more than the welcome's max_scope_values is a *syncproto.Error.
func (c *Client) SetScopes(ctx context.Context, scope string, values ...string) error {
	if c.isClosed() {
		return ErrClosed
	}
	values = slices.Clone(values)
	set := syncproto.ScopeSet{scope: values}
	set.Normalize()
	values = set[scope]
	if values == nil {
		values = []string{}
	}
	if err := set.Validate("scopes", c.maxScopeValues()); err != nil {
		return err
	}
	w, known, err := c.replica.lastWelcomeScopes(ctx)
	if err != nil {
		return err
	}
	if known {
		if _, ok := w.Scopes[scope]; !ok {
			return &ScopeError{Scope: scope, Reason: ScopeUndeclared}
		}
		if !set.All(scope) {
			held := c.driver.view.Load().status.Scopes
			for _, v := range values {
				// A value granted since the welcome (a membership row)
				// is known once its backfill is in.
				if st, _ := held.Of(scope, v); !w.Grants.Has(scope, v) && st != ScopeReady {
					return &ScopeError{Scope: scope, Value: v, Reason: syncproto.EvictNotGranted}
				}
			}
		}
	}
	if err := c.replica.setScopeWant(ctx, scope, values); err != nil {
		return err
	}
	want, err := c.wantFor(ctx, w.Scopes)
	if err != nil {
		return err
	}
	if known {
		c.replica.fields.Store(newScopeFields(w.Scopes, want))
	}
	if !c.driver.post(event{in: synccore.Rescope{Want: want}}) {
		return ErrClosed
	}
	return nil
}

// maxScopeValues is the last welcome's limit on the values one
// subscription follows (0 before any welcome: not checked here).
func (c *Client) maxScopeValues() int {
	if l := c.limits.Load(); l != nil {
		return l.MaxScopeValues
	}
	return 0
}

// wantFor is the request for the scopes a welcome declares: per declared
// scope, the app's stored request (SetScopes), else Config.Scopes', else
// every granted value.
func (c *Client) wantFor(ctx context.Context, declared map[string]syncproto.ScopeInfo) (syncproto.ScopeSet, error) {
	stored, err := c.replica.scopeWant(ctx)
	if err != nil {
		return nil, err
	}
	want := syncproto.ScopeSet{}
	for name := range declared {
		switch values, ok := stored[name]; {
		case ok:
			want[name] = slices.Clone(values)
		case c.cfg.Scopes[name] != nil:
			want[name] = slices.Clone(c.cfg.Scopes[name])
		default:
			want[name] = []string{syncproto.AllValues}
		}
	}
	want.Normalize()
	return want, nil
}

// WaitScope waits until the device holds value of scope complete (its
// backfill is in: Status.Scopes says ready) and returns nil. It returns a
// *ScopeError when the value is not followed: not requested (the request
// names other values of scope), or answered not_granted or revoked by the
// server; ctx's error when ctx ends first. With AllValues requested, a
// value the principal is never granted is never answered: bound ctx.
func (c *Client) WaitScope(ctx context.Context, scope, value string) error {
	for {
		if c.isClosed() {
			return ErrClosed
		}
		wake := c.scopeWake.waiter()
		st := c.driver.view.Load().status.Scopes
		state, ok := st.Of(scope, value)
		switch {
		case state == ScopeReady:
			return nil
		case ok && state == ScopeUnsubscribed:
			// Unsubscribed before: wait when the device requests it again
			// (SetScopes), until its backfill replaces that state.
			requested, err := c.requests(ctx, scope, value)
			if err != nil {
				return err
			}
			if !requested {
				return &ScopeError{Scope: scope, Value: value, Reason: string(state)}
			}
		case ok && state != ScopeBackfilling:
			return &ScopeError{Scope: scope, Value: value, Reason: string(state)}
		case !ok:
			requested, err := c.requests(ctx, scope, value)
			if err != nil {
				return err
			}
			if !requested {
				return &ScopeError{Scope: scope, Value: value, Reason: syncproto.EvictUnsubscribed}
			}
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// requests reports whether the device's request holds value of scope
// (directly or by AllValues).
func (c *Client) requests(ctx context.Context, scope, value string) (bool, error) {
	w, _, err := c.replica.lastWelcomeScopes(ctx)
	if err != nil {
		return false, err
	}
	declared := w.Scopes
	if _, ok := declared[scope]; !ok {
		declared = map[string]syncproto.ScopeInfo{scope: {}}
	}
	want, err := c.wantFor(ctx, declared)
	if err != nil {
		return false, err
	}
	return want.Has(scope, value), nil
}

// scopesWelcomed records a welcome's declared scopes and grants, and
// returns the scope state the core resumes with and the scopes the device
// followed whole (every value requested, every value granted by the last
// welcome) that this welcome no longer grants whole: the device may hold
// values of them it never named (the server backfills nothing of a scope
// followed whole), which no eviction reaches, so it resyncs. Until the
// snapshot is in (welcomeSettled), the stored grants keep every value of
// those scopes, so a device stopped before it resyncs at its next welcome.
func (c *Client) scopesWelcomed(ctx context.Context, w *syncproto.Welcome) (synccore.Scopes, []string, error) {
	limits := w.Limits
	c.limits.Store(&limits)
	last, known, err := c.replica.lastWelcomeScopes(ctx)
	if err != nil {
		return synccore.Scopes{}, nil, err
	}
	st, err := c.replica.scopeState(ctx)
	if err != nil {
		return synccore.Scopes{}, nil, err
	}
	if st.Want, err = c.wantFor(ctx, w.Scopes); err != nil {
		return synccore.Scopes{}, nil, err
	}
	sw := welcomeScopes(w)
	var narrowed []string
	if known {
		for _, name := range slices.Sorted(maps.Keys(last.Grants)) {
			if last.Grants.All(name) && st.Want.All(name) && !w.Grants.All(name) {
				narrowed = append(narrowed, name)
			}
		}
	}
	if len(narrowed) > 0 {
		sw.Grants = cloneScopeSet(sw.Grants)
		if sw.Grants == nil {
			sw.Grants = syncproto.ScopeSet{}
		}
		for _, name := range narrowed {
			sw.Grants[name] = []string{syncproto.AllValues}
		}
	}
	if err := c.replica.setWelcomeScopes(ctx, sw); err != nil {
		return synccore.Scopes{}, nil, err
	}
	c.replica.fields.Store(newScopeFields(w.Scopes, st.Want))
	return st, narrowed, nil
}

// welcomeSettled records the grants of the welcome a resync's snapshot
// was loaded under (scopesWelcomed kept the narrowed scopes whole).
func (c *Client) welcomeSettled(ctx context.Context, w *syncproto.Welcome) error {
	return c.replica.setWelcomeScopes(ctx, welcomeScopes(w))
}

// welcomeScopes is what the replica keeps of a welcome's scopes.
func welcomeScopes(w *syncproto.Welcome) scopeWelcome {
	sw := scopeWelcome{Scopes: w.Scopes, Grants: w.Grants}
	if sw.Scopes == nil {
		sw.Scopes = map[string]syncproto.ScopeInfo{}
	}
	return sw
}

// covered maps the scopes of the bound link's welcome to their models.
func (d *driver) covered() covered {
	if d.link == nil {
		return nil
	}
	return coveredBy(d.link.conn.welcome.Scopes)
}

// cloneScopeSet returns a normalized copy of s (nil for nil), so the app
// may reuse what it passed.
func cloneScopeSet(s syncproto.ScopeSet) syncproto.ScopeSet {
	if s == nil {
		return nil
	}
	out := make(syncproto.ScopeSet, len(s))
	for name, values := range s {
		out[name] = slices.Clone(values)
	}
	out.Normalize()
	return out
}

// scopesAtOpen is the scope state the core starts with, from the replica
// and the last welcome (Status reports it before a connection), and sets
// the declarations the replica reads scope values by.
func (c *Client) scopesAtOpen(ctx context.Context) (synccore.Scopes, error) {
	st, err := c.replica.scopeState(ctx)
	if err != nil {
		return synccore.Scopes{}, err
	}
	w, ok, err := c.replica.lastWelcomeScopes(ctx)
	if err != nil || !ok {
		return st, err
	}
	if st.Want, err = c.wantFor(ctx, w.Scopes); err != nil {
		return synccore.Scopes{}, err
	}
	c.replica.fields.Store(newScopeFields(w.Scopes, st.Want))
	return st, nil
}
