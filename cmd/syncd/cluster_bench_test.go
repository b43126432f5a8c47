package main

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
)

// Shape of BenchmarkClusterVsSingle: the issue's "16 concurrent clients
// pushing batches of 100", each measured for benchWindow after
// benchWarmup.
const (
	benchClients = 16
	benchBatch   = 100
	benchWarmup  = time.Second
	benchWindow  = 5 * time.Second
)

// BenchmarkClusterVsSingle measures, in one run and on the same machine,
// a single syncd process against a 3-node cluster of processes (R3,
// embedded NATS), each under benchClients writers pushing batches of
// benchBatch new keys (spread over the nodes for the cluster): mutations
// acknowledged per second, the ratio cluster/single, and the p50/p99 ack
// latency of a push. Then it kills the cluster's stream leader under the
// same load and reports how long until every writer had a push
// acknowledged again (resume_ms).
func BenchmarkClusterVsSingle(b *testing.B) {
	single := startProcSingle(b, "--log-level", "warn")
	cl := startProcCluster(b, "--log-level", "warn")
	var s, c loadStats
	for b.Loop() {
		s.add(measureLoad(b, single))
		c.add(measureLoad(b, cl))
	}
	b.ReportMetric(s.rate(), "single_mut/s")
	b.ReportMetric(c.rate(), "cluster_mut/s")
	b.ReportMetric(c.rate()/s.rate(), "ratio")
	b.ReportMetric(ms(s.quantile(0.5)), "single_p50_ms")
	b.ReportMetric(ms(s.quantile(0.99)), "single_p99_ms")
	b.ReportMetric(ms(c.quantile(0.5)), "cluster_p50_ms")
	b.ReportMetric(ms(c.quantile(0.99)), "cluster_p99_ms")

	l := startLoad(b, cl, benchClients, benchBatch)
	time.Sleep(2 * benchWarmup)
	leader := cl.node(cl.streamLeader(b))
	killed := time.Now()
	leader.kill(b)
	var resume time.Duration
	for range 300 { // bounded: 30 s
		if d, ok := l.resumeAfter(killed); ok {
			resume = d
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(b, l.stop())
	require.NotZero(b, resume, "writers did not resume within 30 s of killing the stream leader")
	b.ReportMetric(ms(resume), "resume_ms")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// loadStats accumulates measureLoad's windows.
type loadStats struct {
	mutations int
	took      time.Duration
	lat       []time.Duration
}

func (s *loadStats) add(o loadStats) {
	s.mutations += o.mutations
	s.took += o.took
	s.lat = append(s.lat, o.lat...)
}

func (s *loadStats) rate() float64 { return float64(s.mutations) / s.took.Seconds() }

func (s *loadStats) quantile(q float64) time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	l := slices.Clone(s.lat)
	slices.Sort(l)
	return l[min(len(l)-1, int(q*float64(len(l))))]
}

// measureLoad runs benchClients writers on pc for benchWarmup +
// benchWindow and counts the pushes acknowledged inside the window.
func measureLoad(b *testing.B, pc *procCluster) loadStats {
	b.Helper()
	l := startLoad(b, pc, benchClients, benchBatch)
	from := time.Now().Add(benchWarmup)
	to := from.Add(benchWindow)
	time.Sleep(time.Until(to))
	require.NoError(b, l.stop())
	st := loadStats{took: benchWindow}
	for _, w := range l.writers {
		for i, at := range w.acks {
			if at.After(from) && !at.After(to) {
				st.mutations += w.batch
				st.lat = append(st.lat, w.lat[i])
			}
		}
	}
	require.NotZero(b, st.mutations, "nothing acknowledged")
	return st
}

// startProcSingle starts one syncd process in single-node mode, as a
// procCluster of one node.
func startProcSingle(t testing.TB, extra ...string) *procCluster {
	t.Helper()
	dir := t.TempDir()
	pc := &procCluster{tokens: filepath.Join(dir, "tokens.json")}
	var err error
	pc.adminToken, err = auth.Issue(pc.tokens, auth.Principal{Admin: true}, time.Now())
	require.NoError(t, err)
	listen, admin := syncdtest.FreeAddr(t), syncdtest.FreeAddr(t)
	n := &procNode{name: "single", dir: dir, url: "http://" + listen, adminURL: "http://" + admin, logPath: filepath.Join(dir, "single.log")}
	n.args = append([]string{"--node-id", n.name, "--data", filepath.Join(dir, "syncd.db"), "--tokens", pc.tokens,
		"--listen", listen, "--admin-listen", admin}, extra...)
	pc.nodes = []*procNode{n}
	t.Cleanup(func() { n.kill(t) })
	n.start(t)
	n.waitReady(t)
	return pc
}
