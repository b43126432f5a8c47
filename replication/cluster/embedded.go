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
}

// StartEmbedded starts a NATS server with JetStream in this process and
// waits until it accepts connections. JetStream fsyncs every write before
// acknowledging it (sync_interval: always): an acknowledged write of a
// server that loses power is not lost. The caller shuts the server down
// (Shutdown, then WaitForShutdown).
func StartEmbedded(o EmbeddedOptions) (*server.Server, error) {
	if o.StoreDir == "" {
		return nil, errors.New("embedded nats: StoreDir is required")
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
	opts := &server.Options{
		ServerName: o.Name, Host: o.Host, Port: o.Port,
		JetStream: true, StoreDir: o.StoreDir, SyncAlways: true,
		MaxPayload: o.MaxPayload, NoSigs: true,
		// A command fills a message; allow a little more for headers.
		MaxPending: 4 * int64(o.MaxPayload),
	}
	if o.ClusterPort != 0 {
		// NoAdvertise: the syncd node is this server's one client and
		// must not learn the other servers' client addresses: reconnected
		// to another node's server, it would go around its own routes.
		opts.Cluster = server.ClusterOpts{Name: o.ClusterName, Host: o.ClusterHost, Port: o.ClusterPort,
			Advertise: o.ClusterAdvertise, NoAdvertise: true}
		for _, r := range o.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("embedded nats: route %q: %w", r, err)
			}
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
