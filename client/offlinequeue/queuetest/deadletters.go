package queuetest

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

var deadLetterTests = []subtest{
	{name: "DeadLetters/MoveKeepsItemAndReason", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		enqueuedAt := e.clock.Now()
		keep := enqueue(t, e, q, "keep", "")
		id := enqueue(t, e, q, "poison", "op-1")
		require.NoError(t, q.SetAttempts(e.ctx(), id, 5))
		e.clock.Advance(3 * time.Hour)
		deadAt := e.clock.Now()
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), id, "rejected: schema mismatch"))

		s := takeSnapshot(t, e, q)
		require.Equal(t, []offlinequeue.ID{keep}, ids(s.Pending))
		want := []offlinequeue.DeadLetter{{
			Item:   offlinequeue.Item{ID: id, Payload: []byte("poison"), Key: "op-1", Attempts: 5, EnqueuedAt: enqueuedAt.UTC()},
			Reason: "rejected: schema mismatch",
			DeadAt: deadAt.UTC(),
		}}
		require.Equal(t, want, s.Dead)
		require.Equal(t, offlinequeue.Stats{Pending: 1, DeadLetters: 1, MaxDepth: offlinequeue.DefaultMaxDepth}, s.Stats)
		if e.durable {
			q = e.reopen(q, e.opts())
			require.Equal(t, s, takeSnapshot(t, e, q), "after reopen")
		}
	}},
	{name: "DeadLetters/CapEvictsTheLongestDead", run: func(t *testing.T, e *env) {
		opts := e.opts()
		opts.MaxDeadLetters = 3
		q := e.openQueue(opts)
		// Items dead-lettered out of ID order: the oldest dead, not the
		// lowest ID, is evicted first, so a write that has just been
		// dead-lettered is never the one that goes.
		var items []offlinequeue.ID
		for i := range 5 {
			items = append(items, enqueue(t, e, q, fmt.Sprintf("item-%d", i), fmt.Sprintf("key-%d", i)))
		}
		for _, i := range []int{3, 1, 4, 0, 2} {
			e.clock.Advance(time.Minute)
			require.NoError(t, q.MoveToDeadLetters(e.ctx(), items[i], "refused"))
		}
		s := takeSnapshot(t, e, q)
		require.Empty(t, s.Pending)
		require.Equal(t, []offlinequeue.ID{items[0], items[2], items[4]}, deadIDs(s.Dead), "the two dead longest (3, then 1) were evicted")
		require.Equal(t, 3, s.Stats.DeadLetters)
		require.Equal(t, float64(2), metricValue(t, e.reg, evictedMetric))
		requireGauges(t, e, 0, 3)
		if e.durable {
			q = e.reopen(q, opts)
			require.Equal(t, s, takeSnapshot(t, e, q), "after reopen")
		}

		// A clock set back: the letter just moved is the "oldest", yet it
		// stays; the longest dead of the others goes.
		late := enqueue(t, e, q, "late", "key-late")
		e.clock.Advance(-24 * time.Hour)
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), late, "refused"))
		require.Equal(t, []offlinequeue.ID{items[0], items[2], late}, deadIDs(takeSnapshot(t, e, q).Dead), "item 4 (dead longest of the others) was evicted")
	}},
	{name: "DeadLetters/MoveUnknownIsNotFound", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		done := enqueue(t, e, q, "done", "")
		dead := enqueue(t, e, q, "dead", "")
		enqueue(t, e, q, "pending", "")
		require.NoError(t, q.MarkDone(e.ctx(), done))
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), dead, "first"))
		before := takeSnapshot(t, e, q)

		for name, id := range map[string]offlinequeue.ID{"never enqueued": dead + 100, "zero": 0, "done": done, "already dead": dead} {
			require.ErrorIs(t, q.MoveToDeadLetters(e.ctx(), id, "again"), offlinequeue.ErrNotFound, name)
		}
		require.Equal(t, before, takeSnapshot(t, e, q))
		require.Equal(t, "first", before.Dead[0].Reason)
	}},
	{name: "DeadLetters/LongReasonTruncated", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		exact := strings.Repeat("r", offlinequeue.MaxReasonBytes)
		cases := []struct{ reason, want string }{
			{exact, exact},
			{exact + "!", exact},
			{strings.Repeat("r", offlinequeue.MaxReasonBytes-1) + "é", strings.Repeat("r", offlinequeue.MaxReasonBytes-1)},
			{strings.Repeat("é", offlinequeue.MaxReasonBytes), strings.Repeat("é", offlinequeue.MaxReasonBytes/2)},
			{strings.Repeat("€", offlinequeue.MaxReasonBytes), strings.Repeat("€", offlinequeue.MaxReasonBytes/3)},
		}
		for _, c := range cases {
			require.NoError(t, q.MoveToDeadLetters(e.ctx(), enqueue(t, e, q, "p", ""), c.reason))
		}
		check := func(dead []offlinequeue.DeadLetter) {
			require.Len(t, dead, len(cases))
			for i, d := range dead {
				require.LessOrEqual(t, len(d.Reason), offlinequeue.MaxReasonBytes)
				require.True(t, utf8.ValidString(d.Reason), "truncation split a rune")
				require.Equal(t, cases[i].want, d.Reason, "case %d", i)
			}
		}
		check(deadLetters(t, e, q))
		if e.durable {
			check(deadLetters(t, e, e.reopen(q, e.opts())))
		}
	}},
	{name: "DeadLetters/ListedInIDOrderAndPaged", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		all := enqueueN(t, e, q, "item", 20)
		for i := len(all) - 1; i >= 0; i-- {
			if i%4 != 1 {
				require.NoError(t, q.MoveToDeadLetters(e.ctx(), all[i], "r"))
			}
		}
		var want []offlinequeue.ID
		for i, id := range all {
			if i%4 != 1 {
				want = append(want, id)
			}
		}
		require.Equal(t, want, deadIDs(deadLetters(t, e, q)), "dead letters in ID order, not in the order they died")

		page, err := q.DeadLetters(e.ctx(), all[1], 3)
		require.NoError(t, err)
		require.Equal(t, []offlinequeue.ID{all[2], all[3], all[4]}, deadIDs(page), "after may name a pending item")
		page, err = q.DeadLetters(e.ctx(), all[19], 3)
		require.NoError(t, err)
		require.Empty(t, page)
	}},
	{name: "Requeue/MovesToTailWithNewIDAndAttemptsReset", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		a := enqueue(t, e, q, "a", "op-a")
		b := enqueue(t, e, q, "b", "")
		c := enqueue(t, e, q, "c", "")
		require.NoError(t, q.SetAttempts(e.ctx(), a, 5))
		require.NoError(t, q.SetAttempts(e.ctx(), b, 2))
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), a, "r"))
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), b, "r"))
		d := enqueue(t, e, q, "d", "")

		require.NoError(t, q.Requeue(e.ctx(), b, a))
		s := takeSnapshot(t, e, q)
		require.Empty(t, s.Dead)
		require.Len(t, s.Pending, 4)
		require.Equal(t, []offlinequeue.ID{c, d}, ids(s.Pending[:2]))
		requeued := s.Pending[2:]
		require.ElementsMatch(t, []string{"a", "b"}, payloads(requeued))
		for _, it := range requeued {
			require.Greater(t, it.ID, d, "a requeued item gets a new ID at the tail")
			require.Zero(t, it.Attempts, "Requeue resets attempts")
			if string(it.Payload) == "a" {
				require.Equal(t, "op-a", it.Key)
				again, err := q.Enqueue(e.ctx(), []byte("a again"), "op-a")
				require.NoError(t, err)
				require.Equal(t, it.ID, again, "the requeued item holds its key again")
			}
		}
		if e.durable {
			require.Equal(t, s, takeSnapshot(t, e, e.reopen(q, e.opts())), "after reopen")
		}
	}},
	{name: "Requeue/DroppedWhenKeyPendingAgain", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		old := enqueue(t, e, q, "old", "op-1")
		other := enqueue(t, e, q, "other", "op-2")
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), old, "r"))
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), other, "r"))
		current := enqueue(t, e, q, "current", "op-1")

		require.NoError(t, q.Requeue(e.ctx(), old, other))
		s := takeSnapshot(t, e, q)
		require.Empty(t, s.Dead, "the dead letter whose key is pending is dropped, not kept")
		require.Equal(t, []string{"current", "other"}, payloads(s.Pending))
		require.Equal(t, current, s.Pending[0].ID)
		if e.durable {
			require.Equal(t, s, takeSnapshot(t, e, e.reopen(q, e.opts())), "after reopen")
		}
	}},
	{name: "Requeue/SameKeyTwiceInOneCall", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		first := enqueue(t, e, q, "first", "op-1")
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), first, "r"))
		second := enqueue(t, e, q, "second", "op-1")
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), second, "r"))

		require.NoError(t, q.Requeue(e.ctx(), first, second))
		s := takeSnapshot(t, e, q)
		require.Empty(t, s.Dead)
		require.Len(t, s.Pending, 1, "one key, one pending item")
		require.Equal(t, "op-1", s.Pending[0].Key)
	}},
	{name: "Requeue/UnknownIgnored", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		p := enqueue(t, e, q, "pending", "")
		d := enqueue(t, e, q, "dead", "")
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), d, "r"))

		require.NoError(t, q.Requeue(e.ctx()), "Requeue with no IDs")
		require.NoError(t, q.Requeue(e.ctx(), p, d+100, 0), "a pending ID and unknown IDs")
		s := takeSnapshot(t, e, q)
		require.Equal(t, []offlinequeue.ID{p}, ids(s.Pending), "Requeue of a pending ID must not duplicate it")
		require.Equal(t, []offlinequeue.ID{d}, deadIDs(s.Dead))

		require.NoError(t, q.Requeue(e.ctx(), d, d, d+100))
		s = takeSnapshot(t, e, q)
		require.Equal(t, []string{"pending", "dead"}, payloads(s.Pending), "an ID repeated in one call is requeued once")
		require.Empty(t, s.Dead)
		require.NoError(t, q.Requeue(e.ctx(), d), "Requeue of an already requeued ID")
		require.Len(t, pending(t, e, q), 2)
	}},
	{name: "Requeue/NotBoundedByMaxDepth", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.bounded(2))
		a := enqueue(t, e, q, "a", "")
		b := enqueue(t, e, q, "b", "")
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), a, "r"))
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), b, "r"))
		enqueueN(t, e, q, "fill", 2)

		require.NoError(t, q.Requeue(e.ctx(), a, b), "an operator's requeue is not refused by MaxDepth")
		requireLen(t, e, q, 4)
		_, err := q.Enqueue(e.ctx(), []byte("c"), "")
		var full *offlinequeue.FullError
		require.ErrorAs(t, err, &full)
		require.Equal(t, offlinequeue.FullError{Depth: 4, Capacity: 2}, *full)
	}},
	{name: "Purge/DeletesForGood", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		all := enqueueN(t, e, q, "item", 4)
		for _, id := range all[:3] {
			require.NoError(t, q.MoveToDeadLetters(e.ctx(), id, "r"))
		}
		require.NoError(t, q.Purge(e.ctx()), "Purge with no IDs")
		require.NoError(t, q.Purge(e.ctx(), all[0], all[2], all[3], all[3]+100, all[0]))
		s := takeSnapshot(t, e, q)
		require.Equal(t, []offlinequeue.ID{all[1]}, deadIDs(s.Dead))
		require.Equal(t, []offlinequeue.ID{all[3]}, ids(s.Pending), "Purge of a pending ID leaves it alone")
		require.NoError(t, q.Requeue(e.ctx(), all[0]), "a purged dead letter cannot be requeued")
		require.Equal(t, []offlinequeue.ID{all[3]}, ids(pending(t, e, q)))
		if e.durable {
			require.Equal(t, s, takeSnapshot(t, e, e.reopen(q, e.opts())), "after reopen")
		}
	}},
}
