package cluster_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// TestForgedCommandsLeaveSyncdNodesServing is the attack round against
// three syncd nodes: every forged command, published by a raw NATS client
// without an authenticator, with another key's, and (where the
// materializer can tell) with a valid one, is refused by every node the
// same way; every node answers /readyz 200 throughout, the nodes end at
// the same applied seq with the same digest, the victim tenant holds
// nothing, and an honest push through the websocket applies.
func TestForgedCommandsLeaveSyncdNodesServing(t *testing.T) {
	nodes := syncdtest.StartCluster(t, 3, server.Config{Policies: testPolicies})
	token := nodes[0].Member(t, "acme", "phone")
	clock := syncproto.NewClock("phone", nil)
	require.Equal(t, syncproto.StatusApplied, pushOne(t, nodes[0], token, clock, `"honest"`))

	raw := nodes[0].NATS(t)
	wrongKey := randomKey(t)
	want := map[string]float64{}
	for _, f := range forgeries(t) {
		publishRaw(t, raw, f.data, "")
		publishRaw(t, raw, f.data, cluster.Authenticate(wrongKey, f.data))
		want[cluster.RefusedUnauthenticated] += 2
		if f.withValid != "" {
			publishRaw(t, raw, f.data, cluster.Authenticate(nodes[0].CommandKey, f.data))
			want[f.withValid]++
		}
	}
	require.Equal(t, syncproto.StatusApplied, pushOne(t, nodes[1], token, clock, `"honest again"`), "the next honest write applies")

	var head adminapi.Node
	require.Eventually(t, func() bool {
		sts := make([]adminapi.Node, len(nodes))
		for i, n := range nodes {
			sts[i] = selfStatus(t, n)
		}
		head = sts[0]
		for _, st := range sts {
			if st.AppliedSeq != head.AppliedSeq || st.Digest != head.Digest || st.AppliedSeq < st.StreamHead {
				return false
			}
		}
		return true
	}, waitFor, 50*time.Millisecond, "every node at the same seq with the same digest")
	for i, n := range nodes {
		require.Equal(t, http.StatusOK, syncdtest.GetJSON(t, n.URL+"/readyz", "", nil), "node %d", i+1)
		for reason, count := range want {
			require.Equal(t, count, n.MetricValue(t, fmt.Sprintf(`syncd_cluster_commands_refused_total{reason=%q}`, reason)), "node %d: %s", i+1, reason)
		}
		require.Empty(t, n.Oplog(t, "&tenant=victim"), "node %d: no forged write applied", i+1)
		st := selfStatus(t, n)
		require.Equal(t, cluster.LatestFormat, st.Format, "node %d announces its format in the admin status", i+1)
		require.Equal(t, cluster.LatestFormat, st.ClusterVersion, "node %d", i+1)
		require.EqualValues(t, cluster.LatestFormat, n.MetricValue(t, "syncd_cluster_version"), "node %d", i+1)
		entries := n.Oplog(t, "&tenant=acme")
		require.Len(t, entries, 2, "node %d: the two honest writes only", i+1)
	}
}

// selfStatus is a node's own cluster status, through its admin API.
func selfStatus(t testing.TB, n *syncdtest.Server) adminapi.Node {
	t.Helper()
	st := n.Status(t)
	require.NotNil(t, st.Cluster)
	for _, s := range st.Cluster.Nodes {
		if s.Node == st.NodeID {
			return s
		}
	}
	t.Fatalf("node %s does not list itself", st.NodeID)
	return adminapi.Node{}
}

// pushOne pushes one write of key k through n's websocket as client phone
// and returns its status.
func pushOne(t testing.TB, n *syncdtest.Server, token string, clock *syncproto.Clock, value string) syncproto.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+n.URL[len("http"):]+syncproto.SyncPath, &websocket.DialOptions{
		Subprotocols: []string{syncproto.Subprotocol},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + token}},
	})
	require.NoError(t, err)
	defer conn.CloseNow()
	conn.SetReadLimit(int64(syncproto.MaxFrameBytes))
	roundTrip := func(req syncproto.Message) syncproto.Message {
		frame, err := syncproto.Encode(req)
		require.NoError(t, err)
		require.NoError(t, conn.Write(ctx, websocket.MessageText, frame))
		for range 100 {
			_, b, err := conn.Read(ctx)
			require.NoError(t, err)
			msg, err := syncproto.Decode(b)
			require.NoError(t, err)
			if msg.RequestID() == req.RequestID() {
				return msg
			}
		}
		t.Fatalf("no answer to %s among 100 frames", req.RequestID())
		return nil
	}
	roundTrip(&syncproto.Hello{ID: "hello", ClientID: "phone", HLC: clock.Now()})
	res, ok := roundTrip(&syncproto.Push{ID: "push", Mutations: []syncproto.Mutation{put(clock, "notes", "k", value)}}).(*syncproto.PushResult)
	require.True(t, ok)
	require.Len(t, res.Results, 1)
	return res.Results[0].Status
}
