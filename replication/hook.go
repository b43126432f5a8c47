package replication

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/syncproto"
)

// DefaultHookTimeout bounds one hook call when ResolverOptions.HookTimeout
// is zero. It is deliberately short: the push waits for its hooks before
// it is committed or replicated.
const DefaultHookTimeout = time.Second

// ErrNoHook means a model is declared with syncproto.PolicyHook but no Hook was given
// (NewResolver), or syncproto.PolicyHook was passed to the pure Resolve. It is a
// configuration error: supply a Hook or change the model's policy.
var ErrNoHook = errors.New("no conflict hook configured")

// Hook is an embedder's conflict policy. It is called for every proposal to
// a model declared with syncproto.PolicyHook, with the key's current record (exists
// false and a zero Record when the key was never written), and answers with
// Accept, Reject or Merge.
//
// The hook runs on its own goroutine under a deadline (ctx carries it). It
// must be safe for concurrent use, must not retain or modify the byte slices
// it is given, and should return promptly when ctx is done: a hook that
// misses its deadline, returns an error, panics or returns an invalid result
// is overruled by syncproto.PolicyLWW (HookAnswer.Fallback says which), and a call that
// ignores ctx keeps its goroutine until it returns (Resolver.Wait).
type Hook func(ctx context.Context, current Record, exists bool, p Proposal) (HookResult, error)

// HookVerdict is what a hook decided.
type HookVerdict int

// The verdicts. The zero HookVerdict is invalid, so that a hook returning a
// zero HookResult is caught rather than read as a decision.
const (
	// HookAccept applies the proposal as sent.
	HookAccept HookVerdict = iota + 1
	// HookReject refuses the proposal; the client gets OutcomeConflict
	// with the current record as the winner and the hook's reason.
	HookReject
	// HookMerge applies HookResult.Value (valid JSON) instead of the
	// proposed value, as a put.
	HookMerge
)

// HookResult is a hook's answer. Build it with Accept, Reject or Merge.
type HookResult struct {
	Verdict HookVerdict `json:"verdict"`
	// Reason explains a rejection to the client and in the conflict log.
	Reason string `json:"reason,omitempty"`
	// Value is the merged JSON value of a HookMerge.
	Value []byte `json:"value,omitempty"`
}

// Accept applies the proposal as sent.
func Accept() HookResult { return HookResult{Verdict: HookAccept} }

// Reject refuses the proposal, telling the client why.
func Reject(reason string) HookResult { return HookResult{Verdict: HookReject, Reason: reason} }

// Merge applies value (which must be valid JSON) as the key's new state.
func Merge(value []byte) HookResult { return HookResult{Verdict: HookMerge, Value: value} }

// FallbackReason says why a hook did not decide. The values are stable and
// few, fit for a metric label.
type FallbackReason string

// The fallback reasons.
const (
	FallbackTimeout FallbackReason = "timeout"
	FallbackError   FallbackReason = "error"
	FallbackPanic   FallbackReason = "panic"
	FallbackInvalid FallbackReason = "invalid_result"
	// FallbackStale: the key changed between the hook's answer and the
	// decision every time the edge asked (see MaxHookAttempts).
	FallbackStale FallbackReason = "stale"
)

// MaxHookAttempts bounds how often an edge asks the hook about one write
// whose key keeps changing before the answer can be carried out; after
// that, last-writer-wins decides (FallbackStale).
const MaxHookAttempts = 3

// ResolverOptions configures a Resolver. The zero value means: every model
// uses DefaultPolicy, no hook, DefaultHookTimeout, no logging.
type ResolverOptions struct {
	// Policies declares each model's policy; undeclared models use
	// DefaultPolicy.
	Policies Config
	// Hook decides for models declared with syncproto.PolicyHook. Required when any
	// model uses syncproto.PolicyHook.
	Hook Hook
	// HookTimeout bounds each hook call; 0 means DefaultHookTimeout.
	HookTimeout time.Duration
	// Logger receives one warning per hook fallback (without values) and
	// one line per breaker transition; nil discards.
	Logger *slog.Logger
	// Breaker sets each hook model's circuit breaker; the zero value is
	// the defaults (see BreakerConfig). While a model's breaker is open,
	// AskHooks refuses its writes hook_unavailable (retryable) at once
	// instead of calling the hook.
	Breaker BreakerConfig
	// Now is the breakers' clock; nil means time.Now.
	Now func() time.Time
	// OnBreaker, when set, is called after every breaker transition, with
	// the breaker's name (see BreakerStatus.Model); it must not call back
	// into the Resolver.
	OnBreaker func(model string, t BreakerTransition)
}

// Resolver is the edge's side of the conflict policies: it knows each
// model's declared policy and asks the embedder's hook, under a deadline,
// before a batch is decided (AskHooks). Hook code may differ between nodes
// and depends on time, so it never runs where batches are decided: Decide
// only carries out the answers the batch holds. A Resolver is safe for
// concurrent use.
type Resolver struct {
	policies Config
	hook     Hook
	timeout  time.Duration
	log      *slog.Logger
	breakers *hookBreakers

	mu       sync.Mutex
	inflight int           // hook calls still running, abandoned ones included
	idle     chan struct{} // closed while inflight == 0
}

// NewResolver validates opts and returns a Resolver. It fails with
// ErrUnknownPolicy when a model is declared with a policy ParsePolicy does
// not know, with ErrNoHook when a model uses syncproto.PolicyHook without a Hook, and
// on a negative HookTimeout.
func NewResolver(opts ResolverOptions) (*Resolver, error) {
	for model, p := range opts.Policies {
		if model == AnyModel && p == syncproto.PolicyNone {
			continue
		}
		if _, err := ParsePolicy(string(p)); err != nil {
			return nil, fmt.Errorf("new resolver: model %s: %w", model, err)
		}
	}
	if opts.Hook == nil && opts.Policies.Uses(syncproto.PolicyHook) {
		return nil, fmt.Errorf("new resolver: %w, but the policies (%s) use %s", ErrNoHook, opts.Policies.String(), syncproto.PolicyHook)
	}
	if opts.HookTimeout < 0 {
		return nil, fmt.Errorf("new resolver: negative hook timeout %s", opts.HookTimeout)
	}
	r := &Resolver{
		policies: opts.Policies,
		hook:     opts.Hook,
		timeout:  opts.HookTimeout,
		log:      opts.Logger,
		idle:     make(chan struct{}),
	}
	if r.timeout == 0 {
		r.timeout = DefaultHookTimeout
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	var err error
	if r.breakers, err = newHookBreakers(opts.Policies, opts.Breaker, now, r.log, opts.OnBreaker); err != nil {
		return nil, fmt.Errorf("new resolver: %w", err)
	}
	close(r.idle)
	return r, nil
}

// Policy returns the policy model is declared with.
func (r *Resolver) Policy(model string) syncproto.Policy { return r.policies.For(model) }

// CurrentFunc reads a key's current record on the edge, as the edge's
// materialized state has it (exists false for a key never written).
type CurrentFunc func(ctx context.Context, tenant, model, key string) (rec Record, exists bool, err error)

// AskHooks asks the hook about every write of b that is under syncproto.PolicyHook
// and not refused, against the key's current record as current reads it,
// and stores each answer in the write (Write.Hook). A write whose model's
// circuit breaker is open is not asked: it is refused hook_unavailable
// (Write.Refusal, retryable), and every fallback but FallbackStale counts
// as a failure on that breaker. It never fails because
// of the hook: a hook that times out, errs, panics or answers nonsense
// leaves a HookAnswer with Fallback set, and last-writer-wins decides. It
// fails only when current fails or ctx itself ends; then b is unchanged
// in meaning and must not be decided.
func (r *Resolver) AskHooks(ctx context.Context, b *Batch, current CurrentFunc) error {
	ask := func(i int) error {
		w := &b.Writes[i]
		if w.Refusal != nil || w.Policy != syncproto.PolicyHook {
			return nil
		}
		if r.hook == nil {
			return fmt.Errorf("ask hook: %w", ErrNoHook)
		}
		m := &w.Mutation
		tk, ok := r.breakers.allow(m.Model)
		if !ok {
			w.Refusal = hookUnavailable(m.Model)
			return nil
		}
		rec, exists, err := current(ctx, b.Tenant, m.Model, m.Key)
		if err != nil {
			r.breakers.release(m.Model, tk)
			return fmt.Errorf("ask hook about %s/%s: %w", m.Model, m.Key, err)
		}
		if !exists {
			rec = Record{}
		}
		p := b.proposal(m)
		if w.Upcast != nil {
			p.Value = w.Upcast // the hook decides about the value as applied
		}
		res, err := r.ask(ctx, rec, exists, p)
		if err == nil {
			err = res.validate()
		}
		w.Hook = &HookAnswer{Version: rec.Version, Result: res}
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				r.breakers.release(m.Model, tk)
				return fmt.Errorf("ask hook about %s/%s op %s: %w", m.Model, m.Key, m.OpID, ctxErr)
			}
			w.Hook = &HookAnswer{Version: rec.Version, Fallback: r.failed(p, err)}
		}
		r.breakers.record(m.Model, tk, err == nil)
		return nil
	}
	for i := range b.Writes {
		if err := ask(i); err != nil {
			return err
		}
	}
	return nil
}

// Wait blocks until no hook call is running, including calls abandoned at
// their deadline that are still executing, or until ctx ends. The server
// calls it at shutdown after its last AskHooks.
func (r *Resolver) Wait(ctx context.Context) error {
	r.mu.Lock()
	idle := r.idle
	r.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for hooks: %w", ctx.Err())
	}
}

// hookFailure is why a hook gave no usable answer.
type hookFailure struct {
	reason FallbackReason
	err    error
	stack  []byte // the hook's stack when it panicked
}

func (f *hookFailure) Error() string { return fmt.Sprintf("hook %s: %v", f.reason, f.err) }

// ask runs the hook on its own goroutine under the deadline. A failure is a
// *hookFailure unless ctx itself ended.
func (r *Resolver) ask(ctx context.Context, current Record, exists bool, p Proposal) (HookResult, error) {
	hctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	// The goroutine may outlive this call; it gets its own copies so that
	// the caller can reuse its buffers.
	current.Value = cloneBytes(current.Value)
	p.Value = cloneBytes(p.Value)
	answer := make(chan hookAnswer, 1)
	r.started()
	go func() {
		defer r.finished()
		answer <- callHook(hctx, r.hook, current, exists, p)
	}()
	select {
	case a := <-answer:
		switch {
		case a.stack != nil:
			return HookResult{}, &hookFailure{reason: FallbackPanic, err: a.err, stack: a.stack}
		case a.err != nil && hctx.Err() != nil && ctx.Err() == nil:
			return HookResult{}, &hookFailure{reason: FallbackTimeout, err: a.err}
		case a.err != nil:
			return HookResult{}, &hookFailure{reason: FallbackError, err: a.err}
		}
		return a.res, nil
	case <-hctx.Done():
		return HookResult{}, &hookFailure{reason: FallbackTimeout, err: fmt.Errorf("no answer within %s", r.timeout)}
	}
}

// failed logs why the hook gave no usable answer and returns the reason.
func (r *Resolver) failed(p Proposal, err error) FallbackReason {
	failure := &hookFailure{reason: FallbackInvalid, err: err}
	errors.As(err, &failure)
	attrs := []any{"model", p.Model, "op_id", p.OpID, "fallback", string(failure.reason), "err", failure.err}
	if failure.stack != nil {
		attrs = append(attrs, "stack", string(failure.stack))
	}
	r.log.Warn("conflict hook failed; last-writer-wins decides", attrs...)
	return failure.reason
}

// lwwFallback is the decision when the hook could not decide: syncproto.PolicyLWW's,
// with the reason in Fallback and in the conflict-log row.
func lwwFallback(current Record, exists bool, p Proposal, reason FallbackReason) Decision {
	d := resolveLWW(current, exists, p)
	d.Fallback = reason
	if d.Conflict != nil {
		d.Conflict.Reason = fmt.Sprintf("%s (hook fallback: %s)", d.Conflict.Reason, reason)
	}
	return d
}

func (r *Resolver) started() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inflight == 0 {
		r.idle = make(chan struct{})
	}
	r.inflight++
}

func (r *Resolver) finished() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight--
	if r.inflight == 0 {
		close(r.idle)
	}
}

// hookAnswer is what one hook call produced; stack is set when it panicked.
type hookAnswer struct {
	res   HookResult
	err   error
	stack []byte
}

// callHook calls h, turning a panic into an answer.
func callHook(ctx context.Context, h Hook, current Record, exists bool, p Proposal) (a hookAnswer) {
	defer func() {
		if v := recover(); v != nil {
			a = hookAnswer{err: fmt.Errorf("panic: %v", v), stack: debug.Stack()}
		}
	}()
	res, err := h(ctx, current, exists, p)
	return hookAnswer{res: res, err: err}
}

// validate reports whether res is a verdict Decide can carry out.
func (res HookResult) validate() error {
	switch res.Verdict {
	case HookAccept, HookReject:
		return nil
	case HookMerge:
		if res.Value == nil || !json.Valid(res.Value) {
			return &hookFailure{reason: FallbackInvalid, err: errors.New("merge value is not valid JSON")}
		}
		return nil
	}
	return &hookFailure{reason: FallbackInvalid, err: fmt.Errorf("unknown verdict %d", res.Verdict)}
}

// decideHook turns a valid hook answer into a Decision. It is pure.
func decideHook(current Record, p Proposal, res HookResult) Decision {
	switch res.Verdict {
	case HookReject:
		reason := ReasonHookReject
		if res.Reason != "" {
			reason += ": " + res.Reason
		}
		return Decision{
			Outcome:  OutcomeConflict,
			Policy:   syncproto.PolicyHook,
			Winner:   current,
			Reason:   reason,
			Conflict: newConflict(p, syncproto.PolicyHook, reason, p.side(), current.side()),
		}
	case HookMerge:
		merged := p.record(current.Version)
		merged.Value = res.Value
		merged.Deleted = false
		if current.HLC.Compare(merged.HLC) > 0 {
			merged.HLC = current.HLC
		}
		return Decision{
			Outcome:  OutcomeApplied,
			Policy:   syncproto.PolicyHook,
			Record:   merged,
			Reason:   ReasonHookMerge,
			Conflict: newConflict(p, syncproto.PolicyHook, ReasonHookMerge, p.side(), merged.side()),
		}
	}
	return Decision{Outcome: OutcomeApplied, Policy: syncproto.PolicyHook, Record: p.record(current.Version)}
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}
