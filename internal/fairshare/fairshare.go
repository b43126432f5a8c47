// Package fairshare hands out the queued work of several tenants in a
// weighted fair order, in groups. Work waits in one FIFO line per tenant;
// lines are taken in deficit round robin order; a group (one commit, one
// command) takes work until its bounds or one of the rules that keep a
// light tenant's work from waiting for rounds of the others ends it.
//
// syncd's commit paths use it: on one node, the group committer's input
// (a group is one transaction and one fsync); in a cluster, each node's
// command publisher (a group is one command of the stream). Its gates
// (snapshot reads, sessions' work turns) use it one item at a time (Take)
// with a quantum of one turn: weighted round robin.
package fairshare

import (
	"iter"
	"math"
)

// MutationQuantum is the quantum of syncd's commit paths, whose costs are
// mutations: one push of a typical size, not a full batch. A tenant that
// queues work waits for at most one such turn of each other tenant with
// work queued, and larger work is taken once its tenant has saved enough
// credit over its turns.
const MutationQuantum = 100

// End is why a group ended: the value of the "ended" label of syncd's
// syncd_commit_groups_total.
type End string

// Why a group ends.
const (
	EndEmpty   End = "empty"   // no work waited
	EndBounds  End = "bounds"  // the group's item or cost bound, or its fit
	EndLate    End = "late"    // a tenant that queued during the group had its turn
	EndDrained End = "drained" // a tenant it served had nothing more queued, and the next turn would leave work queued
)

// Ends lists every End, for metrics that show each from the start.
var Ends = []End{EndEmpty, EndBounds, EndLate, EndDrained}

// Queue is one FIFO line per tenant, taken in deficit round robin order.
// Each turn, a tenant gains the quantum times its weight in credit and has
// work taken from the head of its line while its cost fits its credit; an
// idle tenant keeps no credit. So when the taker is saturated each tenant
// with queued work gets cost in proportion to its weight, one that queues
// more than its share waits in its own line, and a tenant that queues work
// is served before any other tenant gets a second turn. One tenant's work
// is taken in the order queued.
//
// A Queue has no lock and no goroutine: its owner guards it.
type Queue[T any] struct {
	quantum int
	weights map[string]int
	cost    func(T) int
	lines   map[string]*line[T]
	// active holds the tenants with queued work in round order; active[0]
	// has the turn.
	active []*line[T]
	n      int // items queued
}

type line[T any] struct {
	tenant  string
	weight  int
	items   []T
	cost    int // the items' cost, summed
	deficit int
	inTurn  bool // its turn's credit was added
}

// drainsInTurn reports whether the turn l is about to begin takes all its
// line: its queued cost fits its credit plus the turn's quantum.
func (l *line[T]) drainsInTurn(quantum int) bool {
	return l.cost <= l.deficit+quantum*l.weight
}

// New returns an empty queue in which a tenant gains quantum times its
// weight in credit per turn. weights gives a tenant's weight (absent or
// below 1: 1); cost gives an item's cost, at least 1 (nil: every item
// costs 1, and a quantum of 1 makes the order weighted round robin: a
// tenant takes its weight of items a turn).
func New[T any](quantum int, weights map[string]int, cost func(T) int) *Queue[T] {
	c := func(T) int { return 1 }
	if cost != nil {
		c = func(v T) int { return max(1, cost(v)) }
	}
	return &Queue[T]{quantum: quantum, weights: weights, cost: c, lines: map[string]*line[T]{}}
}

// Cost is what v costs in the fair order: the cost function's, at least 1.
func (q *Queue[T]) Cost(v T) int { return q.cost(v) }

// Push queues v at the end of tenant's line.
func (q *Queue[T]) Push(tenant string, v T) {
	l := q.lines[tenant]
	if l == nil {
		l = &line[T]{tenant: tenant, weight: max(1, q.weights[tenant])}
		q.lines[tenant] = l
		q.active = append(q.active, l)
	}
	l.items = append(l.items, v)
	l.cost += q.cost(v)
	q.n++
}

// Len reports how many items are queued.
func (q *Queue[T]) Len() int { return q.n }

// Tenants reports how many tenants have work queued: a tenant's line
// leaves the queue once empty.
func (q *Queue[T]) Tenants() int { return len(q.active) }

// Remove takes out of tenant's line, in their order, the items match
// selects; the rest keep their places. A line left empty leaves the round
// and keeps no credit.
func (q *Queue[T]) Remove(tenant string, match func(T) bool) []T {
	l := q.lines[tenant]
	if l == nil {
		return nil
	}
	var out []T
	kept := l.items[:0]
	for _, v := range l.items {
		if match(v) {
			out = append(out, v)
			l.cost -= q.cost(v)
			q.n--
			continue
		}
		kept = append(kept, v)
	}
	clear(l.items[len(kept):])
	l.items = kept
	if len(l.items) == 0 {
		q.leave(l)
	}
	return out
}

// RemoveAll takes out of every line the items match selects, tenant by
// tenant in round order, each tenant's in their order.
func (q *Queue[T]) RemoveAll(match func(T) bool) []T {
	var out []T
	for _, l := range append([]*line[T](nil), q.active...) {
		out = append(out, q.Remove(l.tenant, match)...)
	}
	return out
}

// All yields every item queued, tenant by tenant in round order.
func (q *Queue[T]) All() iter.Seq[T] {
	return func(yield func(T) bool) {
		for _, l := range q.active {
			for _, v := range l.items {
				if !yield(v) {
					return
				}
			}
		}
	}
}

// Take removes and returns the next item in the fair order on its own,
// outside any group; false when none is queued.
func (q *Queue[T]) Take() (T, bool) {
	return q.Next(NewGroup[T](1, math.MaxInt, nil))
}

// leave takes the emptied line l out of the round.
func (q *Queue[T]) leave(l *line[T]) {
	for i, a := range q.active {
		if a == l {
			q.active = append(q.active[:i], q.active[i+1:]...)
			break
		}
	}
	delete(q.lines, l.tenant)
}

// Group is what one group took from a queue so far: its bounds, its items
// and cost, and the turns begun in it.
type Group[T any] struct {
	maxItems, maxCost int
	fits              func(T) bool
	items, cost       int
	turns             map[string]bool // tenants that began a turn in the group
	repeated          bool            // a tenant began a second turn in the group
	joined            bool            // a tenant began its first turn after one repeated
	drained           bool            // a tenant's line emptied in the group: no second turns
	ended             End             // why Next last returned false
}

// NewGroup starts a group of at most maxItems items and no more than
// maxCost in cost unless its first item alone costs more. fits, when not
// nil, is asked of each item before the group takes it (a byte bound of
// the group's own); an item that does not fit ends the group, unless it
// is the group's first.
func NewGroup[T any](maxItems, maxCost int, fits func(T) bool) *Group[T] {
	return &Group[T]{maxItems: maxItems, maxCost: maxCost, fits: fits}
}

// Ended is why Next last returned false.
func (g *Group[T]) Ended() End { return g.ended }

// Next removes and returns the group's next item in the fair order, or
// false when the group ends: its bounds are reached, no work waits, a
// tenant joined it late, or a tenant it served has nothing more queued.
// The group goes on through as many rounds as its bounds allow while the
// same tenants take turns with work left (one tenant alone fills it), so
// groups stay large under steady load. Two rules keep a light tenant's
// work from waiting for rounds of the others after it was taken:
//   - late: a tenant whose first turn in the group comes after another
//     tenant's second (it queued while the group was being taken) takes
//     that turn, and the group ends at the next turn;
//   - drained: once a tenant's line empties in the group (its last queued
//     item was taken: its device waits for this group), the group takes
//     only turns that empty their tenant's line too (no second turn, no
//     turn of a tenant with more queued than the turn's credit) and ends
//     at the first other: many tenants with one item each still share one
//     group, and light work taken before a heavy tenant's turn does not
//     wait for that turn.
//
// Either way the light tenant's work is answered by the group that took
// it, after at most one turn of each other tenant in that group, and none
// of a tenant that keeps work queued once it was taken. Where a group ends
// never changes the fair order itself, only which group holds an item. A
// tenant whose turn the bounds cut keeps it for the next group.
func (q *Queue[T]) Next(g *Group[T]) (T, bool) {
	var none T
	for g.items < g.maxItems && len(q.active) > 0 {
		l := q.active[0]
		if !l.inTurn {
			if g.joined {
				g.ended = EndLate // the late tenant had its turn
				return none, false
			}
			if g.drained && (g.turns[l.tenant] || !l.drainsInTurn(q.quantum)) {
				// A served tenant waits for this group: it takes no
				// second turn, and no turn that leaves work queued.
				g.ended = EndDrained
				return none, false
			}
			switch {
			case !g.turns[l.tenant] && g.repeated:
				g.joined = true
			case g.turns[l.tenant]:
				g.repeated = true
			}
			if g.turns == nil {
				g.turns = map[string]bool{}
			}
			g.turns[l.tenant] = true
			l.deficit += q.quantum * l.weight
			l.inTurn = true
		}
		head := l.items[0]
		cost := q.cost(head)
		if cost > l.deficit {
			// Its turn is over: to the back of the round, its credit kept.
			l.inTurn = false
			q.active = append(q.active[1:], l)
			continue
		}
		if g.items > 0 && (g.cost+cost > g.maxCost || g.fits != nil && !g.fits(head)) {
			g.ended = EndBounds
			return none, false
		}
		var zero T
		l.items[0] = zero
		l.items = l.items[1:]
		l.deficit -= cost
		l.cost -= cost
		q.n--
		g.items++
		g.cost += cost
		if len(l.items) == 0 {
			// Idle: it leaves the round and keeps no credit.
			q.active = q.active[1:]
			delete(q.lines, l.tenant)
			g.drained = true
		}
		return head, true
	}
	g.ended = EndEmpty
	if g.items >= g.maxItems {
		g.ended = EndBounds
	}
	return none, false
}
