package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/replication/cluster"
)

// clusterOptions are the flags of cluster mode (--cluster).
type clusterOptions struct {
	enabled bool
	// An external NATS cluster...
	natsURL     string
	natsCreds   string
	natsTLSCA   string
	natsTLSCert string
	natsTLSKey  string
	// ...or an embedded NATS server.
	natsListen        string
	natsClusterListen string
	natsAdvertise     string
	natsRoutes        stringList
	natsStore         string

	replicas       int
	streamMaxAge   time.Duration
	streamMaxBytes int64
	snapshotEvery  time.Duration
	startTimeout   time.Duration
}

func (c *clusterOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.enabled, "cluster", false, "run as one node of a cluster: every push goes through a NATS JetStream command stream that every node applies (docs/operations.md, Running a cluster)")
	fs.StringVar(&c.natsURL, "nats-url", "", "with --cluster: URLs of an existing NATS cluster (comma-separated); empty runs an embedded NATS server in this process")
	fs.StringVar(&c.natsCreds, "nats-creds", "", "with --nats-url: NATS credentials file")
	fs.StringVar(&c.natsTLSCA, "nats-tls-ca", "", "with --nats-url: CA certificate (PEM) to verify the NATS servers")
	fs.StringVar(&c.natsTLSCert, "nats-tls-cert", "", "with --nats-url: client certificate (PEM) for NATS")
	fs.StringVar(&c.natsTLSKey, "nats-tls-key", "", "with --nats-url: client key (PEM) for NATS")
	fs.StringVar(&c.natsListen, "nats-listen", "127.0.0.1:4222", "embedded NATS: client listener")
	fs.StringVar(&c.natsClusterListen, "nats-cluster-listen", "127.0.0.1:6222", "embedded NATS: route listener the other nodes' NATS servers connect to")
	fs.StringVar(&c.natsAdvertise, "nats-cluster-advertise", "", "embedded NATS: host:port the other nodes' NATS servers are told to dial for a route to this one (default: --nats-cluster-listen); set it when that listener is reached at another address (NAT, a proxy)")
	fs.Var(&c.natsRoutes, "nats-route", "embedded NATS: route URL of another node's NATS server (nats-route://host:port); repeatable")
	fs.StringVar(&c.natsStore, "nats-store", "", "embedded NATS: JetStream directory (default: nats/ beside --data)")
	fs.IntVar(&c.replicas, "replicas", cluster.DefaultReplicas, "NATS servers holding each copy of the command stream (3 survives one loss; 1 for tests)")
	fs.DurationVar(&c.streamMaxAge, "stream-max-age", cluster.DefaultStreamMaxAge, "how long the command stream keeps commands (a node down longer restores from a snapshot)")
	fs.Int64Var(&c.streamMaxBytes, "stream-max-bytes", 0, "cap on the command stream's size in bytes (0: no cap)")
	fs.DurationVar(&c.snapshotEvery, "snapshot-every", cluster.DefaultSnapshotEvery, "how often the lease holder stores a snapshot that new and lagging nodes restore (keep it well within --stream-max-age)")
	fs.DurationVar(&c.startTimeout, "cluster-start-timeout", 2*time.Minute, "how long to wait at start for the cluster's quorum before giving up")
}

func (c *clusterOptions) validate() error {
	if !c.enabled {
		return nil
	}
	if c.natsURL != "" && len(c.natsRoutes) > 0 {
		return errors.New("--nats-route configures the embedded NATS server; with --nats-url the NATS cluster is external")
	}
	if (c.natsTLSCert == "") != (c.natsTLSKey == "") {
		return errors.New("--nats-tls-cert and --nats-tls-key go together")
	}
	if c.natsURL == "" && c.replicas > 1 && len(c.natsRoutes) < c.replicas-1 {
		return fmt.Errorf("--replicas %d needs at least %d --nats-route flags (the other nodes' NATS servers), or --replicas 1", c.replicas, c.replicas-1)
	}
	return nil
}

// membership is this process's cluster membership and what it runs.
type membership struct {
	cluster  *cluster.Cluster
	nc       *nats.Conn
	embedded *server.Server
}

// close releases the NATS connection and stops the embedded server. The
// cluster itself is closed by the server (server.Server.Close).
func (m *membership) close() {
	m.nc.Close()
	if m.embedded != nil {
		m.embedded.Shutdown()
		m.embedded.WaitForShutdown()
	}
}

// joinCluster starts the embedded NATS server (unless --nats-url), connects
// and joins the cluster, waiting up to --cluster-start-timeout for quorum.
func joinCluster(ctx context.Context, o options, log *slog.Logger, reg prometheus.Registerer) (*membership, error) {
	c := o.cluster
	m := &membership{}
	url := c.natsURL
	if url == "" {
		host, port, err := splitHostPort(c.natsListen)
		if err != nil {
			return nil, fmt.Errorf("--nats-listen: %w", err)
		}
		eo := cluster.EmbeddedOptions{Name: o.nodeID, Host: host, Port: port, StoreDir: c.natsStore, Routes: c.natsRoutes,
			ClusterAdvertise: c.natsAdvertise, Logger: log}
		if eo.StoreDir == "" {
			eo.StoreDir = filepath.Join(filepath.Dir(o.data), "nats")
		}
		if c.replicas > 1 || len(c.natsRoutes) > 0 {
			if eo.ClusterHost, eo.ClusterPort, err = splitHostPort(c.natsClusterListen); err != nil {
				return nil, fmt.Errorf("--nats-cluster-listen: %w", err)
			}
		}
		if m.embedded, err = cluster.StartEmbedded(eo); err != nil {
			return nil, err
		}
		url = m.embedded.ClientURL()
	}
	natsOpts := []nats.Option{
		nats.Name("syncd " + o.nodeID), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS connection lost; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("NATS connection restored", "server", nc.ConnectedUrl()) }),
	}
	if c.natsCreds != "" {
		natsOpts = append(natsOpts, nats.UserCredentials(c.natsCreds))
	}
	if c.natsTLSCA != "" {
		natsOpts = append(natsOpts, nats.RootCAs(c.natsTLSCA))
	}
	if c.natsTLSCert != "" {
		natsOpts = append(natsOpts, nats.ClientCert(c.natsTLSCert, c.natsTLSKey))
	}
	var err error
	m.nc, err = nats.Connect(url, natsOpts...)
	if err != nil {
		if m.embedded != nil {
			m.embedded.Shutdown()
		}
		return nil, fmt.Errorf("connect to NATS at %s: %w (is the NATS cluster running, and --nats-url right?)", url, err)
	}
	jctx, cancel := context.WithTimeout(ctx, c.startTimeout)
	defer cancel()
	m.cluster, err = cluster.Connect(jctx, m.nc, cluster.Options{
		Node: o.nodeID, Replicas: c.replicas, StreamMaxAge: c.streamMaxAge, StreamMaxBytes: c.streamMaxBytes, SnapshotEvery: c.snapshotEvery,
		SnapshotDir: filepath.Dir(o.data), Logger: log, Registerer: reg,
		MaxClockSkew: o.maxClockSkew, Policies: o.models, Agreement: agreement(o), JobInterval: o.retentionEvery,
	})
	if err != nil {
		m.close()
		return nil, fmt.Errorf("%w (the other nodes must be running, their NATS routes reachable: --nats-route)", err)
	}
	return m, nil
}

func splitHostPort(addr string) (string, int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("%q: bad port", addr)
	}
	return host, p, nil
}
