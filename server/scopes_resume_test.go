package server_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// TestUnfinishedBackfillOfALostValueIsEvicted: a device that disconnected
// in the middle of a value's backfill holds part of it; it sends the
// position back in resume. When it reconnects no longer requesting the
// value, or, requesting every value, with a token that no longer grants
// it, the first frame evicts the value (unsubscribed, revoked) as it would
// a value of have: the part it holds does not linger.
func TestUnfinishedBackfillOfALostValueIsEvicted(t *testing.T) {
	ts, owner := scopedServer(t, 0)
	oc, oclock := session(t, ts, owner, "owner")
	putTasks(t, oc, oclock, "p1", "a", 2)
	putTasks(t, oc, oclock, "p2", "b", syncproto.MaxPullLimit+10)
	head := ts.head(t)
	for _, tc := range []struct {
		name          string
		first, second syncproto.ScopeSet // token grants
		request, then syncproto.ScopeSet // requests
		want          syncproto.Eviction
	}{
		{"unsubscribed", syncproto.ScopeSet{"project": {"p1", "p2"}}, syncproto.ScopeSet{"project": {"p1", "p2"}},
			syncproto.ScopeSet{"project": {"p1", "p2"}}, syncproto.ScopeSet{"project": {"p1"}},
			syncproto.Eviction{Scope: "project", Value: "p2", Reason: syncproto.EvictUnsubscribed}},
		{"revoked", syncproto.ScopeSet{"project": {"p1", "p2"}}, syncproto.ScopeSet{"project": {"p1"}},
			syncproto.ScopeSet{"project": {"*"}}, syncproto.ScopeSet{"project": {"*"}},
			syncproto.Eviction{Scope: "project", Value: "p2", Reason: syncproto.EvictRevoked}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "phone", User: "u", Read: []string{"*"}, Scopes: tc.first})
			c, _ := session(t, ts, tok, "phone")
			c.send(&syncproto.Subscribe{ID: "s1", Cursor: head, Scopes: tc.request})
			expect[*syncproto.Changes](c)
			var last string
			have := syncproto.ScopeSet{}
			for last == "" {
				b := expect[*syncproto.Backfill](c)
				if b.Done {
					have["project"] = append(have["project"], b.Value)
					continue
				}
				require.Equal(t, "p2", b.Value, "p1 fits one page")
				last = b.LastKey
			}
			c.conn.CloseNow()

			tok = ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "phone", User: "u", Read: []string{"*"}, Scopes: tc.second})
			c, _ = session(t, ts, tok, "phone")
			c.send(&syncproto.Subscribe{ID: "s2", Cursor: head, Scopes: tc.then, Have: have,
				Resume: map[string]map[string]string{"project": {"p2": last}}})
			first := expect[*syncproto.Changes](c)
			require.Equal(t, []syncproto.Eviction{tc.want}, first.Evictions, fmt.Sprint("have ", have))
			require.Empty(t, c.barrier(), "nothing of p2 is backfilled")
		})
	}
}
