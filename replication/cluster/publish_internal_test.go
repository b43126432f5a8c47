package cluster

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/fairshare"
	"github.com/syncd-dev/syncd/replication"
)

// sub is a submission of tenant's client, of writes mutations and size
// bytes.
func sub(tenant, client string, writes, size int) *submission {
	return &submission{batch: &replication.Batch{Tenant: tenant, ClientID: client, Writes: make([]replication.Write, writes)}, size: size}
}

// clients names the clients of subs, in order, as tenant/client.
func clients(subs []*submission) []string {
	var out []string
	for _, s := range subs {
		out = append(out, s.batch.Tenant+"/"+s.batch.ClientID)
	}
	return out
}

// TestPublishQueueKeepsEachClientInOrder: a command takes a client's
// batches in their order, and once a command holds one, the client's later
// batches wait, held, until that command is acknowledged (its retry may
// land after any command published meanwhile), then rejoin their tenant's
// line in order: a client's batches are never published ahead of its
// earlier ones.
func TestPublishQueueKeepsEachClientInOrder(t *testing.T) {
	q := newPublishQueue(nil, commandEnvelope+100)
	add := func(subs ...*submission) {
		for _, s := range subs {
			q.add(s)
		}
	}
	gather := func() []string {
		g, _ := q.gather()
		return clients(g)
	}

	add(sub("t", "a", 1, 10), sub("t", "b", 1, 10), sub("t", "a", 1, 10))
	first, _ := q.gather()
	require.Equal(t, []string{"t/a", "t/b", "t/a"}, clients(first), "all fit: one command, in order")

	add(sub("t", "a", 1, 10), sub("t", "c", 1, 10), sub("t", "a", 1, 10))
	require.Equal(t, []string{"t/c"}, gather(), "a's command is in flight: a's later batches wait")
	require.Empty(t, gather())
	q.acked(first)
	require.Equal(t, []string{"t/a", "t/a"}, gather(), "acknowledged: a's batches rejoin, in order")

	q = newPublishQueue(nil, commandEnvelope+100)
	add(sub("t", "a", 1, 60), sub("t", "b", 1, 60), sub("t", "a", 1, 10), sub("t", "b", 1, 10))
	first, ended := q.gather()
	require.Equal(t, []string{"t/a"}, clients(first), "b's first batch does not fit beside a's")
	require.Equal(t, fairshare.EndBounds, ended)
	require.Equal(t, []string{"t/b", "t/b"}, gather(), "a's second batch waits for a's command; b's go on")
	q.acked(first)
	require.Equal(t, []string{"t/a"}, gather())

	// A tenant's window filled while a client of it is busy: the client's
	// batch, released by the acknowledgement, waits with the tenant's held
	// line, in arrival order, until the apply frees the window.
	q = newPublishQueue(nil, 1<<20)
	add(sub("t", "x", 1500, 10), sub("t", "y", 600, 10), sub("t", "x", 10, 10))
	first, _ = q.gather()
	require.Equal(t, []string{"t/x"}, clients(first), "a command's bound")
	require.Equal(t, []string{"t/y"}, gather(), "y's batch takes t past its window")
	add(sub("t", "z", 5, 10))
	require.Empty(t, gather(), "t's window is full")
	q.acked(first)
	require.Empty(t, gather(), "acknowledged is not applied: t's window is still full")
	q.settled(first)
	require.Equal(t, []string{"t/z", "t/x"}, gather(), "applied: t's line rejoins, z first (x's batch waited for x's command)")

	q = newPublishQueue(nil, 1<<20)
	for i := range maxGroupBatches + 3 {
		q.add(sub("t", fmt.Sprint(i), 1, 0))
	}
	g, _ := q.gather()
	require.Len(t, g, maxGroupBatches)
	g, _ = q.gather()
	require.Len(t, g, 3)
	require.Empty(t, q.all(), "nothing left")
}

// TestPublishQueueServesAWaitingTenantInTheNextCommand: a tenant pushing
// far more than its share through a node waits in its own line, here, not
// in the stream. Its window of mutations in flight full, its line is held
// out of the round, and another tenant's batch goes out in the next
// command, behind at most that window in the stream. Queued together, the
// other tenant's batch is taken after at most one turn of the flood's, and
// that command ends with it (it waits for no more of the flood's batches).
// The flood goes on once its commands settle, and each tenant gets
// mutations in proportion to its weight.
func TestPublishQueueServesAWaitingTenantInTheNextCommand(t *testing.T) {
	q := newPublishQueue(nil, 1<<20)
	for i := range 400 { // 400 devices of the flood's, one batch of 100 each
		q.add(sub("flood", fmt.Sprint(i), 100, 1000))
	}
	first, _ := q.gather()
	require.Len(t, first, maxGroupMutations/100, "a command's bound")
	second, _ := q.gather()
	require.Len(t, second, (maxInFlightMutations-maxGroupMutations)/100, "the flood's second command fills its window")
	g, _ := q.gather()
	require.Empty(t, g, "its window full, the flood's line waits here")
	q.add(sub("light", "b", 1, 100))
	g, _ = q.gather()
	require.Equal(t, []string{"light/b"}, clients(g), "the light batch goes out at once, behind one window of the flood's")
	q.acked(first)
	q.settled(first)
	g, _ = q.gather()
	require.Len(t, g, maxGroupMutations/100, "one command settled, the flood goes on")
	require.Equal(t, "flood", g[0].batch.Tenant)

	q = newPublishQueue(nil, 1<<20)
	for i := range 400 {
		q.add(sub("flood", fmt.Sprint(i), 100, 1000))
	}
	q.add(sub("light", "b", 1, 100))
	g, ended := q.gather()
	require.Equal(t, []string{"flood/0", "light/b"}, clients(g), "queued together: one turn of the flood's, then the light batch")
	require.Equal(t, fairshare.EndDrained, ended, "and the command ends with it")

	for _, tc := range []struct {
		name    string
		weights map[string]int
		aPerB   int
	}{{"equal weights", nil, 1}, {"weight 3 to 1", map[string]int{"a": 3}, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			q := newPublishQueue(tc.weights, 1<<20)
			served := map[string]int{} // mutations
			sent := map[string]int{}   // batches
			taken := map[string]int{}  // batches
			refill := func() {         // both lines outlast the rounds counted
				for _, tenant := range []string{"a", "b"} {
					for sent[tenant]-taken[tenant] < 2*maxGroupBatches {
						// Each batch its own client: none is held.
						q.add(sub(tenant, fmt.Sprintf("%s%d", tenant, sent[tenant]), 100, 1000))
						sent[tenant]++
					}
				}
			}
			for served["b"] < 200*fairshare.MutationQuantum {
				refill()
				g, _ := q.gather()
				require.NotEmpty(t, g)
				for _, s := range g {
					served[s.batch.Tenant] += len(s.batch.Writes)
					taken[s.batch.Tenant]++
				}
				q.acked(g)
				q.settled(g)
			}
			oneRound := fairshare.MutationQuantum * (tc.aPerB + 1)
			require.InDelta(t, tc.aPerB*served["b"], served["a"], float64(oneRound), "served %v", served)
		})
	}
}

// TestRetryable: what JetStream may answer while it has no quorum is
// retried; an answer that retrying cannot change is not.
func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{&jetstream.APIError{Code: 409, ErrorCode: errCodeDuplicateInProcess, Description: "duplicate message id is in process"}, true},
		{&jetstream.APIError{Code: 400, ErrorCode: errCodeNoPeers, Description: "no suitable peers for placement"}, true},
		{fmt.Errorf("publish: %w", context.DeadlineExceeded), true},
		{nats.ErrNoResponders, true},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeBadRequest, Description: "bad request"}, false},
		{&jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeStreamNotFound, Description: "stream not found"}, false},
	} {
		require.Equal(t, tc.want, retryable(tc.err), "%v", tc.err)
	}
}
