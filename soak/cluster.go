package soak

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/soak/faultproxy"
)

// Bounds of a cluster run.
const (
	// MaxNodes bounds Config.Nodes: every node is an OS process with an
	// embedded NATS server on a machine shared with the clients.
	MaxNodes = 5
	// clusterReadyTimeout bounds a cluster node's start, its quorum wait
	// and catch-up included (a single node's is syncdReadyTimeout).
	clusterReadyTimeout = 90 * time.Second
	// convergeTimeout bounds the wait, after quiescence, for every node to
	// apply the same stream sequence with the same digest.
	convergeTimeout = 90 * time.Second
)

// proxySet is one client's network path: a fault proxy in front of every
// node. A fault on the path applies to every proxy of the set, so a client
// cannot dodge its own flap by moving to another node; a node kill is
// dodged by moving, which is what the clients must do.
type proxySet struct {
	nodes []*faultproxy.Proxy // indexed by node
}

func newProxySet(targets []string) (*proxySet, error) {
	ps := &proxySet{}
	for _, t := range targets {
		p, err := faultproxy.New(t, faultproxy.Options{})
		if err != nil {
			ps.Close()
			return nil, err
		}
		ps.nodes = append(ps.nodes, p)
	}
	return ps, nil
}

// urls lists the client's server URLs, starting at node first so clients
// spread over the nodes.
func (ps *proxySet) urls(first int) []string {
	var out []string
	for i := range ps.nodes {
		out = append(out, "http://"+ps.nodes[(first+i)%len(ps.nodes)].Addr())
	}
	return out
}

func (ps *proxySet) each(f func(p *faultproxy.Proxy)) {
	for _, p := range ps.nodes {
		f(p)
	}
}

func (ps *proxySet) Close()                    { ps.each(func(p *faultproxy.Proxy) { p.Close() }) }
func (ps *proxySet) SetMode(m faultproxy.Mode) { ps.each(func(p *faultproxy.Proxy) { p.SetMode(m) }) }
func (ps *proxySet) SetDelay(up, down time.Duration) {
	ps.each(func(p *faultproxy.Proxy) { p.SetDelay(up, down) })
}
func (ps *proxySet) SetThrottle(bps int) { ps.each(func(p *faultproxy.Proxy) { p.SetThrottle(bps) }) }
func (ps *proxySet) ClearCuts()          { ps.each(func(p *faultproxy.Proxy) { p.ClearCuts() }) }

func (ps *proxySet) CutAfter(dir faultproxy.Direction, n int64) {
	ps.each(func(p *faultproxy.Proxy) { p.CutAfter(dir, n) })
}

// CutNextAfter cuts the next connection through any of the set's proxies
// (one pending cut on each).
func (ps *proxySet) CutNextAfter(dir faultproxy.Direction, n int64) {
	ps.each(func(p *faultproxy.Proxy) { p.CutNextAfter(dir, n) })
}

// ResetAll resets every live connection of the set and returns how many.
func (ps *proxySet) ResetAll() int {
	n := 0
	ps.each(func(p *faultproxy.Proxy) { n += p.ResetAll() })
	return n
}

// cuts is the connections the set's cuts aborted.
func (ps *proxySet) cuts() int64 {
	var n int64
	ps.each(func(p *faultproxy.Proxy) { n += p.Stats().Cuts })
	return n
}

// routes are the NATS routes of a cluster, each through a fault proxy:
// proxies[from][to] carries node from's route to node to.
type routes struct {
	proxies [][]*faultproxy.Proxy
	sink    *faultproxy.Proxy
}

// newRoutes puts a proxy in front of every node's route listener for every
// other node and returns the flags of every node: its routes, and the
// route address it advertises, a sink that refuses every connection. NATS
// servers tell each other the advertised address of every route they make,
// and one that was not configured with that route dials it: the real
// listener would be a route around the proxies, which a cut leaves up.
func newRoutes(listeners []string) (*routes, [][]string, error) {
	n := len(listeners)
	r := &routes{proxies: make([][]*faultproxy.Proxy, n)}
	sink, err := faultproxy.New(listeners[0], faultproxy.Options{})
	if err != nil {
		return nil, nil, err
	}
	sink.SetMode(faultproxy.Refuse)
	r.sink = sink
	flags := make([][]string, n)
	for from := range n {
		flags[from] = []string{"--nats-cluster-advertise", sink.Addr()}
		r.proxies[from] = make([]*faultproxy.Proxy, n)
		for to := range n {
			if to == from {
				continue
			}
			p, err := faultproxy.New(listeners[to], faultproxy.Options{})
			if err != nil {
				r.Close()
				return nil, nil, err
			}
			r.proxies[from][to] = p
			flags[from] = append(flags[from], "--nats-route", "nats-route://"+p.Addr())
		}
	}
	return r, flags, nil
}

// cut refuses and resets every route to and from node i (heal undoes it).
func (r *routes) cut(i int) {
	r.touching(i, func(p *faultproxy.Proxy) {
		p.SetMode(faultproxy.Refuse)
		p.ResetAll()
	})
}

func (r *routes) heal(i int) { r.touching(i, func(p *faultproxy.Proxy) { p.SetMode(faultproxy.Pass) }) }

func (r *routes) touching(i int, f func(p *faultproxy.Proxy)) {
	for from, row := range r.proxies {
		for to, p := range row {
			if p != nil && (from == i || to == i) {
				f(p)
			}
		}
	}
}

func (r *routes) Close() {
	if r.sink != nil {
		r.sink.Close()
	}
	for _, row := range r.proxies {
		for _, p := range row {
			if p != nil {
				p.Close()
			}
		}
	}
}

// clusterArgs are node i's flags beyond a single syncd's: its id, its
// embedded NATS server's listeners, the cluster secret and its routes.
func clusterArgs(i int, natsAddr, routeAddr, secretFile string, routeFlags []string) []string {
	return append([]string{"--cluster", "--node-id", nodeName(i), "--cluster-secret", secretFile, "--nats-listen", natsAddr,
		"--nats-cluster-listen", routeAddr, "--cluster-start-timeout", clusterReadyTimeout.String()}, routeFlags...)
}

func nodeName(i int) string { return fmt.Sprintf("node-%d", i+1) }

// clusterSelf is node s's own cluster status from its admin API.
func (s *syncdProc) clusterSelf(ctx context.Context, name string) (adminapi.Node, error) {
	st, err := s.status(ctx)
	if err != nil {
		return adminapi.Node{}, err
	}
	if st.Cluster != nil {
		for _, n := range st.Cluster.Nodes {
			if n.Node == name {
				return n, nil
			}
		}
	}
	return adminapi.Node{}, fmt.Errorf("%s: no cluster status of itself", name)
}

// converge waits, within convergeTimeout, until every node is ready and has
// applied the stream to its last message (as the stream itself tells) with
// the same digest: every node's records are then equal. It returns the
// nodes' last statuses, one line each, and whether they agreed.
func converge(ctx context.Context, nodes []*syncdProc) ([]string, bool) {
	deadline := time.Now().Add(convergeTimeout)
	for {
		var lines []string
		var sts []adminapi.Node
		head, err := streamLast(ctx, nodes)
		if err != nil {
			lines = append(lines, fmt.Sprintf("the stream's last seq: %v", err))
		}
		for i, n := range nodes {
			st, err := n.clusterSelf(ctx, nodeName(i))
			if err != nil {
				lines = append(lines, fmt.Sprintf("%s: %v", nodeName(i), err))
				continue
			}
			sts = append(sts, st)
			lines = append(lines, fmt.Sprintf("%s: ready %t applied %d of %d, digest %s %s", st.Node, st.Ready, st.AppliedSeq, head, st.Digest, st.Problem))
		}
		agreed := err == nil && len(sts) == len(nodes)
		for _, st := range sts {
			agreed = agreed && st.Ready && st.AppliedSeq == head && st.Digest == sts[0].Digest
		}
		if agreed || time.Now().After(deadline) {
			return lines, agreed
		}
		select {
		case <-ctx.Done():
			return append(lines, ctx.Err().Error()), false
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// streamLast is the command stream's last seq, asked through the first
// node whose NATS server answers.
func streamLast(ctx context.Context, nodes []*syncdProc) (uint64, error) {
	err := errors.New("no node")
	for _, n := range nodes {
		var last uint64
		if last, err = askStreamLast(ctx, n.natsAddr, n.natsPassword); err == nil {
			return last, nil
		}
	}
	return 0, err
}

func askStreamLast(ctx context.Context, natsAddr, password string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	nc, err := nats.Connect("nats://"+natsAddr, nats.Timeout(2*time.Second), nats.UserInfo(cluster.NodeUser, password))
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	s, err := js.Stream(ctx, cluster.StreamName)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	if !cluster.FromLeader(info) {
		return 0, errors.New("the command stream's leader did not answer")
	}
	return info.State.LastSeq, nil
}

// joinLines is for the event log.
func joinLines(lines []string) string { return strings.Join(lines, "; ") }
