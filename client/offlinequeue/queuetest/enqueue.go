package queuetest

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

var enqueueTests = []subtest{
	{name: "Enqueue/WithAndWithoutKey", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		at := e.clock.Now()
		a := enqueue(t, e, q, "unkeyed", "")
		b := enqueue(t, e, q, "keyed", "op-1")
		require.Greater(t, b, a)

		got := takeSnapshot(t, e, q)
		want := []offlinequeue.Item{
			{ID: a, Payload: []byte("unkeyed"), Key: "", EnqueuedAt: at.UTC()},
			{ID: b, Payload: []byte("keyed"), Key: "op-1", EnqueuedAt: at.UTC()},
		}
		require.Equal(t, want, got.Pending)
		require.Equal(t, offlinequeue.Stats{Pending: 2, MaxDepth: offlinequeue.DefaultMaxDepth}, got.Stats)
	}},
	{name: "Enqueue/EnqueuedAtUsesOptionsNow", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		first := e.clock.Now()
		a := enqueue(t, e, q, "a", "")
		e.clock.Advance(90*time.Minute + time.Nanosecond)
		second := e.clock.Now()
		b := enqueue(t, e, q, "b", "k")

		items := pending(t, e, q)
		require.Equal(t, []offlinequeue.ID{a, b}, ids(items))
		require.True(t, first.Equal(items[0].EnqueuedAt), "EnqueuedAt %v, want %v", items[0].EnqueuedAt, first)
		require.True(t, second.Equal(items[1].EnqueuedAt), "EnqueuedAt %v, want %v", items[1].EnqueuedAt, second)
		if e.durable {
			items = pending(t, e, e.reopen(q, e.opts()))
			require.True(t, first.Equal(items[0].EnqueuedAt), "after reopen: EnqueuedAt %v, want %v", items[0].EnqueuedAt, first)
			require.True(t, second.Equal(items[1].EnqueuedAt), "after reopen: EnqueuedAt %v, want %v", items[1].EnqueuedAt, second)
		}
	}},
	{name: "Enqueue/CopiesPayload", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		buf := []byte("original")
		id, err := q.Enqueue(e.ctx(), buf, "")
		require.NoError(t, err)
		copy(buf, "mutated!") // the caller reuses its buffer

		page, err := q.Peek(e.ctx(), 0, 1)
		require.NoError(t, err)
		require.Len(t, page, 1)
		require.Equal(t, id, page[0].ID)
		require.Equal(t, "original", string(page[0].Payload), "queue kept a reference to the caller's buffer")

		copy(page[0].Payload, "YYYYYYYY")
		again, err := q.Peek(e.ctx(), 0, 1)
		require.NoError(t, err)
		require.Equal(t, "original", string(again[0].Payload), "Peek handed out the queue's own buffer")
	}},
	{name: "Enqueue/BinaryPayloadAndKeyRoundTrip", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		cases := []struct{ payload, key string }{
			{"\x00", ""},
			{"a\x00b\x00", "k\x00"},
			{"\xff\xfe\x00\xc3\x28", "\xff"},
			{"\xe2\x82", "\xfe"},
			{"tail\n{\"op\":\"put\"}\r\n\\", "\x00k\x00ey\n\"\\"},
			{string(bytes.Repeat([]byte{0}, 300)), "\xc3\x28\x00" + strings.Repeat("\x80", 200)},
		}
		want := make([]offlinequeue.Item, len(cases))
		for i, c := range cases {
			want[i] = offlinequeue.Item{ID: enqueue(t, e, q, c.payload, c.key), Payload: []byte(c.payload), Key: c.key, EnqueuedAt: e.clock.Now().UTC()}
		}
		require.Equal(t, want, takeSnapshot(t, e, q).Pending)
		if !e.durable {
			return
		}
		q = e.reopen(q, e.opts())
		require.Equal(t, want, takeSnapshot(t, e, q).Pending, "after reopen")

		// The same bytes survive the trip through the dead-letter store.
		for _, it := range want {
			require.NoError(t, q.MoveToDeadLetters(e.ctx(), it.ID, "binary"))
		}
		q = e.reopen(q, e.opts())
		dead := takeSnapshot(t, e, q).Dead
		require.Len(t, dead, len(want))
		for i, d := range dead {
			require.Equal(t, want[i], d.Item, "dead letter %d", i)
		}
		// Their keys are still exact: each one dedups only against itself.
		require.NoError(t, q.Requeue(e.ctx(), deadIDs(dead)...))
		q = e.reopen(q, e.opts())
		back := pending(t, e, q)
		require.Equal(t, payloads(want), payloads(back))
		for i, it := range back {
			require.Equal(t, want[i].Key, it.Key)
			if it.Key == "" {
				continue
			}
			id, err := q.Enqueue(e.ctx(), []byte("dup"), it.Key)
			require.NoError(t, err)
			require.Equal(t, it.ID, id, "key %q no longer dedups against itself", it.Key)
		}
		requireLen(t, e, q, len(want))
	}},
}

var dedupTests = []subtest{
	{name: "Dedup/PendingKeyReturnsExistingID", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		first := enqueue(t, e, q, "first", "op-1")
		e.clock.Advance(time.Second)
		again, err := q.Enqueue(e.ctx(), []byte("second"), "op-1")
		require.NoError(t, err)
		require.Equal(t, first, again, "dedup hit must return the pending item's ID")

		items := pending(t, e, q)
		require.Len(t, items, 1)
		require.Equal(t, "first", string(items[0].Payload), "first write wins on a dedup hit")
	}},
	{name: "Dedup/EmptyKeyNeverDedups", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		a := enqueue(t, e, q, "same", "")
		b := enqueue(t, e, q, "same", "")
		require.NotEqual(t, a, b)
		requireLen(t, e, q, 2)
	}},
	{name: "Dedup/KeysAreComparedByteForByte", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		keys := []string{"a", "A", "a\x00", "a\x00b", "\xff", "\xfe", "\xef\xbf\xbd", "a ", " a"}
		seen := map[offlinequeue.ID]string{}
		for _, k := range keys {
			id := enqueue(t, e, q, "p", k)
			require.NotContains(t, seen, id, "key %q deduped against key %q", k, seen[id])
			seen[id] = k
		}
		requireLen(t, e, q, len(keys))
		if e.durable {
			q = e.reopen(q, e.opts())
			for id, k := range seen {
				got, err := q.Enqueue(e.ctx(), []byte("p"), k)
				require.NoError(t, err)
				require.Equal(t, id, got, "after reopen, key %q", k)
			}
			requireLen(t, e, q, len(keys))
		}
	}},
	{name: "Dedup/MarkDoneReleasesKey", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		first := enqueue(t, e, q, "first", "op-1")
		require.NoError(t, q.MarkDone(e.ctx(), first))
		second := enqueue(t, e, q, "second", "op-1")
		require.Greater(t, second, first, "a released key enqueues a new item")
		items := pending(t, e, q)
		require.Equal(t, []string{"second"}, payloads(items))
	}},
	{name: "Dedup/MoveToDeadLettersReleasesKey", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		first := enqueue(t, e, q, "first", "op-1")
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), first, "refused"))
		second := enqueue(t, e, q, "second", "op-1")
		require.Greater(t, second, first)
		require.Equal(t, []string{"second"}, payloads(pending(t, e, q)))
		dead := deadLetters(t, e, q)
		require.Len(t, dead, 1)
		require.Equal(t, "op-1", dead[0].Key, "the dead letter keeps its key")
		if e.durable {
			q = e.reopen(q, e.opts())
			again, err := q.Enqueue(e.ctx(), []byte("third"), "op-1")
			require.NoError(t, err)
			require.Equal(t, second, again, "after reopen the key belongs to the pending item, not the dead letter")
		}
	}},
	{name: "Dedup/DurableAcrossReopen", durableOnly: true, run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		first := enqueue(t, e, q, "first", "op-1")
		other := enqueue(t, e, q, "other", "op-2")
		require.NoError(t, q.MarkDone(e.ctx(), other))
		q = e.reopen(q, e.opts())
		again, err := q.Enqueue(e.ctx(), []byte("second"), "op-1")
		require.NoError(t, err)
		require.Equal(t, first, again, "a reopened queue must still know a pending key")
		released := enqueue(t, e, q, "new", "op-2")
		require.Greater(t, released, other, "a key released before the reopen stays released")
		q = e.reopen(q, e.opts())
		require.Equal(t, []string{"first", "new"}, payloads(pending(t, e, q)))
	}},
	{name: "Dedup/HitOnFullQueueSucceeds", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.bounded(2))
		a := enqueue(t, e, q, "a", "op-a")
		enqueue(t, e, q, "b", "")
		got, err := q.Enqueue(e.ctx(), []byte("a again"), "op-a")
		require.NoError(t, err, "a dedup hit writes nothing, so a full queue must accept it")
		require.Equal(t, a, got)
		require.Zero(t, metricValue(t, e.reg, overflowMetric), "a dedup hit is not an overflow")
		_, err = q.Enqueue(e.ctx(), []byte("c"), "op-c")
		require.ErrorIs(t, err, offlinequeue.ErrFull, "a new key on a full queue is refused")
		requireLen(t, e, q, 2)
	}},
}

var inputTests = []subtest{
	{name: "Input/RefusedWithTypedErrorAndNothingWritten", run: func(t *testing.T, e *env) {
		opts := e.opts()
		opts.MaxPayloadBytes = 64
		q := e.openQueue(opts)
		enqueue(t, e, q, "existing", "op-1")
		before := takeSnapshot(t, e, q)

		cases := []struct {
			name    string
			payload []byte
			key     string
			check   func(t *testing.T, err error)
		}{
			{"nil payload", nil, "", func(t *testing.T, err error) { require.ErrorIs(t, err, offlinequeue.ErrEmptyPayload) }},
			{"empty payload", []byte{}, "op-2", func(t *testing.T, err error) { require.ErrorIs(t, err, offlinequeue.ErrEmptyPayload) }},
			{"empty payload with pending key", []byte{}, "op-1", func(t *testing.T, err error) { require.ErrorIs(t, err, offlinequeue.ErrEmptyPayload) }},
			{"payload over limit", bytes.Repeat([]byte("x"), 65), "", func(t *testing.T, err error) {
				var tl *offlinequeue.TooLargeError
				require.ErrorAs(t, err, &tl)
				require.Equal(t, offlinequeue.TooLargeError{Size: 65, Limit: 64}, *tl)
				require.ErrorIs(t, err, offlinequeue.ErrTooLarge)
			}},
			{"key over limit", []byte("p"), strings.Repeat("k", offlinequeue.MaxKeyBytes+1), func(t *testing.T, err error) {
				require.ErrorIs(t, err, offlinequeue.ErrKeyTooLong)
			}},
		}
		for _, c := range cases {
			id, err := q.Enqueue(e.ctx(), c.payload, c.key)
			require.Error(t, err, c.name)
			require.Zero(t, id, "%s: a refused Enqueue returns ID 0", c.name)
			c.check(t, err)
			require.Equal(t, before, takeSnapshot(t, e, q), "%s changed the queue", c.name)
		}

		// The limits themselves are accepted.
		enqueue(t, e, q, strings.Repeat("x", 64), strings.Repeat("k", offlinequeue.MaxKeyBytes))
		after := takeSnapshot(t, e, q)
		require.Len(t, after.Pending, 2)
		if e.durable {
			require.Equal(t, after, takeSnapshot(t, e, e.reopen(q, opts)), "refused enqueues appeared after reopen")
		}
	}},
	{name: "Input/DefaultPayloadLimit", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		_, err := q.Enqueue(e.ctx(), make([]byte, offlinequeue.DefaultMaxPayloadBytes+1), "")
		var tl *offlinequeue.TooLargeError
		require.ErrorAs(t, err, &tl)
		require.Equal(t, offlinequeue.DefaultMaxPayloadBytes, tl.Limit)
		require.Equal(t, offlinequeue.DefaultMaxPayloadBytes+1, tl.Size)
		requireLen(t, e, q, 0)

		big := bytes.Repeat([]byte{0, 0xff, 'a'}, offlinequeue.DefaultMaxPayloadBytes/3)
		id, err := q.Enqueue(e.ctx(), big, "")
		require.NoError(t, err)
		page, err := q.Peek(e.ctx(), 0, 1)
		require.NoError(t, err)
		require.Equal(t, id, page[0].ID)
		require.True(t, bytes.Equal(big, page[0].Payload), "large payload did not round-trip")
	}},
	{name: "Input/CanceledContext", run: func(t *testing.T, e *env) {
		q := e.openQueue(e.opts())
		a := enqueue(t, e, q, "a", "op-a")
		b := enqueue(t, e, q, "b", "")
		require.NoError(t, q.MoveToDeadLetters(e.ctx(), b, "r"))
		before := takeSnapshot(t, e, q)

		ctx, cancel := newCanceledContext(e)
		defer cancel()
		calls := map[string]func() error{
			"Enqueue":           func() error { _, err := q.Enqueue(ctx, []byte("c"), ""); return err },
			"Peek":              func() error { _, err := q.Peek(ctx, 0, 10); return err },
			"MarkDone":          func() error { return q.MarkDone(ctx, a) },
			"SetAttempts":       func() error { return q.SetAttempts(ctx, a, 3) },
			"Len":               func() error { _, err := q.Len(ctx); return err },
			"Stats":             func() error { _, err := q.Stats(ctx); return err },
			"MoveToDeadLetters": func() error { return q.MoveToDeadLetters(ctx, a, "r") },
			"DeadLetters":       func() error { _, err := q.DeadLetters(ctx, 0, 10); return err },
			"Requeue":           func() error { return q.Requeue(ctx, b) },
			"Purge":             func() error { return q.Purge(ctx, b) },
		}
		for name, call := range calls {
			err := call()
			require.Error(t, err, name)
			require.True(t, errors.Is(err, ctx.Err()), "%s: got %v, want an error matching %v", name, err, ctx.Err())
		}
		require.Equal(t, before, takeSnapshot(t, e, q), "a call with a canceled context changed the queue")
	}},
}
