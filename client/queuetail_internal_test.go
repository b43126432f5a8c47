package client

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/synccore"
	"github.com/syncd-dev/syncd/syncproto"
)

// The queue tail answers a read only with every write after its After, up
// to the newest handed over, and forgets what it answered with or what a
// read went past; anything else is read from the queue.
func TestQueueTailAnswersOnlyWithoutGaps(t *testing.T) {
	var tail queueTail
	add := func(ids ...uint64) {
		for _, id := range ids {
			tail.add(synccore.Item{ID: id, Size: int(id)})
		}
	}
	ids := func(p synccore.Page) []uint64 {
		var out []uint64
		for _, it := range p.Items {
			out = append(out, it.ID)
		}
		return out
	}
	read := func(after uint64, limit int) (synccore.Page, bool) {
		return tail.page(synccore.ReadQueue{Read: 7, After: after, Limit: limit})
	}

	add(2, 1, 3) // handed over out of order
	p, ok := read(0, 10)
	require.True(t, ok)
	require.Equal(t, []uint64{1, 2, 3}, ids(p))
	require.True(t, p.End)
	require.Equal(t, uint64(7), p.Read)
	_, ok = read(3, 10)
	require.False(t, ok, "nothing handed over: read the queue")

	add(5)
	_, ok = read(3, 10)
	require.False(t, ok, "4 is committed and not handed over yet")
	add(4)
	p, ok = read(3, 10)
	require.True(t, ok)
	require.Equal(t, []uint64{4, 5}, ids(p))

	add(6, 7, 8)
	p, ok = read(5, 2)
	require.True(t, ok)
	require.Equal(t, []uint64{6, 7}, ids(p))
	require.False(t, p.End, "a full page")
	p, ok = read(7, 2)
	require.True(t, ok)
	require.Equal(t, []uint64{8}, ids(p))
	require.True(t, p.End)

	add(9, 10)
	_, ok = read(0, 10)
	require.False(t, ok, "a pass from the head reads the writes answered before from the queue")
	p, ok = read(8, 10)
	require.True(t, ok)
	require.Equal(t, []uint64{9, 10}, ids(p))

	add(11, 12)
	_, ok = read(20, 10)
	require.False(t, ok)
	require.Empty(t, tail.items, "a read past them forgets them")

	for id := range uint64(maxQueueTail + 1) {
		add(100 + id)
	}
	_, ok = read(99, 10)
	require.False(t, ok, "past its bound the tail forgot the older writes")
}

// A write handed to the driver in memory is the item it would read back
// from the queue: its value as the payload holds it, and not the app's
// buffer.
func TestQueuedItemIsTheQueuedPayload(t *testing.T) {
	for _, value := range []string{`{ "text" : "<b>&amp;</b>",  "n": [1, 2] }`, `null`, ``} {
		m := testMutation(t, "a", value)
		if value == "" {
			m.Op, m.Value = syncproto.OpDelete, nil
		}
		payload := mustJSON(t, m)
		it, ok := queuedItem(9, payload, m)
		require.True(t, ok)
		decoded, err := decodeMutation(payload)
		require.NoError(t, err)
		require.Equal(t, synccore.Item{ID: 9, Size: len(payload), Mutation: *decoded}, it)
		if len(m.Value) > 0 {
			m.Value[0] = ' '
			require.NotEqual(t, m.Value, it.Mutation.Value)
		}
	}
	_, ok := queuedItem(0, nil, testMutation(t, "a", `1`))
	require.False(t, ok, "a dedup hit inserted nothing")
}

// A write queued without being handed over (a requeued dead letter) sends
// the next read to the queue, once; an item handed over after the driver
// read it from the queue is not taken; the tail forgets everything past
// its byte bound.
func TestQueueTailDefersToTheQueue(t *testing.T) {
	var tail queueTail
	read := func(after uint64) bool {
		_, ok := tail.page(synccore.ReadQueue{After: after, Limit: 10})
		return ok
	}
	tail.add(synccore.Item{ID: 1})
	tail.queuedElsewhere()
	require.False(t, read(0), "item 2 was requeued: the queue holds it, the tail does not")
	tail.readFromQueue(2)
	tail.add(synccore.Item{ID: 3})
	require.True(t, read(2), "the read after that uses the tail again")

	tail.readFromQueue(5) // the driver read 4 and 5 from the queue before their Puts handed them over
	tail.add(synccore.Item{ID: 4})
	tail.add(synccore.Item{ID: 5})
	require.False(t, read(3), "items the driver already read are never answered from memory")

	tail.add(synccore.Item{ID: 6, Size: maxQueueTailBytes / 2})
	tail.add(synccore.Item{ID: 7, Size: maxQueueTailBytes / 2})
	tail.add(synccore.Item{ID: 8, Size: 1})
	require.False(t, read(5), "past its byte bound the tail forgot 6 and 7")
	require.Equal(t, 1, tail.bytes)
}

// tailModel is the driver's reading of the queue, with the real core and
// tail: reads answered from the tail, else from queue (the committed ids).
type tailModel struct {
	t     *testing.T
	queue []uint64
	tail  queueTail
	core  *synccore.Core
	sent  []uint64
}

func newTailModel(t *testing.T) *tailModel {
	m := &tailModel{t: t, core: synccore.New(synccore.Config{InFlight: 4, MaxBatch: 100, MaxPushBytes: 1 << 20}, 0)}
	m.step(synccore.Welcomed{MaxBatch: 100, MaxPushBytes: 1 << 20}) // an empty queue
	return m
}

func tailItem(id uint64) synccore.Item {
	return synccore.Item{ID: id, Size: 10, Mutation: syncproto.Mutation{OpID: "op-" + string(rune('a'+id)), Model: "notes", Key: "k", Op: syncproto.OpPut}}
}

// step feeds in to the core and carries out its reads and sends.
func (m *tailModel) step(in synccore.Input) {
	for _, a := range m.core.Step(in) {
		switch a := a.(type) {
		case synccore.ReadQueue:
			if p, ok := m.tail.page(a); ok {
				m.step(p)
				continue
			}
			p := synccore.Page{Read: a.Read}
			for _, id := range m.queue {
				if id > a.After && len(p.Items) < a.Limit {
					p.Items = append(p.Items, tailItem(id))
				}
			}
			p.End = len(p.Items) < a.Limit
			if n := len(p.Items); n > 0 {
				m.tail.readFromQueue(p.Items[n-1].ID)
			}
			m.step(p)
		case synccore.Send:
			for _, it := range a.Items {
				m.sent = append(m.sent, it.ID)
			}
		}
	}
}

// The coalesced wake-up of a Put and a requeue: the driver, woken once,
// must still send the requeued write.
func TestRequeuedWriteIsSentDespiteAMergedWakeUp(t *testing.T) {
	m := newTailModel(t)
	m.queue = []uint64{1, 2} // a Put committed 1, a requeue committed 2
	m.tail.queuedElsewhere() // the requeue, after its commit
	m.tail.add(tailItem(1))  // the Put hands 1 over; its wake-up merges with the requeue's
	m.step(synccore.Enqueued{})
	require.Equal(t, []uint64{1, 2}, m.sent, "the requeued write is sent with the Put's")
}

// A Put hands its item over before its commit and wakes the driver; after
// the commit it wakes the driver again only if a read went to the queue
// since (missedSince), where the uncommitted item was not to be seen. A
// read answered from the tail needs no second wake-up (the queue read it
// would cost finds nothing), a missed one does.
func TestPutWakesAgainOnlyAfterAMissedRead(t *testing.T) {
	m := newTailModel(t)
	misses := m.tail.add(tailItem(1)) // handed over, not committed
	m.step(synccore.Enqueued{})
	m.queue = []uint64{1} // committed
	require.Equal(t, []uint64{1}, m.sent, "read from the tail before its commit")
	require.False(t, m.tail.missedSince(misses), "no second wake-up")

	// A requeue committed 2 and sent the next read to the queue; a Put
	// hands 3 over and its wake-up merges with the requeue's.
	m.queue = append(m.queue, 2)
	m.tail.queuedElsewhere()
	misses = m.tail.add(tailItem(3))
	m.step(synccore.Enqueued{})
	require.Equal(t, []uint64{1, 2}, m.sent, "the queue read cannot see 3, not committed yet")
	m.queue = append(m.queue, 3)
	require.True(t, m.tail.missedSince(misses), "so its Put wakes the driver again")
	m.step(synccore.Enqueued{})
	require.Equal(t, []uint64{1, 2, 3}, m.sent)
}
