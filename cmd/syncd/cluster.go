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
	// The cluster secret every node holds (cluster.Secret).
	secretFile string
	// TLS of the embedded server's listeners, or of the connection to an
	// external NATS cluster; plaintext beyond loopback is refused unless
	// insecurePlaintext.
	natsTLSCA         string
	natsTLSCert       string
	natsTLSKey        string
	insecurePlaintext bool
	// An external NATS cluster...
	natsURL          string
	natsCreds        string
	natsUser         string
	natsPasswordFile string
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
	// What an operator holds during an upgrade: how often the records
	// check runs, and the highest command stream format this node
	// announces (0: the release's latest).
	recordsCheckEvery time.Duration
	maxFormat         int
	tokensGrace       time.Duration
}

func (c *clusterOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.enabled, "cluster", false, "run as one node of a cluster: every push goes through a NATS JetStream command stream that every node applies (docs/operations.md, Running a cluster)")
	fs.StringVar(&c.natsURL, "nats-url", "", "with --cluster: URLs of an existing NATS cluster (comma-separated); empty runs an embedded NATS server in this process")
	fs.StringVar(&c.secretFile, "cluster-secret", "", "with --cluster: the cluster secret file (mode 0600, the same on every node; create it with `syncd cluster-secret --out FILE`): the embedded NATS servers' client and route passwords and the command authenticator's key derive from it")
	fs.StringVar(&c.natsCreds, "nats-creds", "", "with --nats-url: NATS credentials file (a user's JWT and nkey seed)")
	fs.StringVar(&c.natsUser, "nats-user", "", "with --nats-url: NATS user name (its password in --nats-password-file)")
	fs.StringVar(&c.natsPasswordFile, "nats-password-file", "", "with --nats-url: file holding the --nats-user password (mode 0600)")
	fs.StringVar(&c.natsTLSCA, "nats-tls-ca", "", "CA certificate (PEM): embedded NATS verifies its route peers against it; with --nats-url, the NATS servers")
	fs.StringVar(&c.natsTLSCert, "nats-tls-cert", "", "certificate (PEM): embedded NATS serves its client and route listeners with it (with --nats-tls-key and --nats-tls-ca); with --nats-url, the client certificate")
	fs.StringVar(&c.natsTLSKey, "nats-tls-key", "", "private key (PEM) of --nats-tls-cert")
	fs.BoolVar(&c.insecurePlaintext, "nats-insecure-plaintext", false, "INSECURE: allow an embedded NATS listener beyond loopback without TLS, or a --nats-url beyond loopback without TLS or credentials; anyone on the network then reads every tenant's writes (logged as a warning at every start)")
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
	fs.DurationVar(&c.recordsCheckEvery, "cluster-records-check-every", cluster.DefaultRecordsCheckEvery, "how often the lease holder publishes a records check (every node reads its whole records table once and the nodes compare what they read); nodes digest at most one a minute, whoever publishes them")
	fs.DurationVar(&c.tokensGrace, "cluster-tokens-grace", cluster.DefaultGenerationGrace, fmt.Sprintf("how long a node whose token file or JWT deny list is behind another node's (an older generation: a change that has not reached it yet) keeps serving before it refuses to; up to %s, the longest a node that missed a revocation admits the revoked token (docs/operations.md, Tokens on a cluster)", cluster.MaxGenerationGrace))
	fs.IntVar(&c.maxFormat, "cluster-max-format", 0, fmt.Sprintf("the highest command stream format this node announces, %d to %d (0: this release's latest, %d); a lower one holds the cluster version, and what the later formats bring, off until the flag is lifted (docs/operations.md, Upgrades)", cluster.FormatBase, cluster.LatestFormat, cluster.LatestFormat))
}

func (c *clusterOptions) validate() error {
	if !c.enabled {
		return nil
	}
	if c.maxFormat != 0 && (c.maxFormat < cluster.FormatBase || c.maxFormat > cluster.LatestFormat) {
		return fmt.Errorf("--cluster-max-format %d: this release understands formats %d to %d (0: the latest)", c.maxFormat, cluster.FormatBase, cluster.LatestFormat)
	}
	if c.tokensGrace <= 0 || c.tokensGrace > cluster.MaxGenerationGrace {
		return fmt.Errorf("--cluster-tokens-grace %s: want a positive duration up to %s", c.tokensGrace, cluster.MaxGenerationGrace)
	}
	if c.recordsCheckEvery <= 0 {
		return fmt.Errorf("--cluster-records-check-every %s: want a positive duration", c.recordsCheckEvery)
	}
	if c.natsURL != "" && len(c.natsRoutes) > 0 {
		return errors.New("--nats-route configures the embedded NATS server; with --nats-url the NATS cluster is external")
	}
	if (c.natsTLSCert == "") != (c.natsTLSKey == "") {
		return errors.New("--nats-tls-cert and --nats-tls-key go together")
	}
	if c.secretFile == "" {
		return errors.New("--cluster needs --cluster-secret FILE, the same on every node (create one with `syncd cluster-secret --out FILE` and copy it to each node)")
	}
	if c.natsURL == "" && c.replicas > 1 && len(c.natsRoutes) < c.replicas-1 {
		return fmt.Errorf("--replicas %d needs at least %d --nats-route flags (the other nodes' NATS servers), or --replicas 1", c.replicas, c.replicas-1)
	}
	if c.natsURL == "" {
		return c.checkEmbedded()
	}
	if err := c.external().Check(); err != nil {
		return fmt.Errorf("--nats-url: %w", err)
	}
	return nil
}

// checkEmbedded checks the embedded NATS server's flags: TLS files go
// together, and a listener beyond loopback has TLS unless the operator
// allowed plaintext (cluster.ErrPlaintext).
func (c *clusterOptions) checkEmbedded() error {
	if c.natsUser != "" || c.natsPasswordFile != "" || c.natsCreds != "" {
		return errors.New("--nats-creds, --nats-user and --nats-password-file are for --nats-url; the embedded NATS servers authenticate with --cluster-secret")
	}
	tls := c.tlsFiles()
	if tls.Enabled() && (tls.Cert == "" || tls.CA == "") {
		return errors.New("embedded NATS TLS needs --nats-tls-cert, --nats-tls-key and --nats-tls-ca together")
	}
	host, _, err := net.SplitHostPort(c.natsListen)
	if err != nil {
		return fmt.Errorf("--nats-listen %q: %w", c.natsListen, err)
	}
	if err := cluster.CheckListener("client", host, tls.Enabled(), c.insecurePlaintext); err != nil {
		return fmt.Errorf("--nats-listen %s: %w (or pass --nats-insecure-plaintext)", c.natsListen, err)
	}
	if c.routed() {
		if host, _, err = net.SplitHostPort(c.natsClusterListen); err != nil {
			return fmt.Errorf("--nats-cluster-listen %q: %w", c.natsClusterListen, err)
		}
		if err := cluster.CheckListener("route", host, tls.Enabled(), c.insecurePlaintext); err != nil {
			return fmt.Errorf("--nats-cluster-listen %s: %w (or pass --nats-insecure-plaintext)", c.natsClusterListen, err)
		}
	}
	return nil
}

// routed reports whether the embedded server listens for routes.
func (c *clusterOptions) routed() bool { return c.replicas > 1 || len(c.natsRoutes) > 0 }

func (c *clusterOptions) tlsFiles() cluster.TLSFiles {
	return cluster.TLSFiles{Cert: c.natsTLSCert, Key: c.natsTLSKey, CA: c.natsTLSCA}
}

func (c *clusterOptions) external() cluster.ExternalNATS {
	return cluster.ExternalNATS{URLs: c.natsURL, CredsFile: c.natsCreds, User: c.natsUser, PasswordFile: c.natsPasswordFile,
		TLSCA: c.natsTLSCA, TLSCert: c.natsTLSCert, TLSKey: c.natsTLSKey, AllowPlaintext: c.insecurePlaintext}
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
	secret, err := cluster.LoadSecret(c.secretFile)
	if err != nil {
		return nil, fmt.Errorf("--cluster-secret: %w", err)
	}
	if c.insecurePlaintext {
		log.Warn("INSECURE: --nats-insecure-plaintext: NATS traffic beyond loopback may be unencrypted or unauthenticated; anyone on that network can read every tenant's writes")
	}
	log.Info("cluster secret loaded", "fingerprint", secret.Fingerprint(), "nats_tls", c.tlsFiles().Enabled())
	m := &membership{}
	natsOpts := []nats.Option{
		nats.Name("syncd " + o.nodeID), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS connection lost; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("NATS connection restored", "server", nc.ConnectedUrl()) }),
	}
	where := c.natsURL
	if c.natsURL == "" {
		if m.embedded, err = startEmbedded(o, secret, log); err != nil {
			return nil, err
		}
		where = "the embedded NATS server"
		m.nc, err = cluster.ConnectEmbedded(m.embedded, secret, natsOpts...)
	} else {
		ext, xerr := c.external().Options()
		if xerr != nil {
			return nil, fmt.Errorf("--nats-url: %w", xerr)
		}
		m.nc, err = nats.Connect(c.natsURL, append(natsOpts, ext...)...)
	}
	if err != nil {
		if m.embedded != nil {
			m.embedded.Shutdown()
		}
		return nil, fmt.Errorf("connect to NATS at %s: %w (is the NATS cluster running, and --nats-url and its credentials right?)", where, err)
	}
	jctx, cancel := context.WithTimeout(ctx, c.startTimeout)
	defer cancel()
	m.cluster, err = cluster.Connect(jctx, m.nc, cluster.Options{
		Node: o.nodeID, Replicas: c.replicas, StreamMaxAge: c.streamMaxAge, StreamMaxBytes: c.streamMaxBytes, SnapshotEvery: c.snapshotEvery,
		SnapshotDir: filepath.Dir(o.data), Logger: log, Registerer: reg, CommandKey: secret.CommandKey(),
		MaxClockSkew: o.maxClockSkew, Policies: o.models, Agreement: agreement(o), AgreementAbsent: agreementAbsent(), JobInterval: o.retentionEvery,
		RecordsCheckEvery: c.recordsCheckEvery, Format: c.maxFormat,
		Generations: generationParts, GenerationGrace: c.tokensGrace,
	})
	if err != nil {
		m.close()
		return nil, fmt.Errorf("%w (the other nodes must be running, their NATS routes reachable: --nats-route, with the same --cluster-secret)", err)
	}
	return m, nil
}

// startEmbedded starts this node's NATS server from the flags.
func startEmbedded(o options, secret cluster.Secret, log *slog.Logger) (*server.Server, error) {
	c := o.cluster
	host, port, err := splitHostPort(c.natsListen)
	if err != nil {
		return nil, fmt.Errorf("--nats-listen: %w", err)
	}
	eo := cluster.EmbeddedOptions{Name: o.nodeID, Host: host, Port: port, StoreDir: c.natsStore, Routes: c.natsRoutes,
		ClusterAdvertise: c.natsAdvertise, Logger: log, Secret: secret, TLS: c.tlsFiles(), AllowPlaintext: c.insecurePlaintext}
	if eo.StoreDir == "" {
		eo.StoreDir = filepath.Join(filepath.Dir(o.data), "nats")
	}
	if c.routed() {
		if eo.ClusterHost, eo.ClusterPort, err = splitHostPort(c.natsClusterListen); err != nil {
			return nil, fmt.Errorf("--nats-cluster-listen: %w", err)
		}
	}
	return cluster.StartEmbedded(eo)
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
