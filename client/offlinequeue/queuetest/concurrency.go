package queuetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

// enqueueConcurrently enqueues n items from workers goroutines; gen gives
// item i's payload and key. It returns the ID each item got and every error,
// indexed by item.
func enqueueConcurrently(t *testing.T, e *env, q offlinequeue.Queue, n, workers int, gen func(i int) ([]byte, string)) ([]offlinequeue.ID, []error) {
	t.Helper()
	got := make([]offlinequeue.ID, n)
	errs := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				payload, key := gen(i)
				got[i], errs[i] = q.Enqueue(e.ctx(), payload, key)
			}
		})
	}
	wg.Wait()
	return got, errs
}

// requireNoErrors fails the test on the first non-nil error.
func requireNoErrors(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		require.NoError(t, err, "call %d", i)
	}
}

var concurrencyTests = []subtest{
	{name: "Concurrency/EnqueueDistinctIDsAllPresent", run: func(t *testing.T, e *env) {
		const workers, perWorker = 16, 50
		q := e.openQueue(e.opts())
		got, errs := enqueueConcurrently(t, e, q, workers*perWorker, workers, func(i int) ([]byte, string) {
			return []byte(fmt.Sprintf("item-%d", i)), ""
		})
		requireNoErrors(t, errs)

		byID := map[offlinequeue.ID]int{}
		for i, id := range got {
			require.NotZero(t, id)
			prev, dup := byID[id]
			require.False(t, dup, "items %d and %d got the same ID %d", prev, i, id)
			byID[id] = i
		}
		check := func(q offlinequeue.Queue) {
			items := pending(t, e, q)
			require.Len(t, items, len(got))
			for _, it := range items {
				i, ok := byID[it.ID]
				require.True(t, ok, "Peek returned ID %d that no Enqueue returned", it.ID)
				require.Equal(t, fmt.Sprintf("item-%d", i), string(it.Payload), "ID %d holds another item's payload", it.ID)
			}
		}
		check(q)
		if e.durable {
			check(e.reopen(q, e.opts()))
		}
	}},
	{name: "Concurrency/RacingKeyedDuplicatesResolveToOneItem", run: func(t *testing.T, e *env) {
		const workers, keys, rounds = 16, 10, 4
		q := e.openQueue(e.opts())
		// Every worker enqueues every key several times, interleaved with
		// unkeyed items, so that the same key races within and across
		// batches of any implementation that groups enqueues.
		n := workers * keys * rounds
		got, errs := enqueueConcurrently(t, e, q, 2*n, workers, func(i int) ([]byte, string) {
			if i%2 == 1 {
				return []byte(fmt.Sprintf("unkeyed-%d", i)), ""
			}
			k := (i / 2) % keys
			return []byte(fmt.Sprintf("k%d-from-%d", k, i)), fmt.Sprintf("key-%d", k)
		})
		requireNoErrors(t, errs)

		idOfKey := map[string]offlinequeue.ID{}
		for i := 0; i < len(got); i += 2 {
			key := fmt.Sprintf("key-%d", (i/2)%keys)
			if want, ok := idOfKey[key]; ok {
				require.Equal(t, want, got[i], "two enqueues of %s got different IDs", key)
			}
			idOfKey[key] = got[i]
		}
		items := pending(t, e, q)
		require.Len(t, items, keys+n, "one item per key plus every unkeyed item")
		for _, it := range items {
			if it.Key != "" {
				require.Equal(t, idOfKey[it.Key], it.ID)
			}
		}
		if e.durable {
			require.Equal(t, ids(items), ids(pending(t, e, e.reopen(q, e.opts()))))
		}
	}},
	{name: "Concurrency/EnqueueRespectsMaxDepthExactly", run: func(t *testing.T, e *env) {
		const capacity, workers, attempts = 50, 16, 160
		q := e.openQueue(e.bounded(capacity))
		got, errs := enqueueConcurrently(t, e, q, attempts, workers, func(i int) ([]byte, string) {
			return []byte(fmt.Sprintf("item-%d", i)), ""
		})
		accepted := 0
		for i, err := range errs {
			if err == nil {
				accepted++
				continue
			}
			var full *offlinequeue.FullError
			require.ErrorAs(t, err, &full, "item %d", i)
			require.Equal(t, offlinequeue.FullError{Depth: capacity, Capacity: capacity}, *full)
			require.Zero(t, got[i])
		}
		require.Equal(t, capacity, accepted)
		requireLen(t, e, q, capacity)
		require.Equal(t, float64(attempts-capacity), metricValue(t, e.reg, overflowMetric))
	}},
	{name: "Concurrency/ProducersAndConsumer", run: func(t *testing.T, e *env) {
		const producers, perProducer = 4, 50
		total := producers * perProducer
		q := e.openQueue(e.opts())
		notify := make(chan struct{}, 1)
		producerErrs := make(chan error, total)
		var wg sync.WaitGroup
		for p := range producers {
			wg.Go(func() {
				for i := range perProducer {
					_, err := q.Enqueue(e.ctx(), []byte(fmt.Sprintf("p%d-%d", p, i)), fmt.Sprintf("p%d-%d", p, i))
					if err != nil {
						producerErrs <- err
						return
					}
					select {
					case notify <- struct{}{}:
					default:
					}
				}
			})
		}
		producersDone := make(chan struct{})
		go func() {
			wg.Wait()
			close(producersDone)
		}()

		// The consumer drains what it finds, as a sync worker does, and
		// waits for a producer's signal when it finds nothing.
		seen := map[string]bool{}
		drain := func() error {
			page, err := q.Peek(e.ctx(), 0, 16)
			if err != nil {
				return err
			}
			for _, it := range page {
				if seen[string(it.Payload)] {
					return fmt.Errorf("item %q delivered twice", it.Payload)
				}
				seen[string(it.Payload)] = true
				if err := q.MarkDone(e.ctx(), it.ID); err != nil {
					return err
				}
			}
			return nil
		}
		for finished := false; !finished; {
			select {
			case <-notify:
			case <-producersDone:
				finished = true
			}
			for range total + 1 {
				require.NoError(t, drain())
				if n, err := q.Len(e.ctx()); err != nil || n == 0 {
					require.NoError(t, err)
					break
				}
			}
		}
		close(producerErrs)
		for err := range producerErrs {
			require.NoError(t, err)
		}
		require.Len(t, seen, total, "every enqueued item was seen exactly once")
		requireLen(t, e, q, 0)
	}},
}
