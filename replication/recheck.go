package replication

import (
	"fmt"
	"time"

	"github.com/syncd-dev/syncd/syncproto"
)

// Recheck runs again, on a batch that travelled from its edge (a cluster
// command), the checks Admit made there, with the same functions, except
// the author's right to write each model, which only the token knew: the
// sender's tenant and client id are valid ids, its user and token grants
// well formed, and every write Admit let
// through is valid, names a model under the policy policies declares for
// it, carries a timestamp of the sender's own at most maxSkew ahead of the
// batch's time b.At, has the base version its optimistic policy requires,
// and, under PolicyHook, carries the hook's answer. A batch an honest edge
// admitted under the same policies and bound always passes. The first
// failure is returned, wrapping ErrMalformedBatch. Recheck is pure.
func (b *Batch) Recheck(policies Config, maxSkew time.Duration) error {
	if err := syncproto.ValidateID(b.Tenant); err != nil {
		return fmt.Errorf("%w: tenant: %v", ErrMalformedBatch, err)
	}
	if err := syncproto.ValidateID(b.ClientID); err != nil {
		return fmt.Errorf("%w: client id: %v", ErrMalformedBatch, err)
	}
	if b.User != "" {
		if err := syncproto.ValidateUser(b.User); err != nil {
			return fmt.Errorf("%w: user: %v", ErrMalformedBatch, err)
		}
	}
	if err := b.Grants.Validate("grants", 0); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformedBatch, err)
	}
	if err := b.Requested.check(); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformedBatch, err)
	}
	a := Author{Tenant: b.Tenant, ClientID: b.ClientID, CanWrite: func(string) bool { return true }}
	for i := range b.Writes {
		w := &b.Writes[i]
		if w.Refusal != nil {
			continue
		}
		m := &w.Mutation
		want := policies.For(m.Model)
		if ref := refusal(a, m, want, b.At, maxSkew); ref != nil {
			return fmt.Errorf("%w: write %d (op %s): %s: %s", ErrMalformedBatch, i, m.OpID, ref.Code, ref.Message)
		}
		if w.Policy != want {
			return fmt.Errorf("%w: write %d (op %s) carries policy %q, model %s is declared %q", ErrMalformedBatch, i, m.OpID, w.Policy, m.Model, want)
		}
		if w.Policy == syncproto.PolicyHook && w.Hook == nil {
			return fmt.Errorf("%w: write %d (op %s) of hook model %s has no hook answer", ErrMalformedBatch, i, m.OpID, m.Model)
		}
	}
	return nil
}
