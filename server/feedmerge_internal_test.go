package server

import (
	"context"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// tailOpID is the op id of every tailEntry (entries are compared by seq).
var tailOpID = func() string {
	op, err := syncproto.NewOpID()
	if err != nil {
		panic(err)
	}
	return op
}()

// tailEntry is entry seq of a tail built in memory.
func tailEntry(seq uint64) replication.Entry {
	at := time.UnixMilli(1_700_000_000_000).UTC()
	return replication.Entry{Change: syncproto.Change{Seq: seq, Model: "notes", Key: "k", OpID: tailOpID, Op: syncproto.OpPut,
		Value: []byte(`{"v":1}`), Version: seq, HLC: syncproto.Timestamp{Wall: at.UnixMilli(), Origin: "c"}}, Tenant: "acme", ClientID: "c", AppliedAt: at}
}

// memoryTail is a feed tail holding entries 1..n, its log at head n.
func memoryTail(t *testing.T, n uint64) *feedTail {
	log := &countedLog{}
	tail := newFeedTail(log, newRouter(nil, prometheus.NewRegistry()))
	_, ok := tail.read(t.Context(), replication.ReadRequest{Scope: replication.Scope{AllTenants: true, AllModels: true}})
	require.True(t, ok)
	entries := make([]replication.Entry, n)
	for i := range entries {
		entries[i] = tailEntry(uint64(i) + 1)
	}
	tail.committed(entries)()
	log.head = n
	return tail
}

// queuedPage queues on ss's feed lane the page of entries from..to read
// after cursor after, built as the feed builds it; sent counts its onSent.
func queuedPage(t *testing.T, ss *session, id string, after, from, to, head uint64, sent *int) {
	var page replication.Page
	for seq := from; seq <= to; seq++ {
		page.Entries = append(page.Entries, tailEntry(seq))
	}
	page.Next, page.Head = to, head
	frame := ss.srv.tail.frame(id, page)
	require.NotNil(t, frame)
	ss.feedbox <- outbound{frame: frame, feed: &feedPage{id: id, after: after, page: page}, onSent: func() { *sent++ }}
}

// readMessage reads one frame the writer sent, and decodes it.
func readMessage(t *testing.T, c *websocket.Conn) (syncproto.Message, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), laneTimeout)
	defer cancel()
	_, frame, err := c.Read(ctx)
	require.NoError(t, err)
	msg, err := syncproto.Decode(frame)
	require.NoError(t, err)
	return msg, frame
}

// readChanges reads one frame and decodes it as a changes page.
func readChanges(t *testing.T, c *websocket.Conn) (*syncproto.Changes, []byte) {
	t.Helper()
	msg, frame := readMessage(t, c)
	ch, ok := msg.(*syncproto.Changes)
	require.True(t, ok, "a changes frame, got %s", msg.Type())
	return ch, frame
}

func seqsOf(c *syncproto.Changes) []uint64 {
	seqs := make([]uint64, len(c.Entries))
	for i, e := range c.Entries {
		seqs[i] = e.Seq
	}
	return seqs
}

// Feed pages of one subscription queued behind each other (its writer fell
// behind) go out as one frame, the frame the encoder writes for the pages
// read at once; a page that does not continue them (another subscription's
// cursor) and a message built without a page keep their place after it.
func TestQueuedFeedPagesAreMergedIntoOneFrame(t *testing.T) {
	ss, client := laneSession(t)
	ss.srv.tail = memoryTail(t, 8)
	sent := 0
	queuedPage(t, ss, "feed", 0, 1, 2, 8, &sent)
	queuedPage(t, ss, "feed", 2, 3, 4, 8, &sent)
	queuedPage(t, ss, "feed", 3, 4, 4, 8, &sent)                                                                   // read after 3: does not continue the pages before it
	ss.feedbox <- outbound{msg: &syncproto.Changes{ID: "feed", Entries: []syncproto.Change{}, Cursor: 8, Head: 8}} // no page: a message
	startWriter(t, ss)

	merged, frame := readChanges(t, client)
	require.Equal(t, []uint64{1, 2, 3, 4}, seqsOf(merged))
	require.Equal(t, uint64(4), merged.Cursor)
	require.True(t, merged.More)
	var page replication.Page
	for seq := uint64(1); seq <= 4; seq++ {
		page.Entries = append(page.Entries, tailEntry(seq))
	}
	page.Next, page.Head = 4, 8
	want, err := syncproto.Encode(changesOf("feed", page))
	require.NoError(t, err)
	require.Equal(t, string(want), string(frame))

	alone, _ := readChanges(t, client)
	require.Equal(t, []uint64{4}, seqsOf(alone))
	last, _ := readChanges(t, client)
	require.Empty(t, last.Entries)
	require.Equal(t, uint64(8), last.Cursor)
	require.Equal(t, 3, sent, "every page's accounting ran once")
}

// A merged frame holds at most what one page of the feed holds
// (mergedPageEntries): the pages beyond it go in a frame of their own.
func TestMergedFeedFrameStaysWithinAPage(t *testing.T) {
	ss, client := laneSession(t)
	per := uint64(mergedPageEntries/2 + 1)
	ss.srv.tail = memoryTail(t, 2*per)
	sent := 0
	queuedPage(t, ss, "feed", 0, 1, per, 2*per, &sent)
	queuedPage(t, ss, "feed", per, per+1, 2*per, 2*per, &sent)
	startWriter(t, ss)

	first, _ := readChanges(t, client)
	require.Len(t, first.Entries, int(per))
	second, _ := readChanges(t, client)
	require.Len(t, second.Entries, int(per))
	require.Equal(t, 2*per, second.Cursor)
	require.False(t, second.More)
}

// Subscribers reading the same page under the same request id get the
// same frame, built once; another id, cursor or head gets its own.
func TestSubscribersAtTheSameCursorShareOneFrame(t *testing.T) {
	tail := memoryTail(t, 3)
	page := replication.Page{Entries: []replication.Entry{tailEntry(2), tailEntry(3)}, Next: 3, Head: 3}
	a := tail.frame("feed", page)
	require.NotNil(t, a)
	again := page
	again.Entries = append([]replication.Entry(nil), page.Entries...)
	b := tail.frame("feed", again)
	require.Same(t, &a[0], &b[0], "one frame for both")

	other := tail.frame("sub", page)
	require.NotSame(t, &a[0], &other[0])
	require.Contains(t, string(other), `"id":"sub"`)
	later := page
	later.Head = 4
	require.NotSame(t, &a[0], &tail.frame("feed", later)[0])
	evicted := page
	evicted.Entries = []replication.Entry{tailEntry(2), tailEntry(3)}
	evicted.Entries[1].Op = syncproto.OpEvict
	require.Nil(t, tail.frame("feed", evicted), "an evict standing for an entry is encoded by the writer, never shared")
}
