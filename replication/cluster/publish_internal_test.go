package cluster

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
)

// TestGatherKeepsEachClientInOrder: a command takes the waiting batches in
// order, except that a client with an unacknowledged command, or with a
// batch left behind (the command is full), has all its batches left
// behind: a client's batches are never published ahead of its earlier ones.
func TestGatherKeepsEachClientInOrder(t *testing.T) {
	sub := func(client string, size int) *submission {
		return &submission{batch: &replication.Batch{Tenant: "acme", ClientID: client}, size: size}
	}
	names := func(subs []*submission) []string {
		var out []string
		for _, s := range subs {
			out = append(out, s.batch.ClientID)
		}
		return out
	}
	p := &publisher{c: &Cluster{opts: Options{MaxCommandBytes: commandEnvelope + 100}}}
	for _, tc := range []struct {
		name        string
		waiting     []*submission
		busy        []string
		group, rest []string
	}{
		{"all fit", []*submission{sub("a", 10), sub("b", 10), sub("a", 10)}, nil,
			[]string{"a", "b", "a"}, nil},
		{"a busy client waits", []*submission{sub("a", 10), sub("b", 10), sub("a", 10)}, []string{"a"},
			[]string{"b"}, []string{"a", "a"}},
		{"one left behind keeps its client's later ones behind", []*submission{sub("a", 60), sub("b", 60), sub("b", 10), sub("a", 10)}, nil,
			[]string{"a", "a"}, []string{"b", "b"}},
		{"nothing to take", []*submission{sub("a", 10)}, []string{"a"},
			nil, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			busy := map[sender]int{}
			for _, c := range tc.busy {
				busy[sender{"acme", c}]++
			}
			group, rest := p.gather(tc.waiting, busy)
			require.Equal(t, tc.group, names(group))
			require.Equal(t, tc.rest, names(rest))
		})
	}

	var many []*submission
	for range maxGroupBatches + 3 {
		many = append(many, sub("a", 0))
	}
	group, rest := p.gather(many, map[sender]int{})
	require.Len(t, group, maxGroupBatches)
	require.Len(t, rest, 3)
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
