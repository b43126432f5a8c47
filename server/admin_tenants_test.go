package server_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncproto"
)

// TestAdminTenantsPagesWithCounts: the tenants answer pages by name
// (ParamAfter, ParamLimit) and gives each tenant its retained oplog
// entries, its quota refusals and the mutations it pushed; the figures
// carry the per-tenant totals the console samples for rates.
func TestAdminTenantsPagesWithCounts(t *testing.T) {
	// Buckets that do not refill: a hello and a full push spend a
	// token's burst.
	ts := startServer(t, server.Config{
		RequestsPerSecond: 1e6, RequestBurst: 1 << 20,
		Quotas: server.Quotas{TokenMutationsPerSecond: 0.001, TokenMutationBurst: 1 + syncproto.MaxBatch},
	})
	for i := range 5 {
		tenant := fmt.Sprintf("t%02d", i)
		c, clock := session(t, ts, ts.Member(t, tenant, "dev"), "dev")
		if i != 2 {
			requireApplied(t, c.push("p1", put(t, clock, "notes", "a", `1`)))
			continue
		}
		muts := make([]syncproto.Mutation, syncproto.MaxBatch)
		for j := range muts {
			muts[j] = put(t, clock, "notes", fmt.Sprintf("k%d", j), `1`)
		}
		requireApplied(t, c.push("p1", muts...))
		c.send(&syncproto.Push{ID: "p2", Mutations: []syncproto.Mutation{put(t, clock, "notes", "c", `3`)}})
		c.recvError("p2", syncproto.CodeRateLimited)
	}

	var got []adminapi.Tenant
	after := ""
	for pages := 1; ; pages++ {
		require.LessOrEqual(t, pages, 3)
		var page adminapi.TenantsPage
		require.Equal(t, http.StatusOK, ts.adminGet(t, adminapi.PathTenants+"?"+url.Values{adminapi.ParamLimit: {"2"}, adminapi.ParamAfter: {after}}.Encode(), ts.adminToken, &page))
		require.LessOrEqual(t, len(page.Tenants), 2)
		got = append(got, page.Tenants...)
		if page.Next == "" {
			require.False(t, page.Truncated)
			require.Equal(t, 3, pages, "five tenants in pages of two")
			break
		}
		require.True(t, page.Truncated)
		after = page.Next
	}
	require.Len(t, got, 5)
	for i, tn := range got {
		require.Equal(t, fmt.Sprintf("t%02d", i), tn.Tenant)
		require.Equal(t, 1, tn.Sessions)
		want := uint64(1)
		if i == 2 {
			want = syncproto.MaxBatch
			require.Equal(t, uint64(1), tn.QuotaRefusals, "the refused push")
		} else {
			require.Zero(t, tn.QuotaRefusals)
		}
		require.Equal(t, want, tn.OplogEntries, tn.Tenant)
		require.Equal(t, want, tn.MutationsPushed, tn.Tenant)
	}
	var f adminapi.Figures
	require.Equal(t, http.StatusOK, ts.adminGet(t, adminapi.PathFigures, ts.adminToken, &f))
	require.Equal(t, uint64(syncproto.MaxBatch), f.TenantMutations["t02"])
	require.Equal(t, http.StatusBadRequest, ts.adminGet(t, adminapi.PathTenants+"?limit=x", ts.adminToken, nil))
}
