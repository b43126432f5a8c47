package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// rollingWriters push one new key per write through whichever node is up,
// resending a write (the same op) through another node when the one it
// went to closed or did not answer, as a device would; they stop at
// maxWrites or when stopped.
type rollingWriters struct {
	mu    sync.Mutex
	up    []*node // nil while a node restarts
	acked []string
	stop  chan struct{}
	done  sync.WaitGroup
	pause time.Duration // the longest time a write waited for an answer, resends included
}

const maxRollingWrites = 5000

func (w *rollingWriters) pick(i int) *cluster.Cluster {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range w.up {
		if n := w.up[(i+k)%len(w.up)]; n != nil {
			return n.cl
		}
	}
	return nil
}

func (w *rollingWriters) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

func (w *rollingWriters) set(i int, n *node) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.up[i] = n
}

func (w *rollingWriters) run(t *testing.T, writers int) {
	for g := range writers {
		w.done.Add(1)
		go func() {
			defer w.done.Done()
			client := fmt.Sprintf("writer-%d", g)
			clock := syncproto.NewClock(client, nil)
			for i := 0; i < maxRollingWrites/writers; i++ {
				select {
				case <-w.stop:
					return
				default:
				}
				m := put(clock, "notes", fmt.Sprintf("%s-%d", client, i), `"v"`)
				start := time.Now()
				for attempt := g + i; ; attempt++ {
					if w.submit(w.pick(attempt), m, client) {
						break
					}
					select {
					case <-w.stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
				w.mu.Lock()
				w.acked = append(w.acked, m.Key)
				w.pause = max(w.pause, time.Since(start))
				w.mu.Unlock()
			}
		}()
	}
}

// submit pushes m through cl and reports whether it was decided.
func (w *rollingWriters) submit(cl *cluster.Cluster, m syncproto.Mutation, client string) bool {
	if cl == nil {
		return false
	}
	b := batchOf(client, m)
	done := make(chan error, 1)
	if err := cl.Submit(context.Background(), &b, func(fx replication.Effects, err error) {
		// A resend of a write applied before is answered duplicate.
		if err == nil {
			if st := fx.Results[0].Status; st != syncproto.StatusApplied && st != syncproto.StatusDuplicate {
				err = fmt.Errorf("status %s", st)
			}
		}
		done <- err
	}); err != nil {
		return false
	}
	select {
	case err := <-done:
		return err == nil
	case <-time.After(10 * time.Second): // the node closed under it
		return false
	}
}

// streamJobs returns the seq of every job command in the stream, by kind.
func streamJobs(t *testing.T, n *node) map[cluster.JobKind][]uint64 {
	t.Helper()
	js, err := jetstream.New(n.nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	s, err := js.Stream(ctx, cluster.StreamName)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	jobs := map[cluster.JobKind][]uint64{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		msg, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		var c cluster.Command
		require.NoError(t, json.Unmarshal(msg.Data, &c))
		if c.Job != nil {
			jobs[c.Job.Kind] = append(jobs[c.Job.Kind], seq)
		}
	}
	return jobs
}

// TestRollingUpgradeUsesANewFormatOnlyOnceEveryNodeAnnouncesIt: a
// three-node cluster whose node-1 is of an older release (it understands
// formats up to FormatBase) is restarted one node at a time, node-1 last
// and on the current release, while writers push through whichever nodes
// are up. Until node-1 announces the current format the cluster version
// stays FormatBase and no records check is published, though the lease
// holder asks for one every 200 ms; once it does, the version moves and
// records checks run. No write is lost, no node stops or waits, and every
// node ends with the same digest and state.
func TestRollingUpgradeUsesANewFormatOnlyOnceEveryNodeAnnouncesIt(t *testing.T) {
	servers := syncdtest.StartNATS(t, 3, testSecret)
	current := cluster.Options{Replicas: 3, RecordsCheckEvery: 200 * time.Millisecond, RecordsCheckGap: 100 * time.Millisecond,
		JobInterval: time.Hour, CheckpointEvery: 25}
	older := current
	older.Format = cluster.FormatBase
	paths := make([]string, 3)
	nodes := make([]*node, 3)
	for i := range nodes {
		paths[i] = filepath.Join(t.TempDir(), "syncd.db")
		o := current
		if i == 0 {
			o = older
		}
		nodes[i] = startNode(t, servers[i], fmt.Sprintf("node-%d", i+1), paths[i], o)
	}
	versions := func(want int) bool {
		for _, n := range nodes {
			if n.cl.Status().ClusterVersion != want {
				return false
			}
		}
		return true
	}
	require.Eventually(t, func() bool { return versions(cluster.FormatBase) }, waitFor, 20*time.Millisecond)

	w := &rollingWriters{up: slices.Clone(nodes), stop: make(chan struct{})}
	w.run(t, 4)
	stopped := false
	stopWriters := func() {
		if !stopped {
			stopped = true
			close(w.stop)
			w.done.Wait()
		}
	}
	defer stopWriters()
	ackedBy := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return len(w.acked) >= n
		}, waitFor, 10*time.Millisecond)
	}
	ackedBy(50)

	restart := func(i int, o cluster.Options) {
		t.Helper()
		w.set(i, nil)
		nodes[i].stop()
		ackedBy(w.count() + 20) // writes go on through the others
		nodes[i] = startNode(t, servers[i], fmt.Sprintf("node-%d", i+1), paths[i], o)
		requireReady(t, nodes[i])
		w.set(i, nodes[i])
	}
	restart(1, current)
	restart(2, current)
	for _, n := range nodes {
		require.Equal(t, cluster.FormatBase, n.cl.Status().ClusterVersion, "%s: node-1 still announces the older format", n.name)
	}
	require.Equal(t, 0.0, nodes[0].metric(t, "syncd_cluster_waiting_for_upgrade", "", ""), "the older node never met a command it cannot apply")
	require.Empty(t, streamJobs(t, nodes[1])[cluster.JobCheckRecords], "no records check while a node does not understand it")

	// node-1, last, on the current release. Its older self's status still
	// counts while it restarts: nothing new is published meanwhile.
	w.set(0, nil)
	nodes[0].stop()
	ackedBy(w.count() + 20)
	head, ok := streamLast(nodes[1].nc)
	require.True(t, ok)
	require.Empty(t, streamJobs(t, nodes[1])[cluster.JobCheckRecords], "no records check while node-1 restarts")
	nodes[0] = startNode(t, servers[0], "node-1", paths[0], current)
	requireReady(t, nodes[0])
	w.set(0, nodes[0])
	require.Eventually(t, func() bool { return versions(cluster.LatestFormat) }, waitFor, 20*time.Millisecond)
	for _, n := range nodes {
		require.EqualValues(t, cluster.LatestFormat, n.metric(t, "syncd_cluster_version", "", ""), n.name)
	}
	require.Eventually(t, func() bool { return len(streamJobs(t, nodes[1])[cluster.JobCheckRecords]) > 0 }, waitFor, 50*time.Millisecond,
		"records checks once every node announces them")
	checks := streamJobs(t, nodes[1])[cluster.JobCheckRecords]
	require.Greater(t, checks[0], head, "the first records check comes after the last node announced the format")
	require.Eventually(t, func() bool {
		return nodes[0].metric(t, "syncd_cluster_records_checks_total", "result", "match") > 0
	}, waitFor, 20*time.Millisecond, "the nodes compared their records")
	ackedBy(w.count() + 20)

	stopWriters()
	waitApplied(t, nodes...)
	requireSameState(t, nodes...)
	// Records checks go on every 200 ms: the nodes meet at one seq
	// between two of them.
	require.Eventually(t, func() bool {
		want := nodes[0].cl.Status()
		for _, n := range nodes[1:] {
			if st := n.cl.Status(); st.AppliedSeq != want.AppliedSeq || st.Digest != want.Digest {
				return false
			}
		}
		return true
	}, waitFor, 5*time.Millisecond, "every node at the same seq with the same digest")
	for _, n := range nodes {
		require.NoError(t, n.cl.Refuses(), n.name)
		requireReady(t, n) // a loaded machine may make a node wait for quorum a moment
		require.Equal(t, 0.0, n.metric(t, "syncd_cluster_node_failed", "", ""), n.name)
		require.Equal(t, 0.0, n.metric(t, "syncd_cluster_records_checks_total", "result", "mismatch"), n.name)
		var keys int
		require.NoError(t, n.db.QueryRow(`SELECT count(*) FROM records WHERE model = 'notes'`).Scan(&keys))
		require.Equal(t, len(w.acked), keys, "%s: every acknowledged write, once", n.name)
	}
	for _, key := range w.acked {
		var n int
		require.NoError(t, nodes[2].db.QueryRow(`SELECT count(*) FROM records WHERE model = 'notes' AND key = ?`, key).Scan(&n))
		require.Equal(t, 1, n, key)
	}
	t.Logf("%d writes acknowledged through three rolling restarts; longest wait of a write %s; %d records checks after seq %d",
		len(w.acked), w.pause, len(checks), head)
}

// requireReady waits until n serves, naming why not when it does not.
func requireReady(t *testing.T, n *node) {
	t.Helper()
	var last error
	require.Eventually(t, func() bool { last = n.cl.Ready(); return last == nil }, waitFor, 20*time.Millisecond)
	if last != nil {
		t.Fatalf("%s does not serve: %v", n.name, last)
	}
}
