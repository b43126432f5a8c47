package fairshare

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The bounds of syncd's single-node commit groups: 64 pushes, 2,000
// mutations.
const (
	maxGroupPushes    = 64
	maxGroupMutations = 2000
)

// item is one push for the tests: its tenant, its place in its tenant's
// line and its mutations.
type item struct {
	tenant string
	i      int
	cost   int
}

func newQueue(weights map[string]int) *Queue[*item] {
	return New(MutationQuantum, weights, func(it *item) int { return it.cost })
}

// queued is the push of tenant's i-th place, of mutations.
func queued(tenant string, i, mutations int) *item {
	return &item{tenant: tenant, i: i, cost: mutations}
}

func push(q *Queue[*item], it *item) { q.Push(it.tenant, it) }

// next is Next, nil when the group ends.
func next(q *Queue[*item], g *Group[*item]) *item {
	it, ok := q.Next(g)
	if !ok {
		return nil
	}
	return it
}

func newGroup(maxPushes, maxMutations int) *Group[*item] {
	return NewGroup[*item](maxPushes, maxMutations, nil)
}

// take takes one group from q as the committer does, when nothing is
// queued while the group is taken.
func take(q *Queue[*item], maxPushes, maxMutations int) []*item {
	group, _ := takeWhy(q, maxPushes, maxMutations)
	return group
}

// takeWhy is take, with why the group ended.
func takeWhy(q *Queue[*item], maxPushes, maxMutations int) ([]*item, End) {
	var group []*item
	g := newGroup(maxPushes, maxMutations)
	for r := next(q, g); r != nil; r = next(q, g) {
		group = append(group, r)
	}
	return group, g.Ended()
}

// takeAll empties q in groups of the committer's bounds.
func takeAll(q *Queue[*item]) [][]*item {
	var groups [][]*item
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
	q := newQueue(nil)
	for i := range 200 {
		push(q, queued("flood", i, 500))
		push(q, queued("small", i, 7))
	}
	// The committer is busy: some groups were taken before the newcomer.
	served := map[string]int{}
	inOrder := func(r *item) {
		tenant := r.tenant
		require.Equal(t, served[tenant], r.i, "%s's pushes in the order queued", tenant)
		served[tenant]++
	}
	for range 3 {
		g := take(q, maxGroupPushes, maxGroupMutations)
		require.NotEmpty(t, g)
		for _, r := range g {
			inOrder(r)
		}
	}
	push(q, queued("newcomer", 0, 1))

	var before []string // runs of tenants served after the newcomer queued, until it was served
	found := false
	for _, g := range takeAll(q) {
		for _, r := range g {
			tenant := r.tenant
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
			q := newQueue(tc.weights)
			// Both lines outlast the rounds counted.
			for i := range 41 * MutationQuantum * tc.wantAPerB / tc.aSize {
				push(q, queued("a", i, tc.aSize))
			}
			for i := range 41 * MutationQuantum / tc.bSize {
				push(q, queued("b", i, tc.bSize))
			}
			// Forty rounds: b is served 20,000 mutations, a its share,
			// within one round's credit.
			served := map[string]int{}
			for served["b"] < 40*MutationQuantum {
				g := take(q, maxGroupPushes, maxGroupMutations)
				require.NotEmpty(t, g)
				for _, r := range g {
					served[r.tenant] += q.Cost(r)
				}
			}
			oneRound := MutationQuantum * (tc.wantAPerB + 1)
			require.InDelta(t, tc.wantAPerB*served["b"], served["a"], float64(oneRound), "served %v", served)
		})
	}
}

// A tenant that went idle keeps no credit: coming back, it gets one turn
// like the others, not the turns it missed.
func TestFairQueueIdleTenantKeepsNoCredit(t *testing.T) {
	q := newQueue(nil)
	push(q, queued("a", 0, 1))
	require.Len(t, take(q, maxGroupPushes, maxGroupMutations), 1)
	require.Empty(t, q.lines, "an empty line leaves the queue")
	for i := range 10 {
		push(q, queued("a", i, 500))
		push(q, queued("b", i, 500))
	}
	g := take(q, 2, maxGroupMutations)
	require.Equal(t, []string{"a", "b"}, []string{g[0].tenant, g[1].tenant}, "one push each per round")
}

// Under steady load a group goes on through rounds to its bounds (one
// tenant alone fills it; so do tenants taking turns from its start), but a
// tenant that queues while a group is applied joins it in its turn and the
// group ends right after that turn: its push is answered by the commit
// running when it queued, after at most one turn of each other tenant.
func TestFairQueueLateTenantJoinsTheRunningGroupAndEndsIt(t *testing.T) {
	q := newQueue(nil)
	for i := range 40 {
		push(q, queued("a", i, 100))
	}
	require.Len(t, take(q, maxGroupPushes, maxGroupMutations), maxGroupMutations/100, "alone: up to the group's bounds")

	q = newQueue(nil)
	for i := range 20 {
		push(q, queued("a", i, 100))
		push(q, queued("b", i, 100))
	}
	require.Len(t, take(q, maxGroupPushes, maxGroupMutations), maxGroupMutations/100, "taking turns from the start: up to the bounds")

	q = newQueue(nil)
	for i := range 40 {
		push(q, queued("a", i, 100))
	}
	g := newGroup(maxGroupPushes, maxGroupMutations)
	for range 5 {
		require.Equal(t, "a", next(q, g).tenant)
	}
	push(q, queued("late", 0, 3))
	r := next(q, g)
	require.Equal(t, "late", r.tenant, "the late push is taken before a's next turn")
	require.Nil(t, next(q, g), "and the group ends after the late tenant's turn")
	require.Equal(t, EndLate, g.Ended())
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
	tenants := func(g []*item) []string {
		var ts []string
		for _, r := range g {
			ts = append(ts, r.tenant)
		}
		return ts
	}
	flood := func() *Queue[*item] {
		q := newQueue(nil)
		for i := range 40 {
			push(q, queued("a", i, 100))
		}
		return q
	}

	q := flood()
	push(q, queued("light", 0, 1))
	group, ended := takeWhy(q, maxGroupPushes, maxGroupMutations)
	require.Equal(t, []string{"a", "light"}, tenants(group), "queued at the group's start: one turn of a, then the commit")
	require.Equal(t, EndDrained, ended)
	group, ended = takeWhy(q, maxGroupPushes, maxGroupMutations)
	require.Len(t, group, maxGroupMutations/100, "a alone fills the next group")
	require.Equal(t, EndBounds, ended)

	q = flood()
	g := newGroup(maxGroupPushes, maxGroupMutations)
	require.Equal(t, "a", next(q, g).tenant)
	push(q, queued("light", 0, 1)) // while a's first push is applied
	require.Equal(t, "light", next(q, g).tenant, "taken before a's second turn")
	require.Nil(t, next(q, g), "and the group ends: light waits for no second turn of a")
	require.Equal(t, EndDrained, g.Ended())

	q = flood()
	push(q, queued("light", 0, 1))
	push(q, queued("light", 1, 150)) // more than one turn's credit: light does not drain in its first turn
	require.Equal(t, []string{"a", "light", "a", "light"}, tenants(take(q, maxGroupPushes, maxGroupMutations)), "light drains in its second turn and the group ends there")

	// Light tenants queued ahead of a's turn: their turns empty their
	// lines and the group ends before a's, which would leave a's work
	// queued; a's turn is the next group's, the order unchanged.
	q = newQueue(nil)
	push(q, queued("light", 0, 1))
	push(q, queued("light2", 0, MutationQuantum))
	for i := range 40 {
		push(q, queued("a", i, 100))
	}
	group, ended = takeWhy(q, maxGroupPushes, maxGroupMutations)
	require.Equal(t, []string{"light", "light2"}, tenants(group), "light pushes wait for no turn of a")
	require.Equal(t, EndDrained, ended)
	group, ended = takeWhy(q, maxGroupPushes, maxGroupMutations)
	require.Len(t, group, maxGroupMutations/100, "a alone fills the next group")
	require.Equal(t, "a", group[0].tenant)
	require.Equal(t, EndBounds, ended)

	// A tenant whose turn would empty its line may still join: a's one
	// remaining push fits its turn.
	q = newQueue(nil)
	push(q, queued("light", 0, 1))
	push(q, queued("a", 0, 100))
	push(q, queued("b", 0, 100))
	push(q, queued("b", 1, 100))
	group, ended = takeWhy(q, maxGroupPushes, maxGroupMutations)
	require.Equal(t, []string{"light", "a"}, tenants(group), "a empties its line in its turn; b would not")
	require.Equal(t, EndDrained, ended)
	require.Equal(t, []string{"b", "b"}, tenants(take(q, maxGroupPushes, maxGroupMutations)))

	q = newQueue(nil)
	var want []string
	for i := range maxGroupPushes - 1 {
		tenant := fmt.Sprintf("t%d", i)
		push(q, queued(tenant, 0, 1))
		want = append(want, tenant)
	}
	push(q, queued("t0", 1, MutationQuantum)) // beyond t0's first turn's credit
	group, ended = takeWhy(q, maxGroupPushes, maxGroupMutations)
	require.Equal(t, want, tenants(group), "one push each: the round ends the group, not the first tenant that drains")
	require.Equal(t, EndDrained, ended)
	group, ended = takeWhy(q, maxGroupPushes, maxGroupMutations)
	require.Equal(t, []string{"t0"}, tenants(group), "t0's second turn is the next group's")
	require.Equal(t, EndEmpty, ended)
}

// A push larger than the quantum is taken once its tenant saved enough
// credit over its turns, while the other tenants' turns go on between.
func TestFairQueueLargePushWaitsForItsCredit(t *testing.T) {
	q := newQueue(nil)
	push(q, queued("big", 0, 500))
	for i := range 10 {
		push(q, queued("small", i, MutationQuantum))
	}
	var order []string
	for _, g := range takeAll(q) {
		for _, r := range g {
			order = append(order, r.tenant)
		}
	}
	require.Equal(t, []string{"small", "small", "small", "small", "big", "small", "small", "small", "small", "small", "small"}, order)
}

// Remove takes a tenant's selected items out of its line in their order;
// the rest keep their places, and a line left empty leaves the round with
// no credit.
func TestRemoveKeepsTheRestOfTheLineInOrder(t *testing.T) {
	q := newQueue(nil)
	for i := range 6 {
		push(q, queued("a", i, 10))
	}
	push(q, queued("b", 0, 10))
	out := q.Remove("a", func(it *item) bool { return it.i%2 == 1 })
	require.Equal(t, []int{1, 3, 5}, places(out))
	require.Equal(t, 4, q.Len())
	require.Nil(t, q.Remove("nobody", func(*item) bool { return true }))

	var order []string
	for _, g := range takeAll(q) {
		for _, it := range g {
			order = append(order, fmt.Sprintf("%s%d", it.tenant, it.i))
		}
	}
	require.Equal(t, []string{"a0", "a2", "a4", "b0"}, order)

	push(q, queued("a", 0, 10))
	push(q, queued("b", 0, 10))
	require.Len(t, q.Remove("a", func(*item) bool { return true }), 1)
	require.NotContains(t, q.lines, "a", "an emptied line leaves the queue")
	require.Equal(t, []string{"b"}, []string{take(q, maxGroupPushes, maxGroupMutations)[0].tenant})
	require.Zero(t, q.Len())
}

func places(its []*item) []int {
	var out []int
	for _, it := range its {
		out = append(out, it.i)
	}
	return out
}

// A group's fit (a command's byte bound) ends it at the first item that
// does not fit, unless that item is the group's first; the item waits for
// the next group, first in it.
func TestGroupEndsAtTheFirstItemThatDoesNotFit(t *testing.T) {
	q := newQueue(nil)
	for i, size := range []int{60, 30, 20, 90} {
		push(q, queued("a", i, size))
	}
	used := 0
	fits := func(it *item) bool { return used+it.cost <= 100 }
	var groups [][]int
	for q.Len() > 0 {
		used = 0
		g := NewGroup[*item](maxGroupPushes, 1<<30, fits)
		var group []int
		for it, ok := q.Next(g); ok; it, ok = q.Next(g) {
			group = append(group, it.i)
			used += it.cost
		}
		groups = append(groups, group)
	}
	require.Equal(t, [][]int{{0, 1}, {2}, {3}}, groups)
}

// Slots admit at most n items of a tenant at once; the next Acquire of
// that tenant waits until one is released, while other tenants' go on,
// and gives up when its context ends or stop closes.
func TestSlotsBoundEachTenantAlone(t *testing.T) {
	s := NewSlots(2)
	stop := make(chan struct{})
	ctx := t.Context()
	require.NoError(t, s.Acquire(ctx, "a", stop))
	require.NoError(t, s.Acquire(ctx, "a", stop))
	require.NoError(t, s.Acquire(ctx, "b", stop), "another tenant is not held up")

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, s.Acquire(short, "a", stop), context.DeadlineExceeded, "a's third waits")

	got := make(chan error, 1)
	go func() { got <- s.Acquire(ctx, "a", stop) }()
	s.Release("a")
	require.NoError(t, <-got, "a released slot admits the waiting one")

	go func() { got <- s.Acquire(ctx, "a", stop) }()
	close(stop)
	require.ErrorIs(t, <-got, ErrStopped)

	s.Release("a")
	s.Release("a")
	s.Release("b")
	require.Empty(t, s.tenants, "tenants with nothing in flight leave the map")
}

// With unit costs and a quantum of one, Take hands out items in weighted
// round robin: a tenant takes its weight of items a turn. RemoveAll takes
// items out of every line, and All yields what is left, in round order.
func TestTakeIsWeightedRoundRobinWithAQuantumOfOne(t *testing.T) {
	q := New[*item](1, map[string]int{"a": 2}, nil)
	for i := range 4 {
		push(q, queued("a", i, 0))
		push(q, queued("b", i, 0))
	}
	push(q, queued("c", 0, 0))
	gone := q.RemoveAll(func(it *item) bool { return it.i == 3 })
	require.Equal(t, []string{"a", "b"}, []string{gone[0].tenant, gone[1].tenant}, "tenant by tenant in round order")
	var left []string
	for it := range q.All() {
		left = append(left, fmt.Sprintf("%s%d", it.tenant, it.i))
	}
	require.Equal(t, []string{"a0", "a1", "a2", "b0", "b1", "b2", "c0"}, left)
	var order []string
	for it, ok := q.Take(); ok; it, ok = q.Take() {
		order = append(order, fmt.Sprintf("%s%d", it.tenant, it.i))
	}
	require.Equal(t, []string{"a0", "a1", "b0", "c0", "a2", "b1", "b2"}, order)
	require.Zero(t, q.Tenants())
}
