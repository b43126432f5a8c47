package queuetest

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

// Sizes of the paging check on a deep queue. A durable queue pays a commit
// per group of enqueues, so it gets the smaller size to keep the suite fast;
// an implementation's own tests may check paging at the larger size by
// filling its storage directly.
const (
	largeQueueItems        = 100_000
	largeDurableQueueItems = 10_000
	largePage              = 1000
)

var peekTests = []subtest{
	{name: "Peek/OrderAndPaging", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		all := enqueueN(t, e, q, "item", 25)

		var got []offlinequeue.ID
		var sizes []int
		var after offlinequeue.ID
		for range 10 {
			page, err := q.Peek(e.ctx(), after, 10)
			require.NoError(t, err)
			sizes = append(sizes, len(page))
			if len(page) == 0 {
				break
			}
			got = append(got, ids(page)...)
			after = page[len(page)-1].ID
		}
		require.Equal(t, []int{10, 10, 5, 0}, sizes, "page sizes")
		require.Equal(t, all, got, "pages in enqueue order, nothing skipped or repeated")

		page, err := q.Peek(e.ctx(), all[11], 3)
		require.NoError(t, err)
		require.Equal(t, all[12:15], ids(page), "after names the last ID already seen")

		page, err = q.Peek(e.ctx(), 0, 1000)
		require.NoError(t, err)
		require.Equal(t, all, ids(page), "a limit beyond the queue returns everything")
		require.Equal(t, "item-0", string(page[0].Payload))
		require.Equal(t, "item-24", string(page[24].Payload))

		page, err = q.Peek(e.ctx(), all[24], 10)
		require.NoError(t, err)
		require.Empty(t, page, "nothing after the last ID")
		page, err = q.Peek(e.ctx(), all[24]+1000, 10)
		require.NoError(t, err)
		require.Empty(t, page, "nothing after an ID beyond the tail")
	}},
	{name: "Peek/NonPositiveLimitReturnsNothing", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		a := enqueue(t, e, q, "a", "")
		enqueue(t, e, q, "b", "")
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), a, "r"))
		for _, limit := range []int{0, -1, -1 << 31} {
			page, err := q.Peek(e.ctx(), 0, limit)
			require.NoError(t, err, "Peek limit %d", limit)
			require.Empty(t, page, "Peek limit %d", limit)
			dead, err := q.DeadLetters(e.ctx(), 0, limit)
			require.NoError(t, err, "DeadLetters limit %d", limit)
			require.Empty(t, dead, "DeadLetters limit %d", limit)
		}
	}},
	{name: "Peek/DoesNotRemove", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		want := enqueueN(t, e, q, "item", 3)
		for range 3 {
			require.Equal(t, want, ids(pending(t, e, q)))
		}
		requireLen(t, e, q, 3)
		if e.durable {
			require.Equal(t, want, ids(pending(t, e, e.reopen(q, e.opts()))))
		}
	}},
	{name: "Peek/SkipsRemovedItems", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		all := enqueueN(t, e, q, "item", 30)
		var want []offlinequeue.ID
		for i, id := range all {
			switch i % 5 {
			case 0:
				require.NoError(t, q.MarkDone(e.ctx(), id))
			case 3:
				require.NoError(t, q.MoveToDeadLetters(e.ctx(), id, "r"))
			default:
				want = append(want, id)
			}
		}
		require.Equal(t, want, ids(pending(t, e, q)))

		page, err := q.Peek(e.ctx(), all[4], 2)
		require.NoError(t, err)
		require.Equal(t, []offlinequeue.ID{all[6], all[7]}, ids(page), "after may name a removed item")
		if e.durable {
			require.Equal(t, want, ids(pending(t, e, e.reopen(q, e.opts()))))
		}
	}},
	{name: "Peek/LargeQueuePaging", run: func(t *testing.T, e *env) {
		n := largeQueueItems
		if e.durable {
			n = largeDurableQueueItems
		}
		q := e.openQueue(e.opts())
		_, errs := enqueueConcurrently(t, e, q, n, 64, func(i int) ([]byte, string) {
			return []byte(strconv.Itoa(i)), "k" + strconv.Itoa(i)
		})
		requireNoErrors(t, errs)
		// Page through, checking order and content without keeping the
		// items. The per-item checks avoid require's reflection: there are
		// many items.
		seen := make([]bool, n)
		var after offlinequeue.ID
		pages := 0
		for {
			page, err := q.Peek(e.ctx(), after, largePage)
			require.NoError(t, err)
			if len(page) == 0 {
				break
			}
			pages++
			require.LessOrEqual(t, pages, n/largePage, "more pages than items allow")
			for _, it := range page {
				i, err := strconv.Atoi(string(it.Payload))
				if it.ID <= after || err != nil || i < 0 || i >= n || seen[i] || it.Key != "k"+string(it.Payload) {
					require.Failf(t, "bad item in page", "page %d after ID %d: item %+v (seen before: %v)", pages, after, it, err == nil && i >= 0 && i < n && seen[i])
				}
				after = it.ID
				seen[i] = true
			}
		}
		require.Equal(t, n/largePage, pages)
		requireLen(t, e, q, n)
	}},
}
