package replication_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// TestRecheck: a batch an honest edge admitted passes Recheck under the
// same declarations and bound (its refused writes included); each way a
// travelling batch can break what its edge checked is refused as
// malformed.
func TestRecheck(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	policies := replication.Config{"docs": syncproto.PolicyOptimistic, "notes": syncproto.PolicyLWW}
	mut := func(model string, wall int64, origin string) syncproto.Mutation {
		return syncproto.Mutation{OpID: "0193a8f0-0000-7000-8000-00000000000a", Model: model, Key: "k", Op: syncproto.OpPut,
			Value: []byte(`1`), HLC: ts(wall, 0, origin), BaseVersion: ptr(uint64(0))}
	}
	admit := func() replication.Batch {
		return replication.Admit(replication.Author{Tenant: "acme", ClientID: "phone", CanWrite: func(string) bool { return true }},
			[]syncproto.Mutation{mut("notes", now.UnixMilli(), "phone"), mut("docs", now.UnixMilli(), "phone"),
				mut("notes", now.Add(time.Hour).UnixMilli(), "phone")}, policies, now, time.Minute)
	}
	honest := admit()
	require.NotNil(t, honest.Writes[2].Refusal, "the edge refused the write from the future")
	require.NoError(t, honest.Recheck(policies, time.Minute))

	for name, tamper := range map[string]func(b *replication.Batch){
		"tenant":           func(b *replication.Batch) { b.Tenant = "" },
		"client id":        func(b *replication.Batch) { b.ClientID = "a b" },
		"refusal struck":   func(b *replication.Batch) { b.Writes[2].Refusal = nil },
		"another's stamp":  func(b *replication.Batch) { b.Writes[0].Mutation.HLC.Origin = "laptop" },
		"invalid mutation": func(b *replication.Batch) { b.Writes[0].Mutation.Key = "" },
		"policy":           func(b *replication.Batch) { b.Writes[1].Policy = syncproto.PolicyLWW },
		"undeclared model": func(b *replication.Batch) { b.Writes[0].Mutation.Model = "other" },
		"no base version":  func(b *replication.Batch) { b.Writes[1].Mutation.BaseVersion = nil },
	} {
		b := admit()
		tamper(&b)
		policies := policies
		if name == "undeclared model" {
			policies = replication.Config{"docs": syncproto.PolicyOptimistic, "notes": syncproto.PolicyLWW, replication.AnyModel: syncproto.PolicyNone}
		}
		require.ErrorIs(t, b.Recheck(policies, time.Minute), replication.ErrMalformedBatch, name)
	}

	hooked := replication.Config{"notes": syncproto.PolicyHook}
	b := replication.Admit(replication.Author{Tenant: "acme", ClientID: "phone", CanWrite: func(string) bool { return true }},
		[]syncproto.Mutation{mut("notes", now.UnixMilli(), "phone")}, hooked, now, time.Minute)
	require.ErrorIs(t, b.Recheck(hooked, time.Minute), replication.ErrMalformedBatch, "a hook write without the hook's answer")
	b.Writes[0].Hook = &replication.HookAnswer{Fallback: replication.FallbackTimeout}
	require.NoError(t, b.Recheck(hooked, time.Minute))
}
