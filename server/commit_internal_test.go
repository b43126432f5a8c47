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

// takeAll empties q in groups of the committer's bounds.
func takeAll(q *fairQueue) [][]*pushRequest {
	var groups [][]*pushRequest
	for g := q.take(maxGroupPushes, maxGroupMutations); len(g) > 0; g = q.take(maxGroupPushes, maxGroupMutations) {
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
		g := q.take(maxGroupPushes, maxGroupMutations)
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
				g := q.take(maxGroupPushes, maxGroupMutations)
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
	require.Len(t, q.take(maxGroupPushes, maxGroupMutations), 1)
	require.Empty(t, q.lines, "an empty line leaves the queue")
	for i := range 10 {
		q.push(queued("a", i, 500))
		q.push(queued("b", i, 500))
	}
	g := q.take(2, maxGroupMutations)
	require.Equal(t, []string{"a", "b"}, []string{g[0].batch.Tenant, g[1].batch.Tenant}, "one push each per round")
}

// While several tenants wait, a group holds one round at most, so a
// tenant's push waits for one round's commit besides its own; one tenant
// alone fills the group to its bounds.
func TestFairQueueGroupsHoldOneRoundUnderContention(t *testing.T) {
	q := newFairQueue(nil)
	for i := range 10 {
		q.push(queued("a", i, 100))
		q.push(queued("b", i, 100))
	}
	g := q.take(maxGroupPushes, maxGroupMutations)
	require.Len(t, g, 10, "a's turn (5 pushes of 100) and b's")
	q = newFairQueue(nil)
	for i := range 40 {
		q.push(queued("a", i, 100))
	}
	require.Len(t, q.take(maxGroupPushes, maxGroupMutations), maxGroupMutations/100, "alone: up to the group's bounds")
}
