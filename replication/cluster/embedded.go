package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedOptions configure a NATS server that syncd runs in its own
// process, so that a cluster of syncd nodes on one host or a few needs no
// other install. Every field but StoreDir has a default.
type EmbeddedOptions struct {
	// Name is the server's name, unique in the NATS cluster (syncd passes
	// its node name).
	Name string
	// Host and Port are the client listener (default 127.0.0.1, 4222;
	// port -1 picks a free one).
	Host string
	Port int
	// ClusterName names the NATS cluster (default "syncd"); ClusterHost and
	// ClusterPort are the route listener; Routes the other servers' route
	// URLs (nats-route://host:port). With no ClusterPort the server runs
	// alone (a cluster of one, replicas 1).
	ClusterName string
	ClusterHost string
	ClusterPort int
	Routes      []string
	// ClusterAdvertise is the host:port the other servers are told to dial
	// for a route to this one (default: the route listener): set it when
	// the route listener is reached at another address (NAT, a proxy).
	// NATS servers pass it on to each other and dial it for a route they
	// were not configured with.
	ClusterAdvertise string
	// StoreDir holds JetStream's files. Required.
	StoreDir string
	// MaxPayload is the largest message the server accepts; default
	// DefaultMaxCommandBytes.
	MaxPayload int32
	// ReadyTimeout bounds the wait for the server's listeners; default 10s.
	ReadyTimeout time.Duration
	Logger       *slog.Logger

	// Secret is the cluster secret. Required: the server admits a client
	// only as NodeUser with the secret's NodePassword, and a route only as
	// RouteUser with its RoutePassword; it dials its Routes with the same
	// route credentials. A server given another secret, or none, cannot
	// join through a route, and a client without the password cannot
	// connect.
	Secret Secret
	// TLS, when set, serves both listeners with TLS: clients verify the
	// server against TLS.CA; routes are mutual TLS (each side presents its
	// certificate and verifies the other's against TLS.CA, including the
	// host name or IP it dialed).
	TLS TLSFiles
	// AllowPlaintext lets a listener bind an address other hosts may reach
	// without TLS (ErrPlaintext otherwise): only on a network that
	// protects the cluster's traffic.
	AllowPlaintext bool
}

// TLSFiles are the PEM files of a node's NATS TLS: its certificate and key,
// and the CA that signed every node's certificate. Zero means no TLS;
// otherwise all three are required.
type TLSFiles struct {
	Cert, Key, CA string
}

// Enabled reports whether any file is set.
func (f TLSFiles) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

func (f TLSFiles) validate() error {
	if f.Enabled() && (f.Cert == "" || f.Key == "" || f.CA == "") {
		return errors.New("NATS TLS needs a certificate, its key and the CA together")
	}
	return nil
}

// tlsTimeout bounds a NATS TLS handshake, in seconds (the server's unit).
const tlsTimeout = 5

// nodePermissions are NodeUser's: publish the commands, call the
// JetStream API, write syncd's buckets and object store (their subjects)
// and answer JetStream's flow control; subscribe to inboxes only.
func nodePermissions() *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{Subject, "$JS.API.>", "$JS.ACK.>", "$JS.FC.>",
			"$KV." + LeaseBucket + ".>", "$KV." + NodesBucket + ".>", "$O." + SnapshotBucket + ".>"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
	}
}

// StartEmbedded starts a NATS server with JetStream in this process and
// waits until it accepts connections. JetStream fsyncs every write before
// acknowledging it (sync_interval: always): an acknowledged write of a
// server that loses power is not lost. Every connection authenticates
// (EmbeddedOptions.Secret); a listener beyond loopback needs TLS unless
// AllowPlaintext (ErrPlaintext). The caller shuts the server down
// (Shutdown, then WaitForShutdown).
func StartEmbedded(o EmbeddedOptions) (*server.Server, error) {
	if o.StoreDir == "" {
		return nil, errors.New("embedded nats: StoreDir is required")
	}
	if !o.Secret.Valid() {
		return nil, errors.New("embedded nats: a cluster secret is required (EmbeddedOptions.Secret)")
	}
	if err := o.TLS.validate(); err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port == 0 {
		o.Port = 4222
	}
	if o.ClusterName == "" {
		o.ClusterName = "syncd"
	}
	if o.ClusterHost == "" {
		o.ClusterHost = o.Host
	}
	if o.MaxPayload == 0 {
		o.MaxPayload = DefaultMaxCommandBytes
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if err := CheckListener("client", o.Host, o.TLS.Enabled(), o.AllowPlaintext); err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	opts := &server.Options{
		ServerName: o.Name, Host: o.Host, Port: o.Port,
		JetStream: true, StoreDir: o.StoreDir, SyncAlways: true,
		MaxPayload: o.MaxPayload, NoSigs: true,
		// A command fills a message; allow a little more for headers.
		MaxPending: 4 * int64(o.MaxPayload),
		Users:      []*server.User{{Username: NodeUser, Password: o.Secret.NodePassword(), Permissions: nodePermissions()}},
	}
	if o.TLS.Enabled() {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: o.TLS.Cert, KeyFile: o.TLS.Key, CaFile: o.TLS.CA})
		if err != nil {
			return nil, fmt.Errorf("embedded nats: client TLS: %w", err)
		}
		opts.TLS, opts.TLSConfig, opts.TLSTimeout = true, tc, tlsTimeout
	}
	if o.ClusterPort != 0 {
		if err := CheckListener("route", o.ClusterHost, o.TLS.Enabled(), o.AllowPlaintext); err != nil {
			return nil, fmt.Errorf("embedded nats: %w", err)
		}
		// NoAdvertise: the syncd node is this server's one client and
		// must not learn the other servers' client addresses: reconnected
		// to another node's server, it would go around its own routes.
		opts.Cluster = server.ClusterOpts{Name: o.ClusterName, Host: o.ClusterHost, Port: o.ClusterPort,
			Advertise: o.ClusterAdvertise, NoAdvertise: true,
			Username: RouteUser, Password: o.Secret.RoutePassword()}
		if o.TLS.Enabled() {
			tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: o.TLS.Cert, KeyFile: o.TLS.Key, CaFile: o.TLS.CA, Verify: true})
			if err != nil {
				return nil, fmt.Errorf("embedded nats: route TLS: %w", err)
			}
			// A route is both a server and a client: it verifies the
			// server it dials against the same CA, as nats-server's own
			// configuration parser does.
			tc.RootCAs = tc.ClientCAs
			opts.Cluster.TLSConfig, opts.Cluster.TLSTimeout = tc, tlsTimeout
		}
		for _, r := range o.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("embedded nats: route %q: %w", r, err)
			}
			if u.User != nil {
				return nil, fmt.Errorf("embedded nats: route %s carries credentials: routes authenticate with the cluster secret", u.Redacted())
			}
			u.User = url.UserPassword(RouteUser, o.Secret.RoutePassword())
			opts.Routes = append(opts.Routes, u)
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	s.SetLogger(natsLogger{o.Logger.With("component", "nats")}, false, false)
	s.Start()
	if !s.ReadyForConnections(o.ReadyTimeout) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready on %s:%d within %s: a port in use, or JetStream could not start (its log says why)", o.Host, o.Port, o.ReadyTimeout)
	}
	return s, nil
}

// natsLogger writes the NATS server's logs to slog.
type natsLogger struct{ l *slog.Logger }

func (n natsLogger) Noticef(format string, v ...any) { n.l.Info(fmt.Sprintf(format, v...)) }
func (n natsLogger) Warnf(format string, v ...any)   { n.l.Warn(fmt.Sprintf(format, v...)) }
func (n natsLogger) Fatalf(format string, v ...any)  { n.l.Error(fmt.Sprintf(format, v...)) }
func (n natsLogger) Errorf(format string, v ...any)  { n.l.Error(fmt.Sprintf(format, v...)) }
func (n natsLogger) Debugf(format string, v ...any)  { n.l.Debug(fmt.Sprintf(format, v...)) }
func (n natsLogger) Tracef(format string, v ...any)  { n.l.Debug(fmt.Sprintf(format, v...)) }
