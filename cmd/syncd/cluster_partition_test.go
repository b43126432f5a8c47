package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/soak/faultproxy"
	"github.com/syncd-dev/syncd/syncproto"
)

// TestClusterProcessRouteCut cuts one node of a 3-process cluster off from
// the other two (every NATS route to and from it goes through a fault
// proxy, refused and reset) under writers spread across the nodes. The
// cut-off node must not acknowledge a write, its writers move to the
// healthy nodes and keep being acknowledged, its /readyz fails, and once
// the cut heals it is ready again and catches up: every acknowledged write
// once on every node, same digest.
func TestClusterProcessRouteCut(t *testing.T) {
	const cut = 2 // node-3
	proxies := map[[2]int]*faultproxy.Proxy{}
	// Every node advertises a route address that refuses: NATS servers
	// pass each route's advertised address on, and a server not configured
	// with that route dials it, which would make a route around the
	// proxies that the cut leaves up.
	sink, err := faultproxy.New("127.0.0.1:1", faultproxy.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { sink.Close() })
	sink.SetMode(faultproxy.Refuse)
	pc := startProcClusterVia(t, func(from, to int, addr string) string {
		p, err := faultproxy.New(addr, faultproxy.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		proxies[[2]int{from, to}] = p
		return p.Addr()
	}, "--nats-cluster-advertise", sink.Addr())
	l := startLoad(t, pc, 6, 10)
	defer l.stop()
	time.Sleep(2 * time.Second)

	var cutRoutes []*faultproxy.Proxy
	for k, p := range proxies {
		if k[0] == cut || k[1] == cut {
			cutRoutes = append(cutRoutes, p)
		}
	}
	for _, p := range cutRoutes {
		p.SetMode(faultproxy.Refuse)
		p.ResetAll()
	}
	cutAt := time.Now()
	t.Logf("cut %s off from the other nodes", pc.nodes[cut].name)

	// A push straight to the cut-off node is never acknowledged while
	// the cut lasts: it cannot reach the stream's quorum.
	probe := pc.member(t, "probe")
	clock := syncproto.NewClock("probe", time.Now)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	conn, err := dialPush(ctx, pc.nodes[cut], probe, "probe", clock)
	if err == nil {
		op, oerr := syncproto.NewOpID()
		require.NoError(t, oerr)
		ans, perr := conn.roundTrip(ctx, &syncproto.Push{ID: "probe", Mutations: []syncproto.Mutation{
			{OpID: op, Model: "notes", Key: "probe", Op: syncproto.OpPut, Value: []byte(`1`), HLC: clock.Now()}}})
		t.Logf("a push straight to the cut-off node: answer %+v, error %v", ans, perr)
		if perr == nil {
			res, ok := ans.(*syncproto.PushResult)
			require.False(t, ok && len(res.Results) == 1 && res.Results[0].Status == syncproto.StatusApplied,
				"the cut-off node acknowledged a write: %+v", ans)
		}
		conn.close()
	}
	cancel()

	// Every writer is acknowledged again after its push to the cut-off
	// node timed out: by a healthy node, since the cut-off one cannot.
	movedBy := cutAt.Add(pushTimeout)
	var resumed bool
	for range 400 { // bounded: 40 s
		if _, resumed = l.resumeAfter(movedBy); resumed {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.True(t, resumed, "some writer was not acknowledged by a healthy node during the cut")
	var unready bool
	for range 300 { // bounded: 30 s
		if unready = !pc.nodes[cut].ready(); unready {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.True(t, unready, "the cut-off node's /readyz still answers ready")

	for _, p := range cutRoutes {
		p.SetMode(faultproxy.Pass)
	}
	t.Logf("healed the cut after %s", time.Since(cutAt).Round(time.Millisecond))
	time.Sleep(3 * time.Second) // load after the heal
	require.NoError(t, l.stop())
	// Every node ready again (the cut-off one with no write of its own
	// after the heal), at the stream's head with the same digest.
	pc.requireOnceEverywhere(t, l)
	var moves int
	for _, w := range l.writers {
		moves += w.moves
	}
	require.NotZero(t, moves, "the cut-off node's writers moved")
}
