package replication

import (
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/internal/breaker"
	"github.com/syncd-dev/syncd/syncproto"
)

// BreakerConfig sets when a model's hook breaker opens and how it
// recovers (see ResolverOptions.Breaker); its zero value is the
// operability plan's defaults: open after 20 failures, or 50% failures of
// at least 10 calls, within 10 s; stay open 30 s; close after 3
// successful probes, reopen on a failed one.
type BreakerConfig = breaker.Config

// BreakerState is where a hook breaker is: closed, open or half_open.
type BreakerState = breaker.State

// The breaker states, as BreakerState values.
const (
	BreakerClosed   = breaker.Closed
	BreakerOpen     = breaker.Open
	BreakerHalfOpen = breaker.HalfOpen
)

// BreakerTransition is a hook breaker's change of state, as given to
// ResolverOptions.OnBreaker.
type BreakerTransition = breaker.Transition

// BreakerStatus is one hook breaker as Resolver.Breakers reports it.
type BreakerStatus struct {
	// Model is the model declared with syncproto.PolicyHook, or AnyModel for the
	// breaker that every undeclared model shares when the default policy
	// is syncproto.PolicyHook.
	Model string `json:"model"`
	// State is the breaker's state now.
	State BreakerState `json:"state"`
	// Calls and Failures are the outcomes counted in the sliding window
	// (zero unless closed).
	Calls    int `json:"calls"`
	Failures int `json:"failures"`
}

// hookBreakers holds one circuit breaker per model under syncproto.PolicyHook, so a
// hook that fails or hangs for one model is cut off for that model only.
// The set is bounded by the configuration: each model declared with
// syncproto.PolicyHook has its own breaker, and every model that is hook-decided
// through the AnyModel default shares the AnyModel breaker. Breakers live
// at the edge, like the hook: a refusal is carried in the batch
// (Write.Refusal), so every replica decides the same.
type hookBreakers struct {
	now func() time.Time
	log *slog.Logger
	on  func(model string, t BreakerTransition)

	mu     sync.Mutex
	byName map[string]*breaker.Breaker
	names  []string // byName's keys, sorted
}

func newHookBreakers(policies Config, cfg BreakerConfig, now func() time.Time, log *slog.Logger, on func(string, BreakerTransition)) (*hookBreakers, error) {
	h := &hookBreakers{now: now, log: log, on: on, byName: map[string]*breaker.Breaker{}}
	for model, p := range policies {
		if p != syncproto.PolicyHook {
			continue
		}
		b, err := breaker.New(cfg)
		if err != nil {
			return nil, err
		}
		h.byName[model] = b
		h.names = append(h.names, model)
	}
	slices.Sort(h.names)
	return h, nil
}

// name is the breaker that guards model's hook calls.
func (h *hookBreakers) name(model string) string {
	if _, ok := h.byName[model]; ok {
		return model
	}
	return AnyModel
}

// allow asks model's breaker whether its hook may be called now.
func (h *hookBreakers) allow(model string) (breaker.Ticket, bool) {
	name := h.name(model)
	h.mu.Lock()
	b := h.byName[name]
	if b == nil {
		h.mu.Unlock()
		return breaker.Ticket{}, true // no hook policy: nothing to guard
	}
	tk, ok, t := b.Allow(h.now())
	h.mu.Unlock()
	h.moved(name, t)
	return tk, ok
}

// record counts one hook call's outcome on model's breaker.
func (h *hookBreakers) record(model string, tk breaker.Ticket, ok bool) {
	name := h.name(model)
	h.mu.Lock()
	b := h.byName[name]
	if b == nil {
		h.mu.Unlock()
		return
	}
	t := b.Record(h.now(), tk, ok)
	h.mu.Unlock()
	h.moved(name, t)
}

// release gives back the ticket of a call that ended without an outcome.
func (h *hookBreakers) release(model string, tk breaker.Ticket) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if b := h.byName[h.name(model)]; b != nil {
		b.Release(tk)
	}
}

// moved logs and reports a change of state.
func (h *hookBreakers) moved(name string, t BreakerTransition) {
	if !t.Changed() {
		return
	}
	attrs := []any{"model", name, "from", t.From.String(), "to", t.To.String()}
	if t.To == breaker.Open && t.From == breaker.Closed {
		attrs = append(attrs, "failures", t.Failures, "calls", t.Calls)
	}
	switch t.To {
	case breaker.Open:
		h.log.Warn("conflict hook breaker opened: writes of the model are refused hook_unavailable", attrs...)
	default:
		h.log.Info("conflict hook breaker moved", attrs...)
	}
	if h.on != nil {
		h.on(name, t)
	}
}

// status reports every breaker, in name order.
func (h *hookBreakers) status() []BreakerStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	out := make([]BreakerStatus, 0, len(h.names))
	for _, name := range h.names {
		b := h.byName[name]
		calls, failures := b.Counts(now)
		out = append(out, BreakerStatus{Model: name, State: b.State(now), Calls: calls, Failures: failures})
	}
	return out
}

// hookUnavailable is the refusal of a write whose hook breaker is open.
func hookUnavailable(model string) *syncproto.Error {
	return syncproto.Errorf(syncproto.CodeHookUnavailable,
		"the conflict hook of model %s is failing and its circuit breaker is open; nothing was decided: resend later", model)
}

// Breakers reports the state of every hook breaker, one per model
// declared with syncproto.PolicyHook (AnyModel for the one undeclared models share),
// in name order; empty when no model uses syncproto.PolicyHook.
func (r *Resolver) Breakers() []BreakerStatus { return r.breakers.status() }

// BreakerOf names the breaker that guards model's hook calls: model
// itself when it is declared with syncproto.PolicyHook, else AnyModel.
func (r *Resolver) BreakerOf(model string) string { return r.breakers.name(model) }
