package client_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
)

// A device configured with one node's URL learns the cluster's other nodes
// from welcome.servers, fails over to one of them when its node goes, and
// still knows them after a restart while that node is down.
func TestFailoverToANodeLearntFromTheCluster(t *testing.T) {
	nodes := syncdtest.StartCluster(t, 3, server.Config{})
	token := nodes[0].Member(t, "acme", "phone-1")
	dir := t.TempDir()
	open := func() *client.Client {
		q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
		require.NoError(t, err)
		c, err := client.Open(t.Context(), client.Config{
			ServerURLs: []string{nodes[0].URL}, Token: token, ClientID: "phone-1",
			Queue: q, ReplicaPath: filepath.Join(dir, "replica.db"),
			ProbeInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond, MaxRetryInterval: 200 * time.Millisecond,
			Registerer: prometheus.NewRegistry(), Logger: failureLog(t, "phone-1"),
		})
		require.NoError(t, err)
		return c
	}
	applied := func(c *client.Client, key string) string {
		t.Helper()
		op, err := c.Put(t.Context(), "notes", key, []byte(`{"via":"`+key+`"}`))
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), waitFor)
		defer cancel()
		out, err := c.Await(ctx, op)
		require.NoError(t, err)
		require.Equal(t, client.StatusApplied, out.Status, "%s: %+v", key, out)
		return op
	}

	c := open()
	applied(c, "before")
	nodes[0].Stop(t)
	op := applied(c, "after-failover")
	require.NoError(t, c.Close())
	entries := nodes[1].Oplog(t, "&tenant=acme")
	require.True(t, slices.ContainsFunc(entries, func(e adminapi.OplogEntry) bool { return e.OpID == op }), "the write went through another node")

	c = open() // configured with the stopped node's URL alone
	defer c.Close()
	applied(c, "after-restart")
}
