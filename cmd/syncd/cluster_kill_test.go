package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
)

// killsEnv sets how many nodes TestClusterProcessKills kills (default
// defaultKills, the leader then a follower, as `make test` runs it; `make
// cluster-test` runs 4, `make cluster-chaos` 20).
const (
	killsEnv     = "SYNCD_CLUSTER_KILLS"
	defaultKills = 2
)

// TestClusterProcessKills runs three syncd processes with embedded NATS
// (R3) under writers spread across them, and kills a node with SIGKILL
// again and again: the command stream's leader, then a follower, each
// restarted on its own disk before the next kill. Every acknowledged
// write must be in every node's oplog exactly once, nothing twice, and
// every node must end at the same stream seq with the same digest. How
// long writers took to resume after each kill is printed, not asserted.
func TestClusterProcessKills(t *testing.T) {
	kills := defaultKills
	if v := os.Getenv(killsEnv); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, killsEnv)
		require.True(t, n > 0 && n <= 100, "%s=%d: want 1 to 100", killsEnv, n)
		kills = n
	}
	pc := startProcCluster(t)
	l := startLoad(t, pc, 6, 10)
	defer l.stop()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))

	var resumes []time.Duration
	byRole := map[string][]time.Duration{}
	for k := range kills {
		time.Sleep(1500 * time.Millisecond) // load between kills
		leader := pc.streamLeader(t)
		victim := pc.node(leader)
		require.NotNil(t, victim, "leader %q is not a node", leader)
		role := "leader"
		if k%2 == 1 {
			role = "follower"
			var followers []*procNode
			for _, n := range pc.nodes {
				if n.name != leader {
					followers = append(followers, n)
				}
			}
			victim = followers[rng.IntN(len(followers))]
		}
		killedAt := time.Now()
		victim.kill(t)
		t.Logf("kill %d: SIGKILL %s (%s)", k+1, victim.name, role)
		time.Sleep(time.Second)
		victim.start(t)
		victim.waitReady(t)
		pc.waitCaughtUp(t, victim)
		// A liveness bound, not the resume figure (printed below): in a
		// 20-kill run one writer took more than 10 s after the node's
		// return, once.
		for i := 0; i < 300; i++ { // bounded: 30 s after the node is back
			if d, ok := l.resumeAfter(killedAt); ok {
				resumes = append(resumes, d)
				byRole[role] = append(byRole[role], d)
				t.Logf("kill %d: writers resumed %s after it", k+1, d.Round(time.Millisecond))
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		require.Len(t, resumes, k+1, "kill %d: some writer had no push acknowledged within 30 s of %s's return", k+1, victim.name)
	}
	require.NoError(t, l.stop())

	pc.requireOnceEverywhere(t, l)
	t.Logf("writers resumed after %d kills: %s; leader kills %s; follower kills %s",
		kills, distribution(resumes), distribution(byRole["leader"]), distribution(byRole["follower"]))
	var moves int
	for _, w := range l.writers {
		moves += w.moves
	}
	t.Logf("%d writers moved node %d times", len(l.writers), moves)
}

// waitCaughtUp waits until n applied at least what the other nodes had
// applied when it came back, so that the next kill leaves a quorum of
// current replicas.
func (pc *procCluster) waitCaughtUp(t testing.TB, n *procNode) {
	t.Helper()
	var target uint64
	for _, o := range pc.nodes {
		if st, ok := pc.selfStatus(o); ok && o != n {
			target = max(target, st.AppliedSeq)
		}
	}
	deadline := time.Now().Add(procStartTimeout)
	for time.Now().Before(deadline) {
		if st, ok := pc.selfStatus(n); ok && st.AppliedSeq >= target {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s did not catch up to stream seq %d", n.name, target)
}

// requireOnceEverywhere waits for the nodes to converge (same applied seq,
// same digest) and requires every node's oplog to be the same, with every
// write the writers saw acknowledged in it exactly once, at the seq,
// version and hlc they were told, and no op id twice.
func (pc *procCluster) requireOnceEverywhere(t testing.TB, l *load) {
	t.Helper()
	oplogs, st := pc.oplogsAtOneSeq(t)
	t.Logf("converged at stream seq %d, digest %.16s", st.AppliedSeq, st.Digest)
	first := oplogs[0]
	count := make(map[string]int, len(first))
	bySeq := make(map[string]uint64, len(first))
	for _, e := range first {
		count[e.OpID]++
		bySeq[e.OpID] = e.Seq
	}
	for op, n := range count {
		require.Equal(t, 1, n, "op %s applied %d times", op, n)
	}
	var acked int
	for _, w := range l.writers {
		for _, a := range w.acked {
			acked++
			require.Equal(t, 1, count[a.opID], "%s: acknowledged op %s is in the oplog %d times", w.id, a.opID, count[a.opID])
			require.Equal(t, a.seq, bySeq[a.opID], "%s: op %s acknowledged at seq %d", w.id, a.opID, a.seq)
		}
	}
	require.NotZero(t, acked)
	for i, n := range pc.nodes[1:] {
		other := oplogs[i+1]
		require.Equal(t, len(first), len(other), "%s's oplog length", n.name)
		require.True(t, slices.EqualFunc(first, other, func(a, b adminapi.OplogEntry) bool {
			return a.Seq == b.Seq && a.OpID == b.OpID && a.Version == b.Version && a.HLC == b.HLC && string(a.Value) == string(b.Value)
		}), "%s's oplog differs from %s's", n.name, pc.nodes[0].name)
	}
	t.Logf("%d acknowledged writes, %d oplog entries, identical on %d nodes", acked, len(first), len(pc.nodes))
}

// oplogsAtOneSeq reads every node's oplog once the nodes converged, and
// again until every node's oplog ends at the same seq: a node may still
// publish a push its writer gave up on (its publish retries outlive the
// writer) after the nodes first agreed. The stream's own seq is no guide:
// the lease holder's jobs (every minute) move it without touching the
// oplog, and reading three large oplogs under the race detector takes
// longer than that.
func (pc *procCluster) oplogsAtOneSeq(t testing.TB) ([][]adminapi.OplogEntry, adminapi.Node) {
	t.Helper()
	for range 10 { // bounded: a late publish is one of a few pushes in flight
		st := pc.waitConverged(t)
		start := time.Now()
		var oplogs [][]adminapi.OplogEntry
		for _, n := range pc.nodes {
			oplogs = append(oplogs, pc.admin(n).Oplog(t, ""))
		}
		t.Logf("read %d nodes' oplogs (%d entries each) in %s", len(oplogs), len(oplogs[0]), time.Since(start).Round(time.Millisecond))
		if slices.IndexFunc(oplogs, func(o []adminapi.OplogEntry) bool { return oplogHead(o) != oplogHead(oplogs[0]) }) < 0 {
			return oplogs, st
		}
	}
	t.Fatal("the nodes' oplogs kept growing while they were read")
	return nil, adminapi.Node{}
}

// oplogHead is the seq of an oplog's last entry, 0 when it is empty.
func oplogHead(o []adminapi.OplogEntry) uint64 {
	if len(o) == 0 {
		return 0
	}
	return o[len(o)-1].Seq
}

// distribution formats p50, p90 and max of ds.
func distribution(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("n=%d p50=%s p90=%s max=%s", len(s), q(0.5).Round(time.Millisecond), q(0.9).Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}
