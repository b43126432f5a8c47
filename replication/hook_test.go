package replication_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	r "github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// noDeadline is the hook timeout for tests whose hook answers at once: long
// enough that a loaded machine cannot turn the answer into a timeout.
const noDeadline = time.Hour

// hookResolver returns a Resolver whose "notes" model is decided by hook,
// and the buffer its logger writes to.
func hookResolver(t *testing.T, hook r.Hook, timeout time.Duration) (*r.Resolver, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	res, err := r.NewResolver(r.ResolverOptions{
		Policies:    r.Config{"notes": syncproto.PolicyHook},
		Hook:        hook,
		HookTimeout: timeout,
		Logger:      slog.New(slog.NewTextHandler(&logs, nil)),
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, res.Wait(ctx), "a hook call outlived the test")
	})
	return res, &logs
}

// resolve asks res's hook about p against current, as an edge does
// (AskHooks), then decides the write as Decide does.
func resolve(ctx context.Context, res *r.Resolver, current r.Record, exists bool, p r.Proposal) (r.Decision, error) {
	b := r.Batch{Tenant: p.Tenant, ClientID: p.ClientID, Writes: []r.Write{{Mutation: mutationOf(p), Policy: res.Policy(p.Model)}}}
	current2 := func(context.Context, string, string, string) (r.Record, bool, error) { return current, exists, nil }
	if err := res.AskHooks(ctx, &b, current2); err != nil {
		return r.Decision{}, err
	}
	d, stale, err := r.DecideWrite(&b.Writes[0], current, exists, p)
	if stale {
		return r.Decision{}, errors.New("stale hook answer")
	}
	return d, err
}

func TestHookDecides(t *testing.T) {
	later, earlier := ts(2000, 0, "a"), ts(500, 0, "a")
	merged := []byte(`{"v":"merged"}`)
	mergedRecord := func(p r.Proposal) r.Record {
		rec := applied(p, current.Version)
		rec.Value, rec.Deleted = merged, false
		if current.HLC.Compare(p.HLC) > 0 {
			rec.HLC = current.HLC
		}
		return rec
	}
	tests := []struct {
		name   string
		answer r.HookResult
		p      r.Proposal
		want   r.Decision
	}{
		{"accept applies even an older write", r.Accept(), put(earlier, nil),
			appliedAs(syncproto.PolicyHook, applied(put(earlier, nil), current.Version))},
		{"reject is a conflict with the hook's reason", r.Reject("frozen"), put(later, nil), r.Decision{
			Outcome: r.OutcomeConflict, Policy: syncproto.PolicyHook, Winner: current, Reason: "hook rejected: frozen",
			Conflict: conflictRow(syncproto.PolicyHook, "hook rejected: frozen", proposalSide(put(later, nil)), recordSide(current)),
		}},
		{"reject without a reason", r.Reject(""), put(later, nil), r.Decision{
			Outcome: r.OutcomeConflict, Policy: syncproto.PolicyHook, Winner: current, Reason: r.ReasonHookReject,
			Conflict: conflictRow(syncproto.PolicyHook, r.ReasonHookReject, proposalSide(put(later, nil)), recordSide(current)),
		}},
		{"merge stores the merged value and logs the proposal", r.Merge(merged), put(later, nil), r.Decision{
			Outcome: r.OutcomeApplied, Policy: syncproto.PolicyHook, Record: mergedRecord(put(later, nil)), Reason: r.ReasonHookMerge,
			Conflict: conflictRow(syncproto.PolicyHook, r.ReasonHookMerge, proposalSide(put(later, nil)), recordSide(mergedRecord(put(later, nil)))),
		}},
		{"merge of an older write keeps the newer hlc", r.Merge(merged), put(earlier, nil), r.Decision{
			Outcome: r.OutcomeApplied, Policy: syncproto.PolicyHook, Record: mergedRecord(put(earlier, nil)), Reason: r.ReasonHookMerge,
			Conflict: conflictRow(syncproto.PolicyHook, r.ReasonHookMerge, proposalSide(put(earlier, nil)), recordSide(mergedRecord(put(earlier, nil)))),
		}},
		{"merge turns a delete into a put", r.Merge(merged), del(later, nil), r.Decision{
			Outcome: r.OutcomeApplied, Policy: syncproto.PolicyHook, Record: mergedRecord(del(later, nil)), Reason: r.ReasonHookMerge,
			Conflict: conflictRow(syncproto.PolicyHook, r.ReasonHookMerge, proposalSide(del(later, nil)), recordSide(mergedRecord(del(later, nil)))),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotCurrent r.Record
			var gotExists bool
			res, _ := hookResolver(t, func(_ context.Context, cur r.Record, exists bool, _ r.Proposal) (r.HookResult, error) {
				gotCurrent, gotExists = cur, exists
				return tt.answer, nil
			}, noDeadline)
			got, err := resolve(context.Background(), res, current, true, tt.p)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			require.Equal(t, current, gotCurrent)
			require.True(t, gotExists)
		})
	}
}

func TestHookSeesAbsentKey(t *testing.T) {
	res, _ := hookResolver(t, func(_ context.Context, cur r.Record, exists bool, _ r.Proposal) (r.HookResult, error) {
		if exists || cur.Version != 0 {
			return r.Reject("expected an absent key"), nil
		}
		return r.Accept(), nil
	}, noDeadline)
	got, err := resolve(context.Background(), res, current, false, put(ts(1, 0, "a"), nil))
	require.NoError(t, err)
	require.Equal(t, appliedAs(syncproto.PolicyHook, applied(put(ts(1, 0, "a"), nil), 0)), got)
}

// TestHookFallsBackToLWW covers every way a hook can fail to decide: the
// decision is LWW's, Fallback says why, and the failure is logged.
func TestHookFallsBackToLWW(t *testing.T) {
	tests := []struct {
		name string
		hook r.Hook
		want r.FallbackReason
	}{
		{"timeout", func(ctx context.Context, _ r.Record, _ bool, _ r.Proposal) (r.HookResult, error) {
			<-ctx.Done() // the deadline is the only way out
			return r.HookResult{}, ctx.Err()
		}, r.FallbackTimeout},
		{"panic", func(context.Context, r.Record, bool, r.Proposal) (r.HookResult, error) {
			panic("hook bug")
		}, r.FallbackPanic},
		{"error", func(context.Context, r.Record, bool, r.Proposal) (r.HookResult, error) {
			return r.Accept(), errors.New("policy service down")
		}, r.FallbackError},
		{"zero result", func(context.Context, r.Record, bool, r.Proposal) (r.HookResult, error) {
			return r.HookResult{}, nil
		}, r.FallbackInvalid},
		{"merge with invalid JSON", func(context.Context, r.Record, bool, r.Proposal) (r.HookResult, error) {
			return r.Merge([]byte(`{"v":`)), nil
		}, r.FallbackInvalid},
		{"merge with nil value", func(context.Context, r.Record, bool, r.Proposal) (r.HookResult, error) {
			return r.Merge(nil), nil
		}, r.FallbackInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			timeout := noDeadline
			if tt.want == r.FallbackTimeout {
				timeout = 20 * time.Millisecond
			}
			res, logs := hookResolver(t, tt.hook, timeout)

			// A newer write: LWW applies it.
			got, err := resolve(context.Background(), res, current, true, put(ts(2000, 0, "a"), nil))
			require.NoError(t, err)
			want := appliedAs(syncproto.PolicyLWW, applied(put(ts(2000, 0, "a"), nil), current.Version))
			want.Fallback = tt.want
			require.Equal(t, want, got)

			// An older write: LWW supersedes it, and the conflict row says
			// the hook fell back.
			got, err = resolve(context.Background(), res, current, true, put(ts(500, 0, "a"), nil))
			require.NoError(t, err)
			want = supersededBy(current, put(ts(500, 0, "a"), nil))
			want.Fallback = tt.want
			want.Conflict.Reason = r.ReasonOlderHLC + " (hook fallback: " + string(tt.want) + ")"
			require.Equal(t, want, got)

			require.Contains(t, logs.String(), "fallback="+string(tt.want))
			require.NotContains(t, logs.String(), `{"v":"new"}`, "a value was logged")
		})
	}
}

func TestHookPanicLogsStack(t *testing.T) {
	res, logs := hookResolver(t, func(context.Context, r.Record, bool, r.Proposal) (r.HookResult, error) {
		panic("hook bug")
	}, noDeadline)
	_, err := resolve(context.Background(), res, current, true, put(ts(2000, 0, "a"), nil))
	require.NoError(t, err)
	require.Contains(t, logs.String(), "hook bug")
	require.Contains(t, logs.String(), "hook_test.go")
}

// TestHookIgnoringDeadline: a hook that ignores its context cannot hold up
// the push; its call is abandoned at the deadline, and Wait reports
// when it finally returns.
func TestHookIgnoringDeadline(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{})
	res, _ := hookResolver(t, func(context.Context, r.Record, bool, r.Proposal) (r.HookResult, error) {
		close(entered)
		<-release
		return r.Reject("too late"), nil
	}, 10*time.Millisecond)

	got, err := resolve(context.Background(), res, current, true, put(ts(2000, 0, "a"), nil))
	require.NoError(t, err)
	require.Equal(t, r.FallbackTimeout, got.Fallback)
	require.Equal(t, r.OutcomeApplied, got.Outcome)
	<-entered

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, res.Wait(ctx), context.Canceled, "the abandoned call is still running")
	close(release)
	require.NoError(t, res.Wait(context.Background()))
}

// TestHookCallerGivesUp: when the caller's own context ends, AskHooks fails
// with it instead of deciding by fallback.
func TestHookCallerGivesUp(t *testing.T) {
	entered := make(chan struct{})
	res, _ := hookResolver(t, func(ctx context.Context, _ r.Record, _ bool, _ r.Proposal) (r.HookResult, error) {
		close(entered)
		<-ctx.Done()
		return r.HookResult{}, ctx.Err()
	}, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-entered
		cancel()
	}()
	got, err := resolve(ctx, res, current, true, put(ts(2000, 0, "a"), nil))
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, r.Decision{}, got)
}

// TestHookGetsCopies: the hook may outlive AskHooks, so it must not share
// the caller's buffers.
func TestHookGetsCopies(t *testing.T) {
	res, _ := hookResolver(t, func(_ context.Context, cur r.Record, _ bool, p r.Proposal) (r.HookResult, error) {
		cur.Value[0], p.Value[0] = 'X', 'X'
		return r.Accept(), nil
	}, noDeadline)
	cur := current
	cur.Value = []byte(`{"v":"old"}`)
	p := put(ts(2000, 0, "a"), nil)
	p.Value = []byte(`{"v":"new"}`)
	got, err := resolve(context.Background(), res, cur, true, p)
	require.NoError(t, err)
	require.Equal(t, `{"v":"old"}`, string(cur.Value))
	require.Equal(t, `{"v":"new"}`, string(got.Record.Value))
}

// TestHookNeverSeesRefusedWrites: a write the edge refused (here an
// invalid one) is never shown to the hook, and deciding an invalid
// proposal fails before any policy.
func TestHookNeverSeesRefusedWrites(t *testing.T) {
	res, _ := hookResolver(t, func(context.Context, r.Record, bool, r.Proposal) (r.HookResult, error) {
		t.Error("hook called with an invalid proposal")
		return r.Accept(), nil
	}, noDeadline)
	p := put(ts(2000, 0, "a"), nil)
	p.Key = ""
	b := r.Admit(r.Author{Tenant: "t1", ClientID: "a", CanWrite: func(string) bool { return true }},
		[]syncproto.Mutation{mutationOf(p)}, r.Config{"notes": syncproto.PolicyHook}, time.UnixMilli(2000), time.Minute)
	require.NotNil(t, b.Writes[0].Refusal)
	require.NoError(t, res.AskHooks(context.Background(), &b, func(context.Context, string, string, string) (r.Record, bool, error) {
		t.Error("current record read for a refused write")
		return r.Record{}, false, nil
	}))
	require.Nil(t, b.Writes[0].Hook)
	_, _, err := r.DecideWrite(&r.Write{Policy: syncproto.PolicyHook, Hook: &r.HookAnswer{Version: 3, Result: r.Accept()}}, current, true, p)
	require.ErrorIs(t, err, r.ErrInvalidProposal)
}

func TestResolverRoutesByModel(t *testing.T) {
	res, err := r.NewResolver(r.ResolverOptions{Policies: r.Config{"notes": syncproto.PolicyOptimistic}})
	require.NoError(t, err)
	require.Equal(t, syncproto.PolicyOptimistic, res.Policy("notes"))
	require.Equal(t, syncproto.PolicyLWW, res.Policy("todos"))

	_, err = resolve(context.Background(), res, current, true, put(ts(2000, 0, "a"), nil))
	require.ErrorIs(t, err, r.ErrBaseVersionRequired)

	p := put(ts(2000, 0, "a"), nil)
	p.Model = "todos"
	got, err := resolve(context.Background(), res, r.Record{}, false, p)
	require.NoError(t, err)
	require.Equal(t, syncproto.PolicyLWW, got.Policy)
}

func TestNewResolverRefuses(t *testing.T) {
	_, err := r.NewResolver(r.ResolverOptions{Policies: r.Config{"notes": syncproto.PolicyHook}})
	require.ErrorIs(t, err, r.ErrNoHook)
	_, err = r.NewResolver(r.ResolverOptions{HookTimeout: -time.Second})
	require.Error(t, err)
	_, err = r.NewResolver(r.ResolverOptions{Policies: r.Config{"notes": "crdt"}})
	require.ErrorIs(t, err, r.ErrUnknownPolicy)
}
