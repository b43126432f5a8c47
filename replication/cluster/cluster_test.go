package cluster_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// testPolicies are the model declarations of these tests' edges (batchFor)
// and nodes.
var testPolicies = replication.Config{"docs": syncproto.PolicyOptimistic}

// waitFor bounds every wait of these tests: generous, since a loaded
// machine elects JetStream leaders slowly.
const waitFor = 60 * time.Second

// testSecret is the cluster secret of every NATS server these tests start.
var testSecret = func() cluster.Secret {
	s, err := cluster.NewSecret()
	if err != nil {
		panic(err)
	}
	return s
}()

// testKey is the command key of every node of these tests: testSecret's.
var testKey = testSecret.CommandKey()

// node is one syncd node's replication: its NATS connection, its store
// and its cluster membership.
type node struct {
	name  string
	path  string
	nc    *nats.Conn
	cl    *cluster.Cluster
	store *replication.Store
	db    *sql.DB
	reg   *prometheus.Registry // the node's metrics, unless the test gave a Registerer
}

// metric is the value of the node's metric name whose label is value (0
// when absent).
func (n *node) metric(t testing.TB, name, label, value string) float64 {
	t.Helper()
	families, err := n.reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					switch {
					case m.GetCounter() != nil:
						return m.GetCounter().GetValue()
					case m.GetGauge() != nil:
						return m.GetGauge().GetValue()
					}
				}
			}
			if label == "" && m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// connect connects to ns over its client listener as the node user of
// testSecret (over TCP: a test restarts a server on its port, which an
// in-process connection would not reach again).
func connect(t testing.TB, ns *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(cluster.NodeUser, testSecret.NodePassword()),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// requireServing requires that n refuses nothing (no divergence, no
// configuration mismatch, nothing unverified) and is ready once any wait
// for quorum passed: on a loaded machine a JetStream call may time out
// (ErrWaitingForQuorum), which is a wait, not a fault of the node.
func requireServing(t testing.TB, n *node) {
	t.Helper()
	require.NoError(t, n.cl.Refuses(), n.name)
	require.Eventually(t, func() bool { return n.cl.Ready() == nil }, waitFor, 20*time.Millisecond, "%s serves", n.name)
}

// startNode joins a node named name, with its database at path, through
// ns, and closes it when the test ends (or earlier with stop).
func startNode(t testing.TB, ns *server.Server, name, path string, o cluster.Options) *node {
	t.Helper()
	return startNodeWith(t, ns, name, path, o, replication.StoreOptions{})
}

// startNodeWith is startNode with the store's options (its ID is the
// cluster's).
func startNodeWith(t testing.TB, ns *server.Server, name, path string, o cluster.Options, so replication.StoreOptions) *node {
	t.Helper()
	return startNodeEdited(t, ns, name, path, o, so, nil)
}

// startNodeEdited is startNodeWith that runs edit, when not nil, on the
// node's database file after PrepareData and before the node opens it: an
// intruder altering the disk of a node being restored.
func startNodeEdited(t testing.TB, ns *server.Server, name, path string, o cluster.Options, so replication.StoreOptions, edit func(path string)) *node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	o.Node = name
	if o.CommandKey == nil {
		o.CommandKey = testKey
	}
	if o.Policies == nil {
		o.Policies = testPolicies
	}
	reg := prometheus.NewRegistry()
	if o.Registerer == nil {
		o.Registerer = reg
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	n := &node{name: name, path: path, nc: connect(t, ns), reg: reg}
	var err error
	n.cl, err = cluster.Connect(ctx, n.nc, o)
	require.NoError(t, err)
	_, err = n.cl.PrepareData(ctx, path)
	require.NoError(t, err)
	if edit != nil {
		edit(path)
	}
	n.db, err = sqlitedb.Open(ctx, path, sqlitedb.Options{})
	require.NoError(t, err)
	so.ID = n.cl.ID()
	n.store, err = replication.OpenStore(ctx, n.db, so)
	require.NoError(t, err)
	require.NoError(t, n.cl.Start(n.store, nil))
	t.Cleanup(n.stop)
	return n
}

func (n *node) stop() {
	if n.cl == nil {
		return
	}
	n.cl.Close()
	n.db.Close()
	n.cl = nil
}

// commit submits b through n and waits for its decision.
func (n *node) commit(t testing.TB, b replication.Batch) replication.Effects {
	t.Helper()
	fx, err := n.tryCommit(b)
	require.NoError(t, err)
	return fx
}

func (n *node) tryCommit(b replication.Batch) (replication.Effects, error) {
	type result struct {
		fx  replication.Effects
		err error
	}
	done := make(chan result, 1)
	err := n.cl.Submit(context.Background(), &b, func(fx replication.Effects, err error) { done <- result{fx, err} })
	if err != nil {
		return replication.Effects{}, err
	}
	select {
	case r := <-done:
		return r.fx, r.err
	case <-time.After(waitFor):
		return replication.Effects{}, fmt.Errorf("no decision within %s", waitFor)
	}
}

// dump is a node's whole replicated state, for comparing replicas.
func (n *node) dump(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, q := range []string{
		`SELECT tenant, model, key, hex(value), version, hlc, deleted, op_id, seq FROM records ORDER BY tenant, model, key`,
		`SELECT seq, tenant, model, key, op_id, op, hex(value), version, wall, logical, origin, client_id, applied_at FROM oplog ORDER BY seq`,
		`SELECT id, tenant, model, key, policy, reason, loser_op_id, winner_op_id, decided_at FROM conflicts ORDER BY id`,
		`SELECT tenant, entries, floor FROM oplog_tenants ORDER BY tenant`,
	} {
		rows, err := n.db.Query(q)
		require.NoError(t, err)
		cols, err := rows.Columns()
		require.NoError(t, err)
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			require.NoError(t, rows.Scan(ptrs...))
			out = append(out, fmt.Sprint(vals...))
		}
		require.NoError(t, rows.Err())
		rows.Close()
	}
	return out
}

// waitApplied waits until every node applied the stream's last message,
// as the stream itself (asked through the first node's connection) tells.
func waitApplied(t testing.TB, nodes ...*node) {
	t.Helper()
	require.Eventually(t, func() bool {
		head, ok := streamLast(nodes[0].nc)
		if !ok {
			return false
		}
		for _, n := range nodes {
			if n.cl.Status().AppliedSeq < head {
				return false
			}
		}
		return true
	}, waitFor, 10*time.Millisecond)
}

// streamLast is the command stream's last seq, asked through nc; false
// when the stream did not answer.
func streamLast(nc *nats.Conn) (uint64, bool) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, cluster.StreamName)
	if err != nil {
		return 0, false
	}
	info, err := s.Info(ctx)
	if err != nil || !cluster.FromLeader(info) {
		return 0, false
	}
	return info.State.LastSeq, true
}

var everything = func(string) bool { return true }

// batchOf admits muts as client of tenant acme sent them at now.
func batchOf(client string, muts ...syncproto.Mutation) replication.Batch {
	return batchFor("acme", client, muts...)
}

// batchFor admits muts as client of tenant sent them at now.
func batchFor(tenant, client string, muts ...syncproto.Mutation) replication.Batch {
	return replication.Admit(replication.Author{Tenant: tenant, ClientID: client, CanWrite: everything},
		muts, testPolicies, time.Now(), time.Minute)
}

func put(clock *syncproto.Clock, model, key, value string) syncproto.Mutation {
	op, err := syncproto.NewOpID()
	if err != nil {
		panic(err)
	}
	return syncproto.Mutation{OpID: op, Model: model, Key: key, Op: syncproto.OpPut, Value: []byte(value), HLC: clock.Now()}
}

// threeNodes starts a 3-server NATS cluster (R3) with a syncd node on each.
func threeNodes(t *testing.T, o cluster.Options) ([]*server.Server, []*node) {
	t.Helper()
	servers := syncdtest.StartNATS(t, 3, testSecret)
	o.Replicas = 3
	var nodes []*node
	for i, ns := range servers {
		nodes = append(nodes, startNode(t, ns, fmt.Sprintf("node-%d", i+1), filepath.Join(t.TempDir(), "syncd.db"), o))
	}
	return servers, nodes
}

// TestReplicasConverge: writes from several clients through all three
// nodes at once end with byte-identical records, oplog and conflict log on
// every node, the same seqs everywhere.
func TestReplicasConverge(t *testing.T) {
	_, nodes := threeNodes(t, cluster.Options{CheckpointEvery: 10})
	var wg sync.WaitGroup
	for c := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := fmt.Sprintf("c%d", c)
			clock := syncproto.NewClock(client, nil)
			n := nodes[c%len(nodes)]
			for i := range 20 {
				b := batchOf(client,
					put(clock, "notes", fmt.Sprintf("k%d", i%5), fmt.Sprintf(`{"c":%d,"i":%d}`, c, i)),
					put(clock, "notes", fmt.Sprintf("own-%d-%d", c, i), `1`))
				fx, err := n.tryCommit(b)
				if err != nil {
					t.Error(err)
					return
				}
				for _, r := range fx.Results {
					if r.Status != syncproto.StatusApplied && r.Status != syncproto.StatusSuperseded {
						t.Errorf("unexpected result %+v", r)
					}
				}
			}
		}()
	}
	wg.Wait()
	waitApplied(t, nodes...)
	var records int
	require.NoError(t, nodes[0].db.QueryRow(`SELECT count(*) FROM records`).Scan(&records))
	require.Equal(t, 5+6*20, records)
	requireSameState(t, nodes...)
	want := nodes[0].cl.Status()
	require.NotEmpty(t, want.Digest)
	for _, n := range nodes {
		st := n.cl.Status()
		require.True(t, st.Ready, st.Problem)
		require.Equal(t, want.AppliedSeq, st.AppliedSeq, "%s: Status reports the applied seq", st.Node)
		require.Equal(t, want.Digest, st.Digest, "%s: Status reports the same digest at the same seq", st.Node)
	}
}

// requireSameState requires every node's replicated state to equal the
// first's, row for row.
func requireSameState(t testing.TB, nodes ...*node) {
	t.Helper()
	want := nodes[0].dump(t)
	for _, n := range nodes[1:] {
		got := n.dump(t)
		for i := range min(len(want), len(got)) {
			require.Equal(t, want[i], got[i], "node %s differs from %s at row %d", n.name, nodes[0].name, i)
		}
		require.Equal(t, len(want), len(got), "node %s has another number of rows than %s", n.name, nodes[0].name)
	}
}

// TestResendToAnotherNodeIsDuplicate: a write whose answer was lost,
// resent through another node, is answered duplicate with its original
// seq, version and HLC: the ledger is global.
func TestResendToAnotherNodeIsDuplicate(t *testing.T) {
	_, nodes := threeNodes(t, cluster.Options{})
	clock := syncproto.NewClock("phone", nil)
	m := put(clock, "notes", "n1", `"hello"`)
	first := nodes[0].commit(t, batchOf("phone", m)).Results[0]
	require.Equal(t, syncproto.StatusApplied, first.Status)
	again := nodes[2].commit(t, batchOf("phone", m)).Results[0]
	require.Equal(t, syncproto.StatusDuplicate, again.Status)
	require.Equal(t, syncproto.StatusApplied, again.OriginalStatus)
	require.Equal(t, first.Seq, again.Seq)
	require.Equal(t, first.Version, again.Version)
	require.Equal(t, first.HLC, again.HLC)
}

// TestOptimisticRaceHasOneWinnerAcrossNodes: two clients on two nodes
// write the same key from the same base version, round after round:
// exactly one wins each round.
func TestOptimisticRaceHasOneWinnerAcrossNodes(t *testing.T) {
	_, nodes := threeNodes(t, cluster.Options{})
	clocks := []*syncproto.Clock{syncproto.NewClock("a", nil), syncproto.NewClock("b", nil)}
	for round := range 100 {
		base := uint64(round)
		results := make([]syncproto.Result, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m := put(clocks[i], "docs", "contested", fmt.Sprintf(`{"round":%d,"by":%d}`, round, i))
				m.BaseVersion = &base
				fx, err := nodes[i].tryCommit(batchOf(clocks[i].Origin(), m))
				if err != nil {
					t.Error(err)
					return
				}
				results[i] = fx.Results[0]
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		var won, lost int
		for _, r := range results {
			switch r.Status {
			case syncproto.StatusApplied:
				won++
				require.Equal(t, base+1, r.Version)
			case syncproto.StatusConflict:
				lost++
				require.Equal(t, base+1, r.Winner.Version)
			}
		}
		require.Equal(t, 1, won, "round %d: %+v", round, results)
		require.Equal(t, 1, lost, "round %d: %+v", round, results)
	}
}

// TestAClientsBatchesApplyInSubmissionOrder: an edge publishes several
// commands at a time, yet the batches one client submits back to back
// (as a session pipelines its pushes) are applied in the order submitted.
func TestAClientsBatchesApplyInSubmissionOrder(t *testing.T) {
	servers := syncdtest.StartNATS(t, 1, testSecret)
	n := startNode(t, servers[0], "node-1", filepath.Join(t.TempDir(), "syncd.db"), cluster.Options{})
	const clients, batches = 4, 40
	var wg sync.WaitGroup
	seqs := make([][]uint64, clients) // each client's oplog seqs, in submission order
	var mu sync.Mutex
	for c := range clients {
		client := fmt.Sprintf("c%d", c)
		clock := syncproto.NewClock(client, nil)
		seqs[c] = make([]uint64, batches)
		for i := range batches {
			b := batchOf(client, put(clock, "notes", fmt.Sprintf("%s-%d", client, i), `1`))
			wg.Add(1)
			require.NoError(t, n.cl.Submit(context.Background(), &b, func(fx replication.Effects, err error) {
				defer wg.Done()
				if err != nil || len(fx.Entries) != 1 {
					t.Errorf("%s batch %d: %v, %d entries", client, i, err, len(fx.Entries))
					return
				}
				mu.Lock()
				seqs[c][i] = fx.Entries[0].Seq
				mu.Unlock()
			}))
		}
	}
	wg.Wait()
	for c := range clients {
		for i := 1; i < batches; i++ {
			require.Less(t, seqs[c][i-1], seqs[c][i], "client c%d: batch %d applied before batch %d", c, i, i-1)
		}
	}
}

// TestFromLeader: only the stream leader's answer is the stream's state; a
// server that sees no leader, or that names another server as leader,
// answers with its own copy.
func TestFromLeader(t *testing.T) {
	peers := func(names ...string) []*jetstream.PeerInfo {
		var out []*jetstream.PeerInfo
		for _, n := range names {
			out = append(out, &jetstream.PeerInfo{Name: n})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		cluster *jetstream.ClusterInfo
		want    bool
	}{
		{"a server alone", nil, true},
		{"the leader", &jetstream.ClusterInfo{Leader: "n1", Replicas: peers("n2", "n3")}, true},
		{"a member that names another leader", &jetstream.ClusterInfo{Leader: "n1", Replicas: peers("n1", "n2")}, false},
		{"a member that sees no leader", &jetstream.ClusterInfo{Replicas: peers("n1", "n2", "n3")}, false},
	} {
		require.Equal(t, tc.want, cluster.FromLeader(&jetstream.StreamInfo{Cluster: tc.cluster}), tc.name)
	}
}

// TestCloseAnswersEverySubmissionTaken: Close stops the publisher while
// sessions still submit. Every Submit either refuses (ErrClosed, or the
// node no longer serving) or has its done called, once: applied, or an
// error that says nothing was known to be applied. No session is left
// waiting for an answer that never comes.
func TestCloseAnswersEverySubmissionTaken(t *testing.T) {
	servers := syncdtest.StartNATS(t, 1, testSecret)
	n := startNode(t, servers[0], "node-1", filepath.Join(t.TempDir(), "syncd.db"), cluster.Options{})
	const submitters, each = 8, 200
	cl := n.cl // n.stop clears n.cl
	var taken, answered atomic.Int64
	var wg sync.WaitGroup
	for c := range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := fmt.Sprintf("c%d", c)
			clock := syncproto.NewClock(client, nil)
			for i := range each {
				b := batchOf(client, put(clock, "notes", fmt.Sprintf("%s-%d", client, i), `1`))
				var once atomic.Bool
				err := cl.Submit(context.Background(), &b, func(replication.Effects, error) {
					if !once.CompareAndSwap(false, true) {
						t.Errorf("%s batch %d answered twice", client, i)
					}
					answered.Add(1)
				})
				if err != nil {
					return // refused: the node is closing
				}
				taken.Add(1)
			}
		}()
	}
	require.Eventually(t, func() bool { return taken.Load() >= submitters*each/4 }, waitFor, time.Millisecond, "submissions taken before Close")
	n.stop()
	wg.Wait()
	deadline := time.Now().Add(waitFor)
	for answered.Load() != taken.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, taken.Load(), answered.Load(), "every submission taken is answered")
}
