package cluster_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// waitForSnapshot waits until one of nodes stored a snapshot after the
// call.
func waitForSnapshot(t testing.TB, nodes ...*node) {
	t.Helper()
	stored := func() float64 {
		var n float64
		for _, nd := range nodes {
			n += nd.metric(t, "syncd_cluster_snapshots_total", "result", "stored")
		}
		return n
	}
	before := stored()
	require.Eventually(t, func() bool { return stored() > before }, waitFor, 20*time.Millisecond)
}

// TestRestoredRecordsAreComparedBeforeServing: a node restored onto an
// empty disk serves only once a records check (every node digesting its
// records at the same stream seq) agreed with its peers. A node whose
// restored records were altered on its disk before it opened them (the
// snapshot itself authentic, its applied seq and running digest its
// peers') never serves: it stops at the check, naming the records and the
// peers, and says so in its metrics; the others serve on.
func TestRestoredRecordsAreComparedBeforeServing(t *testing.T) {
	servers := syncdtest.StartNATS(t, 1, testSecret)
	o := cluster.Options{StreamMaxBytes: 64 << 10, SnapshotEvery: 200 * time.Millisecond, LeaseTTL: time.Second,
		JobInterval: time.Hour, RecordsCheckGap: 100 * time.Millisecond}
	a := startNode(t, servers[0], "node-a", filepath.Join(t.TempDir(), "syncd.db"), o)
	b := startNode(t, servers[0], "node-b", filepath.Join(t.TempDir(), "syncd.db"), o)
	writeMany(t, a, "laptop", 400) // the stream no longer starts at 1: a new node restores
	waitForSnapshot(t, a, b)

	honest := startNode(t, servers[0], "node-c", filepath.Join(t.TempDir(), "syncd.db"), o)
	require.Eventually(t, func() bool { return honest.cl.Ready() == nil }, waitFor, 20*time.Millisecond)
	require.GreaterOrEqual(t, honest.metric(t, "syncd_cluster_records_checks_total", "result", "match"), 1.0)
	require.Equal(t, 0.0, honest.metric(t, "syncd_cluster_records_checks_total", "result", "mismatch"))
	require.Equal(t, 0.0, honest.metric(t, "syncd_cluster_records_unverified", "", ""))
	writeMany(t, honest, "tablet", 1)

	forge := func(path string) {
		db, err := sql.Open("sqlite3", path)
		require.NoError(t, err)
		defer db.Close()
		res, err := db.Exec(`UPDATE records SET value = CAST('{"pad":"forged"}' AS BLOB) WHERE rowid = (SELECT min(rowid) FROM records)`)
		require.NoError(t, err)
		n, err := res.RowsAffected()
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
	}
	forged := startNodeEdited(t, servers[0], "node-d", filepath.Join(t.TempDir(), "syncd.db"), o, replication.StoreOptions{}, forge)
	var diverged *cluster.DivergedError
	require.Eventually(t, func() bool {
		err := forged.cl.Ready()
		require.Error(t, err, "the forged node never serves")
		return errors.As(err, &diverged)
	}, waitFor, 5*time.Millisecond)
	require.True(t, diverged.Records, "what differs is the records")
	require.ElementsMatch(t, []string{"node-a", "node-b", "node-c"}, diverged.Peers)
	require.ErrorContains(t, forged.cl.Ready(), "records differ from peers")
	require.Equal(t, 1.0, forged.metric(t, "syncd_cluster_node_failed", "", ""))
	require.Equal(t, 1.0, forged.metric(t, "syncd_cluster_records_unverified", "", ""))
	require.GreaterOrEqual(t, forged.metric(t, "syncd_cluster_records_checks_total", "result", "mismatch"), 3.0)
	clock := syncproto.NewClock("phone", nil)
	_, err := forged.tryCommit(batchOf("phone", put(clock, "notes", "k", `"through the forged node"`)))
	require.ErrorIs(t, err, cluster.ErrNotServing)

	for _, n := range []*node{a, b, honest} {
		requireServing(t, n)
	}
	writeMany(t, b, "phone", 1)
	waitApplied(t, a, b, honest)
	requireSameState(t, a, b, honest)
}
