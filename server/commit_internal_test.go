package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
)

// queued is one push for the fair queue's tests: its tenant, its place in
// its tenant's line and its mutations.
func queued(tenant string, i, mutations int) *pushRequest {
	b := &replication.Batch{Tenant: tenant, ClientID: fmt.Sprint(i), Writes: make([]replication.Write, mutations)}
	return newPushRequest(b, time.Time{})
}

// take takes one group from q as the committer does, when nothing is
// queued while the group is applied.
func take(q *fairQueue, maxPushes, maxMutations int) []*pushRequest {
	group, _ := takeWhy(q, maxPushes, maxMutations)
	return group
}

// takeWhy is take, with why the group ended.
func takeWhy(q *fairQueue, maxPushes, maxMutations int) ([]*pushRequest, groupEnd) {
	var group []*pushRequest
	g := newGroupTurns(maxPushes, maxMutations)
	for r := q.next(g); r != nil; r = q.next(g) {
		group = append(group, r)
	}
	return group, g.ended
}

// takeAll empties q in groups of the committer's bounds.
func takeAll(q *fairQueue) [][]*pushRequest {
	var groups [][]*pushRequest
	for g := take(q, maxGroupPushes, maxGroupMutations); len(g) > 0; g = take(q, maxGroupPushes, maxGroupMutations) {
		groups = append(groups, g)
	}
	return groups
}

// A tenant that queues a push while others have long lines is served
// before any of them gets a second turn: on the committer's input, between
// the push's arrival and its service, every other tenant appears in at
// most one run (one turn), whatever the group boundaries. Each tenant's
// pushes are taken in the order queued.
func TestFairQueueServesAWaitingTenantWithinOneRound(t *testing.T) {
	q := newFairQueue(nil)
	for i := range 200 {
		q.push(queued("flood", i, 500))
		q.push(queued("small", i, 7))
	}
	// The committer is busy: some groups were taken before the newcomer.
	served := map[string]int{}
	inOrder := func(r *pushRequest) {
		tenant := r.batch.Tenant
		require.Equal(t, fmt.Sprint(served[tenant]), r.batch.ClientID, "%s's pushes in the order queued", tenant)
		served[tenant]++
	}
	for range 3 {
		g := take(q, maxGroupPushes, maxGroupMutations)
		require.NotEmpty(t, g)
		for _, r := range g {
			inOrder(r)
		}
	}
	q.push(queued("newcomer", 0, 1))

	var before []string // runs of tenants served after the newcomer queued, until it was served
	found := false
	for _, g := range takeAll(q) {
		for _, r := range g {
			tenant := r.batch.Tenant
			found = found || tenant == "newcomer"
			if !found && (len(before) == 0 || before[len(before)-1] != tenant) {
				before = append(before, tenant)
			}
			inOrder(r)
		}
	}
	require.True(t, found, "the newcomer's push was taken")
	require.LessOrEqual(t, len(before), 2, "before the newcomer: at most one turn of each other tenant, got runs %q", before)
	require.Equal(t, map[string]int{"flood": 200, "small": 200, "newcomer": 1}, served)
}

// Saturated, tenants are served mutations in proportion to their weights,
// whatever the size of their pushes.
func TestFairQueueSharesByWeight(t *testing.T) {
	for _, tc := range []struct {
		name         string
		weights      map[string]int
		aSize, bSize int
		wantAPerB    int
	}{
		{"equal weights, equal pushes", nil, 500, 500, 1},
		{"equal weights, many small pushes against full ones", nil, 1, 500, 1},
		{"weight 3 to 1", map[string]int{"a": 3}, 500, 500, 3},
		{"weight 3 to 1, small pushes", map[string]int{"a": 3}, 10, 250, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newFairQueue(tc.weights)
			// Both lines outlast the rounds counted.
			for i := range 41 * commitQuantum * tc.wantAPerB / tc.aSize {
				q.push(queued("a", i, tc.aSize))
			}
			for i := range 41 * commitQuantum / tc.bSize {
				q.push(queued("b", i, tc.bSize))
			}
			// Forty rounds: b is served 20,000 mutations, a its share,
			// within one round's credit.
			served := map[string]int{}
			for served["b"] < 40*commitQuantum {
				g := take(q, maxGroupPushes, maxGroupMutations)
				require.NotEmpty(t, g)
				for _, r := range g {
					served[r.batch.Tenant] += pushCost(r)
				}
			}
			oneRound := commitQuantum * (tc.wantAPerB + 1)
			require.InDelta(t, tc.wantAPerB*served["b"], served["a"], float64(oneRound), "served %v", served)
		})
	}
}

// A tenant that went idle keeps no credit: coming back, it gets one turn
// like the others, not the turns it missed.
func TestFairQueueIdleTenantKeepsNoCredit(t *testing.T) {
	q := newFairQueue(nil)
	q.push(queued("a", 0, 1))
	require.Len(t, take(q, maxGroupPushes, maxGroupMutations), 1)
	require.Empty(t, q.lines, "an empty line leaves the queue")
	for i := range 10 {
		q.push(queued("a", i, 500))
		q.push(queued("b", i, 500))
	}
	g := take(q, 2, maxGroupMutations)
	require.Equal(t, []string{"a", "b"}, []string{g[0].batch.Tenant, g[1].batch.Tenant}, "one push each per round")
}

// Under steady load a group goes on through rounds to its bounds (one
// tenant alone fills it; so do tenants taking turns from its start), but a
// tenant that queues while a group is applied joins it in its turn and the
// group ends right after that turn: its push is answered by the commit
// running when it queued, after at most one turn of each other tenant.
func TestFairQueueLateTenantJoinsTheRunningGroupAndEndsIt(t *testing.T) {
	q := newFairQueue(nil)
	for i := range 40 {
		q.push(queued("a", i, 100))
	}
	require.Len(t, take(q, maxGroupPushes, maxGroupMutations), maxGroupMutations/100, "alone: up to the group's bounds")

	q = newFairQueue(nil)
	for i := range 20 {
		q.push(queued("a", i, 100))
		q.push(queued("b", i, 100))
	}
	require.Len(t, take(q, maxGroupPushes, maxGroupMutations), maxGroupMutations/100, "taking turns from the start: up to the bounds")

	q = newFairQueue(nil)
	for i := range 40 {
		q.push(queued("a", i, 100))
	}
	g := newGroupTurns(maxGroupPushes, maxGroupMutations)
	for range 5 {
		require.Equal(t, "a", q.next(g).batch.Tenant)
	}
	q.push(queued("late", 0, 3))
	r := q.next(g)
	require.Equal(t, "late", r.batch.Tenant, "the late push is taken before a's next turn")
	require.Nil(t, q.next(g), "and the group ends after the late tenant's turn")
	require.Equal(t, groupEndedLate, g.ended)
	require.Len(t, take(q, maxGroupPushes, maxGroupMutations), maxGroupMutations/100, "a goes on in the next group")
}

// A tenant whose last queued push a group took waits for that group's
// commit: once its line empties the group takes no tenant's second turn
// and no turn that leaves work queued, so the push is committed after at
// most one turn of each other tenant, whether it was queued when the group
// began or while the group's first turn was applied (before any tenant's
// second turn, where the late rule does not apply), and after none of a
// heavy tenant whose turn comes after it. A round of many tenants with one
// push each still shares one group.
func TestFairQueueGroupEndsWhenATenantItServedDrains(t *testing.T) {
	tenants := func(g []*pushRequest) []string {
		var ts []string
		for _, r := range g {
			ts = append(ts, r.batch.Tenant)
		}
		return ts
	}
	flood := func() *fairQueue {
		q := newFairQueue(nil)
		for i := range 40 {
			q.push(queued("a", i, 100))
		}
		return q
	}

	q := flood()
	q.push(queued("light", 0, 1))
	group, ended := takeWhy(q, maxGroupPushes, maxGroupMutations)
	require.Equal(t, []string{"a", "light"}, tenants(group), "queued at the group's start: one turn of a, then the commit")
	require.Equal(t, groupEndedDrained, ended)
	group, ended = takeWhy(q, maxGroupPushes, maxGroupMutations)
	require.Len(t, group, maxGroupMutations/100, "a alone fills the next group")
	require.Equal(t, groupEndedBounds, ended)

	q = flood()
	g := newGroupTurns(maxGroupPushes, maxGroupMutations)
	require.Equal(t, "a", q.next(g).batch.Tenant)
	q.push(queued("light", 0, 1)) // while a's first push is applied
	require.Equal(t, "light", q.next(g).batch.Tenant, "taken before a's second turn")
	require.Nil(t, q.next(g), "and the group ends: light waits for no second turn of a")
	require.Equal(t, groupEndedDrained, g.ended)

	q = flood()
	q.push(queued("light", 0, 1))
	q.push(queued("light", 1, 150)) // more than one turn's credit: light does not drain in its first turn
	require.Equal(t, []string{"a", "light", "a", "light"}, tenants(take(q, maxGroupPushes, maxGroupMutations)), "light drains in its second turn and the group ends there")

	// Light tenants queued ahead of a's turn: their turns empty their
	// lines and the group ends before a's, which would leave a's work
	// queued; a's turn is the next group's, the order unchanged.
	q = newFairQueue(nil)
	q.push(queued("light", 0, 1))
	q.push(queued("light2", 0, commitQuantum))
	for i := range 40 {
		q.push(queued("a", i, 100))
	}
	group, ended = takeWhy(q, maxGroupPushes, maxGroupMutations)
	require.Equal(t, []string{"light", "light2"}, tenants(group), "light pushes wait for no turn of a")
	require.Equal(t, groupEndedDrained, ended)
	group, ended = takeWhy(q, maxGroupPushes, maxGroupMutations)
	require.Len(t, group, maxGroupMutations/100, "a alone fills the next group")
	require.Equal(t, "a", group[0].batch.Tenant)
	require.Equal(t, groupEndedBounds, ended)

	// A tenant whose turn would empty its line may still join: a's one
	// remaining push fits its turn.
	q = newFairQueue(nil)
	q.push(queued("light", 0, 1))
	q.push(queued("a", 0, 100))
	q.push(queued("b", 0, 100))
	q.push(queued("b", 1, 100))
	group, ended = takeWhy(q, maxGroupPushes, maxGroupMutations)
	require.Equal(t, []string{"light", "a"}, tenants(group), "a empties its line in its turn; b would not")
	require.Equal(t, groupEndedDrained, ended)
	require.Equal(t, []string{"b", "b"}, tenants(take(q, maxGroupPushes, maxGroupMutations)))

	q = newFairQueue(nil)
	var want []string
	for i := range maxGroupPushes - 1 {
		tenant := fmt.Sprintf("t%d", i)
		q.push(queued(tenant, 0, 1))
		want = append(want, tenant)
	}
	q.push(queued("t0", 1, commitQuantum)) // beyond t0's first turn's credit
	group, ended = takeWhy(q, maxGroupPushes, maxGroupMutations)
	require.Equal(t, want, tenants(group), "one push each: the round ends the group, not the first tenant that drains")
	require.Equal(t, groupEndedDrained, ended)
	group, ended = takeWhy(q, maxGroupPushes, maxGroupMutations)
	require.Equal(t, []string{"t0"}, tenants(group), "t0's second turn is the next group's")
	require.Equal(t, groupEndedEmpty, ended)
}

// A push larger than the quantum is taken once its tenant saved enough
// credit over its turns, while the other tenants' turns go on between.
func TestFairQueueLargePushWaitsForItsCredit(t *testing.T) {
	q := newFairQueue(nil)
	q.push(queued("big", 0, 500))
	for i := range 10 {
		q.push(queued("small", i, commitQuantum))
	}
	var order []string
	for _, g := range takeAll(q) {
		for _, r := range g {
			order = append(order, r.batch.Tenant)
		}
	}
	require.Equal(t, []string{"small", "small", "small", "small", "big", "small", "small", "small", "small", "small", "small"}, order)
}
