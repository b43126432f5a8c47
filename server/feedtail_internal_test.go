package server

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// countedLog is a log at head whose reads are counted; every read finds
// nothing.
type countedLog struct {
	replication.Log
	head  uint64
	reads int
}

func (l *countedLog) Bounds(context.Context, replication.Scope) (replication.Bounds, error) {
	return replication.Bounds{Head: l.head, Oldest: l.head + 1}, nil
}

func (l *countedLog) Read(context.Context, replication.ReadRequest) (replication.Page, error) {
	l.reads++
	return replication.Page{Next: l.head, Head: l.head}, nil
}

func (l *countedLog) Notify(after uint64) <-chan struct{} {
	ch := make(chan struct{})
	if after < l.head {
		close(ch)
	}
	return ch
}

// The entries a commit hands the tail are served to the subscriptions
// without a read of the log; entries that do not follow its head are
// left for a refill to read.
func TestCommittedEntriesReachTheFeedWithoutARead(t *testing.T) {
	log := &countedLog{}
	tail := newFeedTail(log, newRouter(nil, prometheus.NewRegistry()))
	scope := replication.Scope{AllTenants: true, AllModels: true}
	page, ok := tail.read(t.Context(), replication.ReadRequest{Scope: scope})
	require.True(t, ok)
	require.Empty(t, page.Entries)

	at := time.UnixMilli(1_700_000_000_000).UTC()
	entry := func(seq uint64) replication.Entry {
		return replication.Entry{Change: syncproto.Change{Seq: seq, Model: "notes", Key: "k", OpID: "op", Op: syncproto.OpPut,
			Value: []byte(`{}`), Version: seq, HLC: syncproto.Timestamp{Wall: at.UnixMilli(), Origin: "c"}}, Tenant: "acme", ClientID: "c", AppliedAt: at}
	}
	tail.committed([]replication.Entry{entry(1), entry(2)})()
	log.head = 2
	page, ok = tail.read(t.Context(), replication.ReadRequest{Scope: scope})
	require.True(t, ok)
	require.Equal(t, []replication.Entry{entry(1), entry(2)}, page.Entries)
	require.Equal(t, uint64(2), page.Next)
	require.Zero(t, log.reads)

	tail.committed([]replication.Entry{entry(4)})() // seq 3 came between
	log.head = 4
	_, ok = tail.read(t.Context(), replication.ReadRequest{After: 2, Scope: scope})
	require.True(t, ok)
	require.Equal(t, 1, log.reads, "read by a refill")
}
