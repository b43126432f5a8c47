package syncdtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
)

// StartCluster starts n syncd nodes as one cluster and stops them when t
// ends. Each node has its own database and an embedded NATS server; the
// NATS servers form one cluster (the stream has 3 replicas when n >= 3,
// else 1); the nodes share one token file, holding an admin token. cfg is
// every node's configuration (DataPath, Authenticator, NodeID, Registry and
// Cluster are set per node; PeerURLs, when nil, is every node's URL). The NATS servers require the credentials of
// one cluster secret, made per call, which also keys the nodes' command
// authenticator. Each returned Server is a node: Stop and Restart act on it
// alone.
func StartCluster(t testing.TB, n int, cfg server.Config) []*Server {
	t.Helper()
	require.True(t, n == 1 || n >= 3, "a cluster of %d: want 1, or 3 and more", n)
	replicas := 1
	if n >= 3 {
		replicas = 3
	}
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	admin := issue(t, tokens, auth.Principal{Admin: true})
	a, err := auth.NewAuthenticator(tokens, nil)
	require.NoError(t, err)

	secret, err := cluster.NewSecret()
	require.NoError(t, err)
	nats := StartNATS(t, n, secret)
	// Each node's public address is picked up front so that every node
	// can announce all of them (welcome.servers) unless cfg says which.
	addrs := make([]string, n)
	var urls []string
	for i := range n {
		addrs[i] = FreeAddr(t)
		urls = append(urls, "http://"+addrs[i])
	}
	nodes := make([]*Server, n)
	for i := range n {
		node := &Server{TokenPath: tokens, AdminToken: admin, CommandKey: secret.CommandKey(), nats: nats[i], secret: secret, addr: addrs[i]}
		node.join = func(t testing.TB, cfg server.Config) *cluster.Cluster {
			return joinNATS(t, nats[i], secret, cluster.Options{Node: fmt.Sprintf("node-%d", i+1), Replicas: replicas,
				CommandKey: secret.CommandKey(), MaxClockSkew: cfg.MaxClockSkew, Policies: cfg.Policies, Agreement: TokenFileAgreement(tokens),
				Generations: []string{"tokens"},
				Now:         cfg.Now, Registerer: cfg.Registry})
		}
		c := cfg
		c.DataPath = filepath.Join(t.TempDir(), "syncd.db")
		c.Authenticator = a
		c.NodeID = fmt.Sprintf("node-%d", i+1)
		c.Registry = nil
		if c.PeerURLs == nil {
			c.PeerURLs = urls
		}
		nodes[i] = node
		node.start(t, c)
	}
	return nodes
}

// NATS connects to a cluster node's embedded NATS server with the node
// credentials of the cluster secret, as a process that holds the secret
// may (a test's raw client, to publish forged commands); the connection
// closes when t ends.
func (s *Server) NATS(t testing.TB) *nats.Conn {
	t.Helper()
	require.NotNil(t, s.nats, "not a cluster node")
	nc, err := cluster.ConnectEmbedded(s.nats, s.secret)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// TokenFileAgreement is an Options.Agreement that publishes the hash of
// the token file at path (part "tokens") and its generation (part
// cluster.GenerationPart("tokens"), for Options.Generations), as syncd
// does: a node whose file is behind a peer's generation (a revocation it
// missed) refuses to serve once the grace is over. A file that cannot be
// read hashes as its error, at generation 0.
func TokenFileAgreement(path string) func() map[string]string {
	return func() map[string]string {
		data, err := os.ReadFile(path)
		if err != nil {
			data = []byte("unreadable: " + err.Error())
		}
		return map[string]string{"tokens": cluster.HashPart(data),
			cluster.GenerationPart("tokens"): strconv.FormatUint(auth.Generation(data), 10)}
	}
}

// StartNATS starts n embedded NATS servers with JetStream, routed to each
// other when n > 1, all authenticating with secret, and shuts them down
// when the test ends.
func StartNATS(t testing.TB, n int, secret cluster.Secret) []*natsserver.Server {
	t.Helper()
	var routes []string
	ports := make([]int, n)
	if n > 1 {
		for i := range n {
			ports[i] = FreePort(t)
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[i]))
		}
	}
	servers := make([]*natsserver.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			servers[i], errs[i] = cluster.StartEmbedded(cluster.EmbeddedOptions{
				Name: fmt.Sprintf("node-%d", i+1), Port: -1, StoreDir: t.TempDir(),
				ClusterPort: ports[i], Routes: routes, Secret: secret,
				// Three JetStream servers starting at once under -race on
				// a loaded 2-core machine once took over the 10 s default.
				ReadyTimeout: 30 * time.Second,
			})
		}()
	}
	wg.Wait()
	for i, s := range servers {
		require.NoError(t, errs[i])
		t.Cleanup(func() {
			s.Shutdown()
			s.WaitForShutdown()
		})
	}
	return servers
}

// joinNATS connects a node through ns as the node user of secret and joins
// the cluster with o. The connection closes when t ends.
func joinNATS(t testing.TB, ns *natsserver.Server, secret cluster.Secret, o cluster.Options) *cluster.Cluster {
	t.Helper()
	nc, err := cluster.ConnectEmbedded(ns, secret, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*Timeout)
	defer cancel()
	c, err := cluster.Connect(ctx, nc, o)
	require.NoError(t, err)
	return c
}
