package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/ledger"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// writeMany commits n batches of one new key each through n.
func writeMany(t testing.TB, n *node, client string, count int) {
	t.Helper()
	clock := syncproto.NewClock(client, nil)
	for i := range count {
		fx := n.commit(t, batchOf(client, put(clock, "notes", fmt.Sprintf("%s-%d", client, i), fmt.Sprintf(`{"pad":"%0200d"}`, i))))
		require.Equal(t, syncproto.StatusApplied, fx.Results[0].Status)
	}
}

// publishJob publishes a job command as a lease holder would, with token.
func publishJob(t testing.TB, nc *nats.Conn, job cluster.Job) {
	t.Helper()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	data, err := json.Marshal(cluster.Command{Version: cluster.CommandVersion, ID: uuid.NewString(), Job: &job})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	msg := &nats.Msg{Subject: cluster.Subject, Data: data, Header: nats.Header{}}
	msg.Header.Set(cluster.HeaderAuth, cluster.Authenticate(testKey, data))
	_, err = js.PublishMsg(ctx, msg)
	require.NoError(t, err)
}

func oplogCount(t testing.TB, n *node) int {
	t.Helper()
	var c int
	require.NoError(t, n.db.QueryRow(`SELECT count(*) FROM oplog`).Scan(&c))
	return c
}

// TestStaleTokenJobIsIgnored: a job is applied by every replica at the same
// point of the stream, unless its fencing token is older than one already
// applied: a lease holder that lost its lease cannot act after its
// successor.
func TestStaleTokenJobIsIgnored(t *testing.T) {
	servers := syncdtest.StartNATS(t, 1, testSecret)
	// Entries live 30 s; a job may run as of at most the skew bound (a
	// minute) past its stream time.
	n := startNodeWith(t, servers[0], "node-1", filepath.Join(t.TempDir(), "syncd.db"), cluster.Options{JobInterval: time.Hour},
		replication.StoreOptions{Log: replication.Retention{MaxAge: 30 * time.Second}})
	writeMany(t, n, "phone", 5)
	farFuture := time.Now().Add(59 * time.Second) // every entry is beyond the retention then

	publishJob(t, n.nc, cluster.Job{Kind: cluster.JobCompactOplog, Token: 1_000_000, Now: time.Now(), Limit: 1000})
	writeMany(t, n, "phone-2", 1) // a barrier: the job before it was applied
	require.Equal(t, 6, oplogCount(t, n), "a job within the retention removes nothing")

	publishJob(t, n.nc, cluster.Job{Kind: cluster.JobCompactOplog, Token: 999_999, Now: farFuture, Limit: 1000})
	writeMany(t, n, "phone-3", 1)
	require.Equal(t, 7, oplogCount(t, n), "the stale job was ignored")

	publishJob(t, n.nc, cluster.Job{Kind: cluster.JobCompactOplog, Token: 1_000_000, Now: farFuture, Limit: 1000})
	writeMany(t, n, "phone-4", 1)
	require.Equal(t, 1, oplogCount(t, n), "a current job compacts")
}

// TestOlderCompactionJobStopsTheNode: a node of this release that meets
// the whole-log compaction job of an older syncd (a mixed cluster during
// an upgrade) cannot apply it as the older peers did, so it stops serving,
// saying why, instead of removing other rows than they do.
func TestOlderCompactionJobStopsTheNode(t *testing.T) {
	servers := syncdtest.StartNATS(t, 1, testSecret)
	n := startNode(t, servers[0], "node-1", filepath.Join(t.TempDir(), "syncd.db"), cluster.Options{JobInterval: time.Hour})
	writeMany(t, n, "phone", 2)
	publishJob(t, n.nc, cluster.Job{Kind: cluster.JobKind("compact_oplog"), Token: 1_000_000, Now: time.Now(), Limit: 1000})
	require.Eventually(t, func() bool { return n.cl.Ready() != nil }, waitFor, 20*time.Millisecond)
	require.ErrorIs(t, n.cl.Ready(), cluster.ErrBadCommand)
	require.ErrorContains(t, n.cl.Ready(), "upgrade every node at once")
	require.Equal(t, 2, oplogCount(t, n), "nothing compacted")
}

// TestRetentionJobsKeepUp: the lease holder publishes retention in chunks
// until a chunk comes back short, so every store is trimmed to its
// retention however far behind it was, identically on every node (the
// same entries removed, the same per-tenant counts and floors). The
// oplog's count bound is per tenant: a tenant writing far past it leaves a
// quiet tenant's entries, and its readers' cursors, alone.
func TestRetentionJobsKeepUp(t *testing.T) {
	ctx := context.Background()
	servers := syncdtest.StartNATS(t, 1, testSecret)
	o := cluster.Options{JobInterval: 200 * time.Millisecond, JobLimit: 4, LeaseTTL: time.Second}
	so := replication.StoreOptions{Log: replication.Retention{MaxEntries: 3}, Ledger: ledger.Options{MaxEntries: 2}}
	a := startNodeWith(t, servers[0], "node-a", filepath.Join(t.TempDir(), "syncd.db"), o, so)
	b := startNodeWith(t, servers[0], "node-b", filepath.Join(t.TempDir(), "syncd.db"), o, so)
	quietClock := syncproto.NewClock("quiet-phone", nil)
	for i := range 2 {
		b.commit(t, batchFor("quiet", "quiet-phone", put(quietClock, "notes", fmt.Sprint("q", i), `1`)))
	}
	writeMany(t, a, "phone", 25)
	for _, n := range []*node{a, b} {
		require.Eventually(t, func() bool {
			var decisions int
			require.NoError(t, n.db.QueryRow(`SELECT count(*) FROM ledger_decisions`).Scan(&decisions))
			return oplogCount(t, n) == 3+2 && decisions == 2+2
		}, waitFor, 20*time.Millisecond, "node %s trimmed to its retention", n.name)
	}
	waitApplied(t, a, b)
	requireSameState(t, a, b)
	for _, n := range []*node{a, b} {
		page, err := n.store.Log.Read(ctx, replication.ReadRequest{Scope: replication.Scope{Tenant: "quiet", AllModels: true}})
		require.NoError(t, err, "node %s: the quiet tenant's cursor 0 is still valid", n.name)
		require.Len(t, page.Entries, 2)
		acme, err := n.store.Log.Bounds(ctx, replication.Scope{Tenant: "acme", AllModels: true})
		require.NoError(t, err)
		require.Equal(t, uint64(2+22), acme.Floor, "node %s: acme's 22 oldest were compacted", n.name)
	}
}

// TestLeaseHasOneHolderAndMovesOn: one node holds the singleton-job lease;
// when it closes, another takes it over.
func TestLeaseHasOneHolderAndMovesOn(t *testing.T) {
	_, nodes := threeNodes(t, cluster.Options{LeaseTTL: 3 * time.Second})
	holder := func() *node {
		var held []*node
		for _, n := range nodes {
			if n.cl != nil && n.cl.Status().LeaseHeld {
				held = append(held, n)
			}
		}
		if len(held) != 1 {
			return nil
		}
		return held[0]
	}
	var first *node
	require.Eventually(t, func() bool { first = holder(); return first != nil }, waitFor, 20*time.Millisecond)
	first.stop()
	require.Eventually(t, func() bool {
		h := holder()
		return h != nil && h != first
	}, waitFor, 20*time.Millisecond)
}

// TestEmptyNodeRestoresFromSnapshot: a node whose disk is empty, or whose
// position fell below the stream's retention, restores the newest
// snapshot and catches up from the stream, ending with the same state.
func TestEmptyNodeRestoresFromSnapshot(t *testing.T) {
	servers := syncdtest.StartNATS(t, 1, testSecret)
	o := cluster.Options{StreamMaxBytes: 64 << 10, SnapshotEvery: 200 * time.Millisecond, LeaseTTL: time.Second, JobInterval: time.Hour}
	a := startNode(t, servers[0], "node-a", filepath.Join(t.TempDir(), "syncd.db"), o)
	bPath := filepath.Join(t.TempDir(), "syncd.db")
	b := startNode(t, servers[0], "node-b", bPath, o)
	writeMany(t, a, "phone", 20)
	waitApplied(t, a, b)
	b.stop()

	// Enough writes that the stream drops the messages b has not applied,
	// and a snapshot taken after them.
	writeMany(t, a, "laptop", 400)
	time.Sleep(time.Second) // let a snapshot be taken of the newest state
	writeMany(t, a, "tablet", 5)

	b = startNode(t, servers[0], "node-b", bPath, o)
	waitApplied(t, a, b)
	requireSameState(t, a, b)
	matches, err := filepath.Glob(bPath + ".behind-*")
	require.NoError(t, err)
	require.Len(t, matches, 1, "the data that was behind is kept aside")

	c := startNode(t, servers[0], "node-c", filepath.Join(t.TempDir(), "syncd.db"), o)
	waitApplied(t, a, c)
	requireSameState(t, a, c)
}

// TestNoSnapshotIsAClearError: a node that must restore, in a cluster that
// has no snapshot, says so and changes nothing.
func TestNoSnapshotIsAClearError(t *testing.T) {
	servers := syncdtest.StartNATS(t, 1, testSecret)
	o := cluster.Options{StreamMaxBytes: 64 << 10, SnapshotEvery: time.Hour, CommandKey: testKey}
	a := startNode(t, servers[0], "node-a", filepath.Join(t.TempDir(), "syncd.db"), o)
	writeMany(t, a, "laptop", 400)

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	o.Node, o.Replicas = "node-b", 1
	cl, err := cluster.Connect(ctx, connect(t, servers[0]), o)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "syncd.db")
	_, err = cl.PrepareData(ctx, path)
	require.ErrorIs(t, err, cluster.ErrNoSnapshot)
	_, statErr := os.Stat(path)
	require.True(t, errors.Is(statErr, os.ErrNotExist), "nothing was created")
}

// TestMisconfigurationIsRefused: a stream with other settings, a stream
// syncd did not create, a node whose data belongs to another cluster, and
// servers whose message limit is too small are each refused with an error
// naming the fix, before anything changes.
func TestMisconfigurationIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	servers := syncdtest.StartNATS(t, 1, testSecret)
	nc := connect(t, servers[0])
	path := filepath.Join(t.TempDir(), "syncd.db")
	startNode(t, servers[0], "node-a", path, cluster.Options{}).stop()

	_, err := cluster.Connect(ctx, nc, cluster.Options{Node: "node-b", Replicas: 3, APITimeout: time.Second, CommandKey: testKey})
	require.ErrorIs(t, err, cluster.ErrMisconfigured)
	require.ErrorContains(t, err, "1 replicas, this node is configured for 3")

	// The data of node-a opened for another cluster.
	other := syncdtest.StartNATS(t, 1, testSecret)
	cl, err := cluster.Connect(ctx, connect(t, other[0]), cluster.Options{Node: "node-a", Replicas: 1, CommandKey: testKey})
	require.NoError(t, err)
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{})
	require.NoError(t, err)
	defer db.Close()
	_, err = replication.OpenStore(ctx, db, replication.StoreOptions{ID: cl.ID()})
	require.ErrorIs(t, err, replication.ErrOtherDatabase)

	// A stream of the same name that syncd did not create.
	foreign := syncdtest.StartNATS(t, 1, testSecret)
	fnc := connect(t, foreign[0])
	js, err := jetstream.New(fnc)
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: cluster.StreamName, Subjects: []string{"orders.>"}})
	require.NoError(t, err)
	_, err = cluster.Connect(ctx, fnc, cluster.Options{Node: "node-a", Replicas: 1, CommandKey: testKey})
	require.ErrorIs(t, err, cluster.ErrMisconfigured)
	require.ErrorContains(t, err, "not created by syncd")

	// Servers that refuse messages as large as a command.
	small, err := cluster.StartEmbedded(cluster.EmbeddedOptions{Name: "small", Port: -1, StoreDir: t.TempDir(), MaxPayload: 1 << 20, Secret: testSecret})
	require.NoError(t, err)
	t.Cleanup(func() { small.Shutdown(); small.WaitForShutdown() })
	_, err = cluster.Connect(ctx, connect(t, small), cluster.Options{Node: "node-a", Replicas: 1, CommandKey: testKey})
	require.ErrorIs(t, err, cluster.ErrMisconfigured)
	require.ErrorContains(t, err, "max_payload")
}

// TestDivergentNodeStopsServing: a node whose state digest differs from
// its peers' at a checkpoint stops serving; the peers go on.
func TestDivergentNodeStopsServing(t *testing.T) {
	_, nodes := threeNodes(t, cluster.Options{CheckpointEvery: 4})
	clock := syncproto.NewClock("phone", nil)
	nodes[0].commit(t, batchOf("phone", put(clock, "notes", "k", `1`)))
	waitApplied(t, nodes...)
	// Corrupt node-3's copy of the record behind the cluster's back.
	_, err := nodes[2].db.Exec(`UPDATE records SET version = 41 WHERE key = 'k'`)
	require.NoError(t, err)
	for i := range 8 {
		nodes[i%2].commit(t, batchOf("phone", put(clock, "notes", "k", fmt.Sprintf(`%d`, i+2))))
	}
	require.Eventually(t, func() bool { return !nodes[2].cl.Status().Ready }, waitFor, 20*time.Millisecond)
	var diverged *cluster.DivergedError
	require.ErrorAs(t, nodes[2].cl.Ready(), &diverged)
	require.Equal(t, []string{"node-1", "node-2"}, diverged.Peers, "judged once both peers reported")
	for _, n := range nodes[:2] {
		require.True(t, n.cl.Status().Ready, n.cl.Status().Problem)
	}
}

// TestReadyAgainOnceTheStreamAnswers: a node that waited for quorum (a
// publish found no stream to answer it) is ready again as soon as the
// stream answers, without another write: a node cut off from its peers
// saw its clients move to other nodes and has nothing to publish (nor any
// job to run here: the lease holder's next round is an hour away).
func TestReadyAgainOnceTheStreamAnswers(t *testing.T) {
	dir := t.TempDir()
	eo := cluster.EmbeddedOptions{Name: "nats-1", Port: -1, StoreDir: dir, Secret: testSecret}
	ns, err := cluster.StartEmbedded(eo)
	require.NoError(t, err)
	n := startNode(t, ns, "node-1", filepath.Join(t.TempDir(), "syncd.db"),
		cluster.Options{CommitTimeout: 2 * time.Second, APITimeout: 500 * time.Millisecond, JobInterval: time.Hour})
	writeMany(t, n, "phone", 1)
	require.NoError(t, n.cl.Ready())

	eo.Port = ns.Addr().(*net.TCPAddr).Port
	ns.Shutdown()
	ns.WaitForShutdown()
	clock := syncproto.NewClock("laptop", nil)
	_, err = n.tryCommit(batchOf("laptop", put(clock, "notes", "k", `1`)))
	require.ErrorIs(t, err, cluster.ErrOutcomeUnknown)
	require.ErrorContains(t, n.cl.Ready(), "waiting for cluster quorum")

	ns, err = cluster.StartEmbedded(eo) // the same server, back on its port
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	require.Eventually(t, func() bool { return n.cl.Ready() == nil }, waitFor, 20*time.Millisecond,
		"ready again with no write since the stream came back")
}
