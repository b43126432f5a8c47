package server

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

func testScopes(t *testing.T) *replication.Scopes {
	t.Helper()
	var s replication.Scopes
	require.NoError(t, s.Set("project=tasks.project_id,members.project_id"))
	require.NoError(t, s.SetMembership("project=members:user"))
	require.NoError(t, s.Set("site=visits.site"))
	return &s
}

func ev(scope, value, reason string) syncproto.Eviction {
	return syncproto.Eviction{Scope: scope, Value: value, Reason: reason}
}

func TestPlanScopes(t *testing.T) {
	decl := testScopes(t)
	grants := syncproto.ScopeSet{"project": {"p1", "p2", "p3"}, "site": {"*"}}
	token := syncproto.ScopeSet{"project": {"p1"}, "site": {"*"}}
	for _, tc := range []struct {
		name            string
		requested, have syncproto.ScopeSet
		resume          map[string]map[string]string
		follow          syncproto.ScopeSet
		evictions       []syncproto.Eviction
		backfills       []backfillJob
	}{
		{
			name:      "a subset, nothing held: every value backfilled",
			requested: syncproto.ScopeSet{"project": {"p1", "p2"}},
			follow:    syncproto.ScopeSet{"project": {"p1", "p2"}},
			backfills: []backfillJob{{scope: "project", value: "p1"}, {scope: "project", value: "p2"}},
		},
		{
			name:      "values held are not backfilled, values dropped are evicted unsubscribed",
			requested: syncproto.ScopeSet{"project": {"p2", "p3"}},
			have:      syncproto.ScopeSet{"project": {"p1", "p2"}},
			follow:    syncproto.ScopeSet{"project": {"p2", "p3"}},
			evictions: []syncproto.Eviction{ev("project", "p1", syncproto.EvictUnsubscribed)},
			backfills: []backfillJob{{scope: "project", value: "p3"}},
		},
		{
			name:      "held and wanted but not granted: revoked; wanted, never held, not granted: not_granted",
			requested: syncproto.ScopeSet{"project": {"p1", "p8", "p9"}},
			have:      syncproto.ScopeSet{"project": {"p1", "p9"}},
			follow:    syncproto.ScopeSet{"project": {"p1"}},
			evictions: []syncproto.Eviction{ev("project", "p8", syncproto.EvictNotGranted), ev("project", "p9", syncproto.EvictRevoked)},
		},
		{
			// p7's backfill was left unfinished and p7 is no longer
			// granted: the part held is evicted.
			name:      "every value granted now or later; resume positions honoured",
			requested: syncproto.ScopeSet{"project": {"*"}},
			have:      syncproto.ScopeSet{"project": {"p1"}},
			resume:    map[string]map[string]string{"project": {"p3": "tasks/t9", "p7": "tasks/x"}},
			follow:    syncproto.ScopeSet{"project": {"p1", "p2", "p3"}},
			evictions: []syncproto.Eviction{{Scope: "project", Value: "p7", Reason: syncproto.EvictRevoked}},
			backfills: []backfillJob{{scope: "project", value: "p2"}, {scope: "project", value: "p3", after: "tasks/t9"}},
		},
		{
			name:      "a scope absent from the request delivers none of its rows; held values of it are evicted",
			requested: syncproto.ScopeSet{"site": {"*"}},
			have:      syncproto.ScopeSet{"project": {"p2"}},
			follow:    syncproto.ScopeSet{"site": {"*"}},
			evictions: []syncproto.Eviction{ev("project", "p2", syncproto.EvictUnsubscribed)},
		},
		{
			name:      "under a grant of every value, explicit values are backfilled",
			requested: syncproto.ScopeSet{"site": {"s1", "s2"}},
			have:      syncproto.ScopeSet{"site": {"s1"}},
			follow:    syncproto.ScopeSet{"site": {"s1", "s2"}},
			backfills: []backfillJob{{scope: "site", value: "s2"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := planScopes(decl, grants, token, tc.requested, tc.have, tc.resume, 10)
			require.Nil(t, err)
			require.False(t, sc.legacy)
			require.Equal(t, tc.follow, sc.follow)
			require.Equal(t, tc.evictions, sc.evictions)
			require.Equal(t, tc.backfills, sc.backfills)
		})
	}
}

func TestPlanScopesRefusals(t *testing.T) {
	decl := testScopes(t)
	grants := syncproto.ScopeSet{"project": {"p1", "p2", "p3"}}
	for _, tc := range []struct {
		name            string
		requested, have syncproto.ScopeSet
		resume          map[string]map[string]string
		code            syncproto.Code
	}{
		{"undeclared scope requested", syncproto.ScopeSet{"team": {"a"}}, nil, nil, syncproto.CodeInvalidScope},
		{"undeclared scope held", syncproto.ScopeSet{"project": {"p1"}}, syncproto.ScopeSet{"team": {"a"}}, nil, syncproto.CodeInvalidScope},
		{"undeclared scope resumed", syncproto.ScopeSet{"project": {"p1"}}, nil, map[string]map[string]string{"team": {"a": "x/y"}}, syncproto.CodeInvalidScope},
		{"too many explicit values, granted or not", syncproto.ScopeSet{"project": {"p1", "p7", "p8"}}, nil, nil, syncproto.CodeTooManyScopeValues},
		{"* expanded to the values granted", syncproto.ScopeSet{"project": {"*"}}, nil, nil, syncproto.CodeTooManyScopeValues},
		{"too many held", syncproto.ScopeSet{}, syncproto.ScopeSet{"project": {"a", "b", "c"}}, nil, syncproto.CodeTooManyScopeValues},
		{"too many resumed", syncproto.ScopeSet{}, nil, map[string]map[string]string{"project": {"a": "x/1", "b": "x/2", "c": "x/3"}}, syncproto.CodeTooManyScopeValues},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := planScopes(decl, grants, nil, tc.requested, tc.have, tc.resume, 2)
			require.Nil(t, sc)
			require.NotNil(t, err)
			require.Equal(t, tc.code, err.Code, err.Message)
		})
	}
	t.Run("a request without scopes follows every grant, within the limit", func(t *testing.T) {
		_, err := planScopes(decl, grants, nil, nil, nil, nil, 2)
		require.Equal(t, syncproto.CodeTooManyScopeValues, err.Code)
		sc, err := planScopes(decl, grants, nil, nil, nil, nil, 3)
		require.Nil(t, err)
		require.True(t, sc.legacy)
		require.Equal(t, grants, sc.follow)
	})
}

func TestGrantsChanged(t *testing.T) {
	decl := testScopes(t)
	grants := syncproto.ScopeSet{"project": {"p1", "p2"}}
	token := syncproto.ScopeSet{"project": {"p1"}}
	gc := func(value string, held bool) replication.GrantChange {
		return replication.GrantChange{User: "alice", Scope: "project", Value: value, Held: held}
	}

	sc, err := planScopes(decl, grants, token, syncproto.ScopeSet{"project": {"p1", "p2", "p5"}}, syncproto.ScopeSet{"project": {"p1", "p2"}}, nil, 3)
	require.Nil(t, err)
	require.Equal(t, []syncproto.Eviction{ev("project", "p5", syncproto.EvictNotGranted)}, sc.evictions)

	evs, changed, refusal := sc.grantsChanged([]replication.GrantChange{gc("p1", false), gc("p2", false)})
	require.Nil(t, refusal)
	require.True(t, changed)
	require.Equal(t, []syncproto.Eviction{ev("project", "p2", syncproto.EvictRevoked)}, evs, "p1 stays: the token grants it")
	require.Equal(t, syncproto.ScopeSet{"project": {"p1"}}, sc.follow)

	evs, changed, refusal = sc.grantsChanged([]replication.GrantChange{gc("p5", true), gc("p6", true)})
	require.Nil(t, refusal)
	require.True(t, changed)
	require.Empty(t, evs)
	require.Equal(t, syncproto.ScopeSet{"project": {"p1", "p5"}}, sc.follow, "p5 was requested; p6 was not")
	require.Equal(t, []backfillJob{{scope: "project", value: "p5"}}, sc.backfills)

	_, changed, _ = sc.grantsChanged([]replication.GrantChange{gc("p6", false), {User: "alice", Scope: "team", Value: "x", Held: true}})
	require.False(t, changed, "losing a value not followed, or a grant of an undeclared scope, changes nothing")

	// Revoked before its backfill is sent: the backfill is dropped.
	evs, _, _ = sc.grantsChanged([]replication.GrantChange{gc("p5", false)})
	require.Equal(t, []syncproto.Eviction{ev("project", "p5", syncproto.EvictRevoked)}, evs)
	require.Empty(t, sc.backfills)

	t.Run("gains beyond the limit end the subscription", func(t *testing.T) {
		sc, err := planScopes(decl, grants, token, syncproto.ScopeSet{"project": {"*"}}, nil, nil, 2)
		require.Nil(t, err)
		_, _, refusal := sc.grantsChanged([]replication.GrantChange{gc("p3", true)})
		require.NotNil(t, refusal)
		require.Equal(t, syncproto.CodeTooManyScopeValues, refusal.Code)
	})
	t.Run("a subscription without scopes only learns that something changed", func(t *testing.T) {
		sc, err := planScopes(decl, grants, token, nil, nil, nil, 5)
		require.Nil(t, err)
		for _, g := range []replication.GrantChange{gc("p2", false), gc("p4", true)} {
			evs, changed, _ := sc.grantsChanged([]replication.GrantChange{g})
			require.True(t, changed)
			require.Empty(t, evs)
		}
		_, changed, _ := sc.grantsChanged([]replication.GrantChange{gc("p1", false)})
		require.False(t, changed, "the token still grants p1")
		_, changed, _ = sc.grantsChanged([]replication.GrantChange{gc("p7", false)})
		require.True(t, changed, "a value lost before the grants were read: the device may hold its rows")
	})
}

func TestTokenGrantsAndCap(t *testing.T) {
	decl := testScopes(t)
	p := auth.Principal{Scopes: map[string][]string{"project": {"p2", "p1", "p2"}, "site": {"s1", "*"}, "team": {"a"}}}
	got := declaredTokenGrants(decl, p)
	require.Equal(t, syncproto.ScopeSet{"project": {"p1", "p2"}, "site": {"*"}}, got, "undeclared scopes dropped; * stands alone")
	require.Equal(t, syncproto.ScopeSet{"project": {"p1", "p2"}}, capGrants(got, 2))
	require.Equal(t, syncproto.ScopeSet{"project": {"p1"}}, capGrants(got, 1))
	require.Equal(t, got, capGrants(got, 3))
}

func TestSnapshotURLOfASubscription(t *testing.T) {
	decl := testScopes(t)
	var legacy *subscriptionScopes
	require.Equal(t, syncproto.SnapshotPath, legacy.snapshotURL())
	sc, err := planScopes(decl, syncproto.ScopeSet{"project": {"p1", "p2"}}, nil, syncproto.ScopeSet{"project": {"p2"}, "site": {"*"}}, nil, nil, 10)
	require.Nil(t, err)
	require.Equal(t, syncproto.SnapshotPath+"?scope=project%3Ap2&scope=site%3A%2A&scoped=1", sc.snapshotURL())
}

// TestDevicesDatabaseID: a single node's devices see its store's id (the
// store changes it itself); a cluster's see the cluster's id, joined with a
// digest of the declarations once there are any, valid as an id and
// different for other declarations.
func TestDevicesDatabaseID(t *testing.T) {
	const id = "0193a1f0-5c1e-7a4b-9d2e-6f3c8b1a2e4d"
	decl := testScopes(t)
	require.Equal(t, id, devicesDatabaseID(id, false, decl))
	require.Equal(t, id, devicesDatabaseID(id, true, nil), "a cluster without declarations keeps the id of releases before scopes")
	require.Equal(t, id, devicesDatabaseID(id, true, &replication.Scopes{}))
	scoped := devicesDatabaseID(id, true, decl)
	require.NotEqual(t, id, scoped)
	require.NoError(t, syncproto.ValidateID(scoped))
	require.Equal(t, scoped, devicesDatabaseID(id, true, testScopes(t)), "the same declarations, the same id on every node")
	other := &replication.Scopes{}
	require.NoError(t, other.Set("project=tasks.project_id"))
	require.NotEqual(t, scoped, devicesDatabaseID(id, true, other))
}
