package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/internal/buildinfo"
	"github.com/syncd-dev/syncd/internal/datalock"
	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// options are syncd's command-line settings. Every flag can also be set by
// an environment variable named SYNCD_ plus the flag name in upper snake
// case (--admin-listen is SYNCD_ADMIN_LISTEN); a flag on the command line
// wins over the environment. Repeatable flags take a comma-separated list
// from the environment (SYNCD_MODEL=notes=lww,todos=optimistic).
type options struct {
	listen          string
	adminListen     string
	data            string
	tokens          string
	devTokens       bool
	nodeID          string
	synchronous     string
	maxLogPages     int64
	models          replication.Config
	valueVersions   server.ValueVersionDecls
	scopes          replication.Scopes
	maxScopeValues  int
	origins         stringList
	peerURLs        stringList
	maxClockSkew    time.Duration
	maxConnections  int
	maxConnsPerAddr int
	quotas          server.Quotas
	frameBudget     int64
	tlsCert         string
	tlsKey          string
	adminTLSCert    string
	adminTLSKey     string
	adminPlaintext  bool
	logFormat       string
	logLevel        slog.Level
	shutdownTimeout time.Duration
	sloObjective    float64
	startupTimeout  time.Duration
	sloPushLatency  time.Duration
	retention       server.Retention
	retentionEvery  time.Duration
	cluster         clusterOptions
	jwt             jwtOptions
	version         bool
	limits          limitOptions
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// listFlags take several values from one environment variable.
var listFlags = map[string]bool{"model": true, "allowed-origin": true, "nats-route": true, "tenant-weight": true, "peer-url": true}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("syncd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&o.version, "version", false, "print the build (release version, source revision, Go toolchain) and exit")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address of the sync, snapshot, health and metrics listener")
	fs.StringVar(&o.adminListen, "admin-listen", "127.0.0.1:8081", "address of the admin API listener (keep it on loopback); empty disables it")
	fs.StringVar(&o.data, "data", "var/syncd.db", "SQLite database file (created with its directory if missing)")
	fs.StringVar(&o.tokens, "tokens", "var/tokens.json", "token file (see syncctl token issue); syncd refuses to start without one unless --dev-tokens or JWT verification (--jwt-*) is configured")
	fs.BoolVar(&o.devTokens, "dev-tokens", false, "development only: when the token file is missing, generate one with a client token for every model and an admin token, and log both once")
	fs.StringVar(&o.nodeID, "node-id", server.DefaultNodeID, "this server's name (welcome, and the origin of its clock)")
	fs.StringVar(&o.synchronous, "synchronous", "FULL", "SQLite synchronous level: FULL (acknowledged writes survive a power cut) or NORMAL (survive a crash only)")
	fs.Int64Var(&o.maxLogPages, "max-log-pages", sqlitedb.DefaultMaxLogPages, "bound of the write-ahead log (the data file + \"-wal\") in 4 KiB pages: from it the writer checkpoints the rest so the log starts over, and unless a long read pins it, it never grows past twice it plus one write")
	fs.Var(&o.models, "model", "a model's conflict policy as NAME=POLICY (lww or optimistic; a hook needs a Go program embedding the server package); repeatable; undeclared models get --default-policy")
	fs.DurationVar(&o.retention.LedgerMaxAge, "ledger-max-age", 0, "keep each tenant's replay-ledger decisions at least this long after they were decided (default 168h)")
	fs.IntVar(&o.retention.LedgerMaxEntries, "ledger-max-entries", 0, "keep at most this many replay-ledger decisions per tenant (default 1000000)")
	fs.DurationVar(&o.retention.Oplog.MaxAge, "oplog-max-age", 0, "compact oplog entries older than this; a client behind them resyncs from a snapshot (default 168h; negative: no age bound)")
	fs.Int64Var(&o.retention.Oplog.MaxEntries, "oplog-max-entries", 0, "keep at most this many oplog entries of each tenant: one tenant's writes never compact another's, and only a device whose own tenant's entries after its cursor were compacted resyncs (default 1000000 per tenant; negative: no count bound)")
	fs.DurationVar(&o.retention.Conflicts.MaxAge, "conflicts-max-age", 0, "prune conflict-log rows older than this (default 168h; negative: no age bound)")
	fs.Int64Var(&o.retention.Conflicts.MaxEntries, "conflicts-max-entries", 0, "keep at most this many conflict-log rows per tenant (default 10000; negative: no count bound)")
	fs.DurationVar(&o.retentionEvery, "retention-interval", 0, "how often retention runs (default 1m); with --cluster, how often the lease holder publishes the retention jobs every node applies")
	fs.IntVar(&o.maxConnsPerAddr, "max-connections-per-address", server.DefaultMaxConnectionsPerAddress, "cap on TCP connections one IP address holds open on each listener (public and admin, counted apart); negative: no cap (behind a load balancer every peer has its address)")
	fs.Float64Var(&o.quotas.TokenMutationsPerSecond, "token-mutations-per-second", server.DefaultTokenMutationsPerSecond, "mutations per second one token may push over all its sessions (every other frame counts one); negative: no limit (the default: one device is bound by the commit rate, and the committer's fair order per tenant protects the others)")
	fs.IntVar(&o.quotas.TokenMutationBurst, "token-mutation-burst", server.DefaultTokenMutationBurst, "burst of --token-mutations-per-second (at least max_batch, 500)")
	fs.Float64Var(&o.quotas.TenantMutationsPerSecond, "tenant-mutations-per-second", server.DefaultTenantMutationsPerSecond, "mutations per second one tenant's tokens may push together, a hard quota for plans; negative: no limit (the default: the committer's fair order, --tenant-weight, shares the node)")
	fs.IntVar(&o.quotas.TenantMutationBurst, "tenant-mutation-burst", server.DefaultTenantMutationBurst, "burst of --tenant-mutations-per-second (at least max_batch, 500)")
	fs.IntVar(&o.quotas.MaxConnectionsPerToken, "max-connections-per-token", server.DefaultMaxConnectionsPerToken, "cap on open websocket sessions per token; negative: no cap")
	fs.IntVar(&o.quotas.MaxConnectionsPerTenant, "max-connections-per-tenant", 0, "cap on open websocket sessions of one tenant's tokens together (default half of --max-connections); negative: no cap")
	fs.Int64Var(&o.frameBudget, "frame-budget", server.DefaultFrameBudgetBytes, "bytes of frames being read, decoded or applied at once, over all sessions; beyond it sessions wait unread (at least one 4 MiB frame)")
	fs.Int64Var(&o.quotas.TokenFrameBytes, "token-frame-bytes", server.DefaultTokenFrameBytes, "share of --frame-budget one token's sessions may hold; beyond it the token's next frame waits unread (at least one 4 MiB frame; negative: no cap)")
	fs.Int64Var(&o.quotas.TenantFrameBytes, "tenant-frame-bytes", server.DefaultTenantFrameBytes, "share of --frame-budget one tenant's tokens may hold together (at least one 4 MiB frame; negative: no cap)")
	fs.StringVar(&o.adminTLSCert, "admin-tls-cert", "", "PEM certificate for the admin listener (with --admin-tls-key it serves HTTPS)")
	fs.StringVar(&o.adminTLSKey, "admin-tls-key", "", "PEM private key for --admin-tls-cert")
	fs.BoolVar(&o.adminPlaintext, "admin-allow-plaintext", false, "serve the admin API without TLS on a non-loopback --admin-listen (only on a network that protects it: an admin token reads every tenant's data)")
	fs.Func("default-policy", "policy of models no --model declares: lww, optimistic, or none to refuse writes to them (invalid_model) (default lww)", func(v string) error {
		return o.models.Set(replication.AnyModel + "=" + v)
	})
	fs.Var(&o.peerURLs, "peer-url", "a public base URL through which devices reach this database (this node's, and on a cluster every node's); repeatable; welcome announces them so a device configured with one URL can fail over (PROTOCOL.md 5.2, servers)")
	fs.Func("model-version", "a model's current value version as NAME=VERSION (PROTOCOL.md 5.3): writes of other versions are upcast by --upcast steps or refused needs_upgrade; repeatable", o.valueVersions.SetCurrent)
	fs.Func("scope", "declare partial sync (PROTOCOL.md 19): scope NAME covers each MODEL, whose values' top-level FIELD holds the row's scope value, as NAME=MODEL.FIELD[,MODEL.FIELD...]; repeatable", o.scopes.Set)
	fs.Func("membership", "rows of MODEL (covered by scope NAME) grant their scope value to the user their USERFIELD names, as NAME=MODEL:USERFIELD; repeatable, one per scope", o.scopes.SetMembership)
	fs.IntVar(&o.maxScopeValues, "max-scope-values", syncproto.DefaultMaxScopeValues, "the most scope values one subscription may follow (too_many_scope_values beyond)")
	fs.Func("upcast", "one step turning a model's value of VERSION into VERSION+1, as NAME@VERSION=rename:FROM:TO, NAME@VERSION=default:FIELD:JSON or NAME@VERSION=drop:FIELD; steps of one version apply in the order given; repeatable", o.valueVersions.SetUpcast)
	fs.Var(&o.origins, "allowed-origin", "a browser origin allowed to connect, as a host[:port] pattern (*.example.com, localhost:*) or with its scheme (https://app.example.com); repeatable; the server's own host is always allowed, and native clients send no origin (PROTOCOL.md section 1)")
	fs.DurationVar(&o.maxClockSkew, "max-clock-skew", time.Minute, "how far ahead of the server's clock a mutation's timestamp may be")
	fs.IntVar(&o.maxConnections, "max-connections", server.DefaultMaxConnections, "cap on open websocket sessions")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "TLS certificate file (PEM); with --tls-key, the public listener serves HTTPS/WSS")
	fs.StringVar(&o.tlsKey, "tls-key", "", "TLS private key file (PEM)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 15*time.Second, "how long a graceful shutdown may take before sessions are cut")
	fs.DurationVar(&o.startupTimeout, "startup-timeout", 0, "how long the boot (cluster quorum, database open and migrations) may take before syncd exits non-zero; /startupz answers 503 until it is over (default 60s, plus --cluster-start-timeout in cluster mode)")
	fs.Float64Var(&o.sloObjective, "slo-objective", server.DefaultSLOObjective, "objective of the push availability and push latency SLIs: the share of pushes that should be answered without a server failure, and in time (0.999 is 99.9%; the error budget is the rest)")
	fs.DurationVar(&o.sloPushLatency, "slo-push-latency", server.DefaultSLOPushLatency, "a push answered later than this after its arrival is a bad event of the push latency SLI")
	o.limits.register(fs)
	o.cluster.register(fs)
	o.jwt.register(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if err := applyEnv(fs, getenv); err != nil {
		return o, err
	}
	if o.maxLogPages <= 0 {
		return o, fmt.Errorf("--max-log-pages %d: want a positive number of pages", o.maxLogPages)
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return o, fmt.Errorf("--log-format %q: want text or json", o.logFormat)
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return o, errors.New("--tls-cert and --tls-key go together")
	}
	if (o.adminTLSCert == "") != (o.adminTLSKey == "") {
		return o, errors.New("--admin-tls-cert and --admin-tls-key go together")
	}
	if err := checkAdminListen(o); err != nil {
		return o, err
	}
	if o.models.Uses(syncproto.PolicyHook) {
		return o, errors.New("--model NAME=hook needs a Go hook: embed the server package to use it")
	}
	if err := o.cluster.validate(); err != nil {
		return o, err
	}
	return o, nil
}

// applyEnv sets every flag not given on the command line from its SYNCD_*
// environment variable, when that is set.
func applyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		name := "SYNCD_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		v := getenv(name)
		if v == "" {
			return
		}
		values := []string{v}
		if listFlags[f.Name] {
			values = strings.Split(v, ",")
		}
		for _, v := range values {
			if e := fs.Set(f.Name, strings.TrimSpace(v)); e != nil {
				err = fmt.Errorf("%s: %w", name, e)
				return
			}
		}
	})
	return err
}

func newLogger(o options, w io.Writer) *slog.Logger {
	ho := &slog.HandlerOptions{Level: o.logLevel}
	if o.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}

// errShowVersion: --version asked for the build, which main prints on
// standard output.
var errShowVersion = errors.New("show version")

// versionLine is what --version prints.
func versionLine() string {
	b := buildinfo.Read()
	return fmt.Sprintf("syncd %s (%s)", b.String(), b.GoVersion)
}

// errNoTokenFile: syncd was started without a token file and without
// --dev-tokens.
var errNoTokenFile = errors.New("no token file")

// ensureTokens checks that the token file exists. When it does not, it
// refuses (errNoTokenFile, naming the fix) unless dev is set; then it
// creates a development token file: one client token (tenant "dev", client
// "dev-client", every model) and one admin token, logged once, here (the
// file keeps only hashes), with the commands that use them written to
// hint, ready to paste.
func ensureTokens(path string, dev bool, log *slog.Logger, hint io.Writer) error {
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if !dev {
		return fmt.Errorf("%w at %s: issue tokens with `syncctl token issue --tokens %s --admin` (and one per device), or start with --dev-tokens on a development machine", errNoTokenFile, path, path)
	}
	now := time.Now()
	clientToken, err := auth.Issue(path, auth.Principal{Tenant: "dev", ClientID: "dev-client", Read: []string{auth.Wildcard}, Write: []string{auth.Wildcard}}, now)
	if err != nil {
		return err
	}
	admin, err := auth.Issue(path, auth.Principal{Admin: true}, now)
	if err != nil {
		return err
	}
	credential := client.FormatCredential("dev-client", clientToken)
	log.Warn("no token file: generated development tokens; they are shown only this once",
		"file", path, "credential", credential, "client_token", clientToken, "client_id", "dev-client", "tenant", "dev", "admin_token", admin)
	fmt.Fprintf(hint, `
Development tokens (shown only this once; %s keeps only their hashes). Try, in another terminal:
  go run ./examples/notes --credential %s add shopping "milk, eggs"
  go run ./examples/notes --credential %s sync
  SYNCCTL_TOKEN=%s go run ./cmd/syncctl status

`, path, credential, credential, admin)
	return nil
}

// listener is one HTTP server of syncd and how it ends.
type listener struct {
	name      string
	srv       *http.Server
	ln        net.Listener
	cert, key string // PEM files: serve TLS; "" serves plain HTTP
}

// errPlaintextAdmin: the admin API would be served without TLS on an
// address other machines can reach.
var errPlaintextAdmin = errors.New("plaintext admin API on a non-loopback address")

// checkAdminListen refuses a non-loopback admin address without TLS unless
// the operator allowed it explicitly: an admin token reads every tenant's
// values, and plain HTTP shows it to the network.
func checkAdminListen(o options) error {
	if o.adminListen == "" || o.adminTLSCert != "" || o.adminPlaintext {
		return nil
	}
	host, _, err := net.SplitHostPort(o.adminListen)
	if err != nil {
		return fmt.Errorf("--admin-listen %q: %w", o.adminListen, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("%w: --admin-listen %s; serve it with --admin-tls-cert and --admin-tls-key, keep it on 127.0.0.1, or pass --admin-allow-plaintext when a private network protects it", errPlaintextAdmin, o.adminListen)
}

// run starts syncd and blocks until ctx is cancelled (SIGINT or SIGTERM),
// then shuts down gracefully within the shutdown timeout; with the first
// argument `cluster-secret` it runs that subcommand instead.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	if len(args) > 0 && args[0] == clusterSecretCmd {
		return runClusterSecret(args[1:], stderr)
	}
	o, err := parseFlags(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if o.version {
		return errShowVersion
	}
	log := newLogger(o, stderr)
	log.Info("syncd starting", "build", buildinfo.Read().String(), "go", buildinfo.Read().GoVersion)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	authn, err := newAuthenticator(o, log, reg, stderr)
	if err != nil {
		return err
	}
	defer authn.Close()

	// One syncd per database: a second one, or syncctl restore while this
	// one runs, is refused (datalock). The lock's directory is created
	// here, as server.New would create it.
	if err := os.MkdirAll(filepath.Dir(o.data), 0o700); err != nil {
		return fmt.Errorf("--data %s: %w", o.data, err)
	}
	lock, err := datalock.Acquire(o.data)
	if err != nil {
		var held *datalock.ErrHeld
		if errors.As(err, &held) {
			return fmt.Errorf("--data %s: another syncd serves it (%w); stop it first", o.data, err)
		}
		return err
	}
	defer lock.Release()

	budget := bootBudget(o)
	bootCtx, booted := context.WithTimeout(ctx, budget)
	defer booted()
	probe, err := startBootProbe(o.listen, o.tlsCert, o.tlsKey)
	if err != nil {
		return err
	}
	defer probe.close()
	var member *membership
	if o.cluster.enabled {
		if member, err = joinCluster(bootCtx, o, log, reg); err != nil {
			return bootFailed(bootCtx, budget, err)
		}
		defer member.close()
		log.Info("joined the cluster", "cluster_id", member.cluster.ID(), "node", o.nodeID)
	}
	synchronous, err := sqlitedb.ParseSynchronous(o.synchronous)
	if err != nil {
		return fmt.Errorf("--synchronous: %w", err)
	}
	cfg := server.Config{
		DataPath:                 o.data,
		Synchronous:              synchronous,
		MaxLogPages:              o.maxLogPages,
		Authenticator:            authn,
		NodeID:                   o.nodeID,
		Policies:                 o.models,
		ValueVersions:            o.valueVersions,
		Scopes:                   &o.scopes,
		MaxScopeValues:           o.maxScopeValues,
		MaxClockSkew:             o.maxClockSkew,
		AllowedOrigins:           o.origins,
		PeerURLs:                 o.peerURLs,
		MaxConnections:           o.maxConnections,
		MaxConnectionsPerAddress: o.maxConnsPerAddr,
		Quotas:                   o.quotas,
		FrameBudgetBytes:         o.frameBudget,
		Retention:                o.retention,
		RetentionInterval:        o.retentionEvery,
		Logger:                   log,
		Registry:                 reg,
		SLOObjective:             o.sloObjective,
		SLOPushLatency:           o.sloPushLatency,
	}
	o.limits.apply(&cfg)
	if member != nil {
		cfg.Cluster = member.cluster
	}
	srv, err := server.New(bootCtx, cfg)
	if err != nil {
		err = bootFailed(bootCtx, budget, err)
		if member != nil {
			member.cluster.Close()
			if errors.Is(err, replication.ErrOtherDatabase) {
				err = fmt.Errorf("%w: --data %s holds another cluster's state; point the node at its own cluster's NATS (--nats-url, --nats-route), or move the data file aside to join this cluster as a new node", err, o.data)
			}
		}
		return err
	}
	defer srv.Close()

	listeners := []*listener{{name: "public", srv: srv.HTTPServer(srv.Handler()), cert: o.tlsCert, key: o.tlsKey}}
	addrs := []string{probe.close()}
	if o.adminListen != "" {
		listeners = append(listeners, &listener{name: "admin", srv: srv.HTTPServer(srv.AdminHandler()), cert: o.adminTLSCert, key: o.adminTLSKey})
		addrs = append(addrs, o.adminListen)
	}
	for i, l := range listeners {
		if l.ln, err = net.Listen("tcp", addrs[i]); err != nil {
			for _, prev := range listeners[:i] {
				prev.ln.Close()
			}
			return fmt.Errorf("listen %s: %w", l.name, err)
		}
	}
	for _, l := range listeners {
		l.ln = srv.LimitListener(l.ln)
	}
	serveErr := make(chan error, len(listeners)+1)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		if err := watchDataFile(watchCtx, o.data, dataCheckInterval); err != nil {
			serveErr <- err
		}
	}()
	for _, l := range listeners {
		go func() {
			var err error
			if l.cert != "" {
				err = l.srv.ServeTLS(l.ln, l.cert, l.key)
			} else {
				err = l.srv.Serve(l.ln)
			}
			serveErr <- fmt.Errorf("%s listener: %w", l.name, err)
		}()
	}
	booted()
	srv.MarkServing()
	log.Info("syncd listening", "addr", listeners[0].ln.Addr().String(), "admin_addr", adminAddr(listeners),
		"tls", o.tlsCert != "", "data", o.data, "synchronous", strings.ToUpper(o.synchronous), "models", o.models.String())

	var failed error
	select {
	case failed = <-serveErr:
		log.Error("serving failed; shutting down", "err", failed)
	case <-ctx.Done():
	}
	log.Info("syncd shutting down", "timeout", o.shutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Warn("drain did not finish", "err", err)
	}
	for _, l := range listeners {
		if err := l.srv.Shutdown(shutdownCtx); err != nil {
			l.srv.Close()
		}
	}
	log.Info("syncd stopped")
	if failed != nil && !errors.Is(failed, http.ErrServerClosed) {
		return failed
	}
	return nil
}

func adminAddr(ls []*listener) string {
	if len(ls) < 2 {
		return "disabled"
	}
	return ls[1].ln.Addr().String()
}
