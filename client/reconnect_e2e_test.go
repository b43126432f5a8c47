package client_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/soak/faultproxy"
)

// The network comes back, and goes again while the reconnect is still
// dialing or binding: the run is aborted (not failed and retried), no
// replay starts and no push reaches the server. When the network returns
// for good, the writes are replayed.
func TestFlapDuringReconnectAbortsBeforeReplay(t *testing.T) {
	t.Parallel() // mostly waits out probe timeouts
	s := startSyncd(t, server.Config{})
	p := s.proxy(t)
	p.SetMode(faultproxy.Refuse) // offline from the start: no run before the flap
	d := openDevice(t, s, p, t.TempDir(), "phone-1", deviceOptions{})
	d.waitOffline(t)
	ops := []string{d.put(t, "notes", "a", `{"n":1}`), d.put(t, "notes", "b", `{"n":2}`)}
	accepted := metric(t, s.Registry, "syncd_connections_total", "result=accepted")
	pushes := metric(t, s.Registry, "syncd_pushes_total")

	// Every answer from the server now takes a while: probes still succeed,
	// so the network is reported back, but the websocket's upgrade answer
	// and welcome are held in the proxy. Once the server has accepted the
	// websocket, the path dies silently: what is held is lost, and the
	// probes start timing out.
	p.SetDelay(0, time.Second)
	p.SetMode(faultproxy.Pass)
	require.Eventually(t, func() bool {
		return metric(t, s.Registry, "syncd_connections_total", "result=accepted") > accepted
	}, waitFor, pollTick, "the reconnect never reached the server")
	p.SetMode(faultproxy.Blackhole)
	d.waitStatus(t, "offline again", func(st client.Status) bool { return !st.Online })

	require.Eventually(t, func() bool {
		return metric(t, d.registry, "syncd_client_reconnect_outcomes_total", "result=aborted") == 1
	}, waitFor, pollTick, "the run in progress was not aborted")
	require.Zero(t, metric(t, d.registry, "syncd_client_reconnect_outcomes_total", "result=reconnected"))
	require.Zero(t, metric(t, d.registry, "syncd_client_reconnect_step_failures_total"),
		"the run was cut short by the offline report, not by a step failing")
	require.Zero(t, metric(t, d.registry, "syncd_client_replay_runs_total"), "a replay ran")
	require.Zero(t, metric(t, d.registry, "syncd_client_replays_total"), "a replay pass ran")
	require.Equal(t, pushes, metric(t, s.Registry, "syncd_pushes_total"), "a push reached the server")
	require.Equal(t, len(ops), d.status(t).Pending)

	p.SetDelay(0, 0)
	p.SetMode(faultproxy.Pass)
	d.waitSynced(t)
	d.requireApplied(t, ops)
	s.requireAppliedOnce(t, ops)
	require.Eventually(t, func() bool {
		return metric(t, d.registry, "syncd_client_reconnect_outcomes_total", "result=reconnected") == 1
	}, waitFor, pollTick, "the run after the flap never reported reconnected")
	require.Equal(t, float64(1), metric(t, d.registry, "syncd_client_replay_runs_total", "result=completed"))
}

// With several server URLs, the client connects through whichever answers
// and moves to the next when the one it used becomes unreachable.
func TestMovesToNextServerURL(t *testing.T) {
	s := startSyncd(t, server.Config{})
	first, second := s.proxy(t), s.proxy(t)
	first.SetMode(faultproxy.Refuse)
	d := openDevice(t, s, first, t.TempDir(), "phone-1", deviceOptions{tweak: func(c *client.Config) {
		c.ServerURLs = []string{"http://" + first.Addr(), "http://" + second.Addr()}
	}})
	d.requireApplied(t, []string{d.put(t, "notes", "a", `{"n":1}`)}) // only the second path is up

	// The second path dies; the first comes back.
	first.SetMode(faultproxy.Pass)
	second.SetMode(faultproxy.Refuse)
	second.ResetAll()
	d.requireApplied(t, []string{d.put(t, "notes", "b", `{"n":2}`)}) // only the first path is up
}
