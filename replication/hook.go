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
)

// DefaultHookTimeout bounds one hook call when ResolverOptions.HookTimeout
// is zero. It is deliberately short: the hook runs inside the batch's write
// transaction, so every batch sharing that group commit waits for it.
const DefaultHookTimeout = time.Second

// ErrNoHook means a model is declared with PolicyHook but no Hook was given
// (NewResolver), or PolicyHook was passed to the pure Resolve. It is a
// configuration error: supply a Hook or change the model's policy.
var ErrNoHook = errors.New("no conflict hook configured")

// Hook is an embedder's conflict policy. It is called for every proposal to
// a model declared with PolicyHook, with the key's current record (exists
// false and a zero Record when the key was never written), and answers with
// Accept, Reject or Merge.
//
// The hook runs on its own goroutine under a deadline (ctx carries it). It
// must be safe for concurrent use, must not retain or modify the byte slices
// it is given, and should return promptly when ctx is done: a hook that
// misses its deadline, returns an error, panics or returns an invalid result
// is overruled by PolicyLWW (Decision.Fallback says which), and a call that
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
	Verdict HookVerdict
	// Reason explains a rejection to the client and in the conflict log.
	Reason string
	// Value is the merged JSON value of a HookMerge.
	Value []byte
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
)

// ResolverOptions configures a Resolver. The zero value means: every model
// uses DefaultPolicy, no hook, DefaultHookTimeout, no logging.
type ResolverOptions struct {
	// Policies declares each model's policy; undeclared models use
	// DefaultPolicy.
	Policies Config
	// Hook decides for models declared with PolicyHook. Required when any
	// model uses PolicyHook.
	Hook Hook
	// HookTimeout bounds each hook call; 0 means DefaultHookTimeout.
	HookTimeout time.Duration
	// Logger receives one warning per hook fallback (without values);
	// nil discards.
	Logger *slog.Logger
}

// Resolver decides proposals by their model's declared policy. It is the
// entry point the server's apply path calls; the decisions themselves are
// the pure Resolve plus the pure reading of a hook's answer. A Resolver is
// safe for concurrent use.
type Resolver struct {
	policies Config
	hook     Hook
	timeout  time.Duration
	log      *slog.Logger

	mu       sync.Mutex
	inflight int           // hook calls still running, abandoned ones included
	idle     chan struct{} // closed while inflight == 0
}

// NewResolver validates opts and returns a Resolver. It fails with
// ErrUnknownPolicy when a model is declared with a policy ParsePolicy does
// not know, with ErrNoHook when a model uses PolicyHook without a Hook, and
// on a negative HookTimeout.
func NewResolver(opts ResolverOptions) (*Resolver, error) {
	for model, p := range opts.Policies {
		if _, err := ParsePolicy(string(p)); err != nil {
			return nil, fmt.Errorf("new resolver: model %s: %w", model, err)
		}
	}
	if opts.Hook == nil && opts.Policies.Uses(PolicyHook) {
		return nil, fmt.Errorf("new resolver: %w, but the policies (%s) use %s", ErrNoHook, opts.Policies.String(), PolicyHook)
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
	close(r.idle)
	return r, nil
}

// Policy returns the policy model is declared with.
func (r *Resolver) Policy(model string) Policy { return r.policies.For(model) }

// Resolve decides p against the current record by p.Model's policy. exists
// reports whether the key has a record (a tombstone counts).
//
// For PolicyHook it asks the hook and never fails because of the hook: a
// hook that times out, errs, panics or answers nonsense is overruled by
// PolicyLWW and the Decision says so in Fallback. Resolve fails only for a
// malformed proposal (ErrInvalidProposal), a missing base version under
// PolicyOptimistic (ErrBaseVersionRequired), or when ctx itself ends while
// the hook runs (ctx.Err()); nothing is to be applied in any of those cases.
func (r *Resolver) Resolve(ctx context.Context, current Record, exists bool, p Proposal) (Decision, error) {
	policy := r.policies.For(p.Model)
	if policy != PolicyHook {
		return Resolve(policy, current, exists, p)
	}
	if err := p.validate(); err != nil {
		return Decision{}, err
	}
	if !exists {
		current = Record{}
	}
	res, err := r.ask(ctx, current, exists, p)
	if err == nil {
		err = res.validate()
	}
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return Decision{}, fmt.Errorf("resolve %s/%s op %s: hook: %w", p.Model, p.Key, p.OpID, ctxErr)
		}
		return r.fallback(current, exists, p, err), nil
	}
	return decideHook(current, p, res), nil
}

// Wait blocks until no hook call is running, including calls abandoned at
// their deadline that are still executing, or until ctx ends. The server
// calls it at shutdown after its last Resolve.
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

// fallback decides p by PolicyLWW because the hook could not.
func (r *Resolver) fallback(current Record, exists bool, p Proposal, err error) Decision {
	failure := &hookFailure{reason: FallbackInvalid, err: err}
	errors.As(err, &failure)
	attrs := []any{"model", p.Model, "op_id", p.OpID, "fallback", string(failure.reason), "err", failure.err}
	if failure.stack != nil {
		attrs = append(attrs, "stack", string(failure.stack))
	}
	r.log.Warn("conflict hook failed; last-writer-wins decided", attrs...)
	d := resolveLWW(current, exists, p)
	d.Fallback = failure.reason
	if d.Conflict != nil {
		d.Conflict.Reason = fmt.Sprintf("%s (hook fallback: %s)", d.Conflict.Reason, failure.reason)
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

// validate reports whether res is a decision Resolve can carry out.
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
			Policy:   PolicyHook,
			Winner:   current,
			Reason:   reason,
			Conflict: newConflict(p, PolicyHook, reason, p.side(), current.side()),
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
			Policy:   PolicyHook,
			Record:   merged,
			Reason:   ReasonHookMerge,
			Conflict: newConflict(p, PolicyHook, ReasonHookMerge, p.side(), merged.side()),
		}
	}
	return Decision{Outcome: OutcomeApplied, Policy: PolicyHook, Record: p.record(current.Version)}
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}
