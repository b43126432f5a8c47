package server

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/ledger"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/server/console"
	"github.com/syncd-dev/syncd/syncproto"
)

// Defaults of Config's zero fields.
//
// DefaultRequestsPerSecond and DefaultRequestBurst are each session's
// request limit: a backstop against one session spinning on cheap frames,
// above what one honest device sends. A device waits a round trip (and,
// for a write, a commit) per awaited request, tens of microseconds at the
// least on loopback, and moves volume in pushes of up to
// syncproto.MaxBatch mutations; so neither sequential awaited writes nor a
// backlog replay reach it.
const (
	DefaultNodeID            = "syncd-1"
	DefaultMaxConnections    = 10_000
	DefaultRequestsPerSecond = 20_000
	DefaultRequestBurst      = 40_000
	DefaultWriteTimeout      = 10 * time.Second
	DefaultTokenRecheck      = time.Second
	DefaultHelloTimeout      = 10 * time.Second
	DefaultRetentionInterval = time.Minute
	DefaultMaxTenantLabels   = 100
)

// maxDBConns caps syncd's SQLite connections: one writer, the rest readers.
// Readers beyond it wait for a free connection rather than open files.
const maxDBConns = 8

// Synchronous is the durability level of syncd's database (PRAGMA
// synchronous). It is the type a device's files use too
// (offlinequeue.Synchronous): one type, sqlitedb.Synchronous, named here so
// that an embedder can set Config.Synchronous.
type Synchronous = sqlitedb.Synchronous

// The durability levels.
const (
	// SyncFull: an acknowledged result survives a power cut. The default.
	SyncFull = sqlitedb.Full
	// SyncNormal: an acknowledged result survives a process crash; a power
	// cut may roll back the newest commits.
	SyncNormal = sqlitedb.Normal
)

// Config configures a Server. The zero value of every field except DataPath
// and Authenticator means its default.
type Config struct {
	// DataPath is the SQLite database file; it and its directory are
	// created if missing. Required.
	DataPath string
	// Synchronous is the durability level; the zero value is SyncFull, so
	// an acknowledged result survives a power cut. SyncNormal survives a
	// process crash only.
	Synchronous Synchronous
	// MaxLogPages bounds the write-ahead log (DataPath + "-wal"), in 4 KiB
	// pages: from this size the store's writer copies what the background
	// checkpoint left, so that the log starts over, and at twice it the
	// writer copies all that readers let it, so that unless a long read
	// pins the log it never grows past twice it plus one write
	// (sqlitedb.Checkpointer).
	// 0 means sqlitedb.DefaultMaxLogPages (16 MiB).
	MaxLogPages int64
	// Authenticator maps bearer tokens to principals. Required.
	Authenticator *auth.Authenticator
	// NodeID names this server in welcome and as the origin of its clock.
	NodeID string
	// Policies declares each model's conflict policy; undeclared models
	// use its replication.AnyModel entry (PolicyNone refuses them with
	// invalid_model), else last-writer-wins.
	Policies replication.Config
	// Hook decides models declared with the hook policy, within
	// HookTimeout (0: replication.DefaultHookTimeout), else LWW decides.
	Hook        replication.Hook
	HookTimeout time.Duration
	// HookBreaker sets the circuit breaker of each hook model (the zero
	// value: replication.BreakerConfig's defaults). While it is open, the
	// model's writes are refused hook_unavailable (retryable) at once.
	HookBreaker replication.BreakerConfig
	// SLOObjective is the share of good events each SLI aims for, in
	// (0, 1); 0 means DefaultSLOObjective. SLOPushLatency is the push ack
	// latency SLI's threshold; 0 means DefaultSLOPushLatency.
	SLOObjective   float64
	SLOPushLatency time.Duration
	// ValueVersions declares, by model, the value versions the server
	// accepts and the upcasters that turn older ones into the current
	// shape (ModelVersions); welcome announces them. A model it does not
	// list takes writes of every value version as they are.
	ValueVersions map[string]ModelVersions
	// Scopes declares partial sync (PROTOCOL.md section 19): the scopes,
	// the models each covers and their membership models. Writes of covered
	// models are checked against the writer's grants, and devices receive
	// only the scope values they follow. Every node of a cluster must
	// declare the same. nil: none.
	Scopes *replication.Scopes
	// MaxScopeValues bounds the scope values one subscription follows
	// (welcome.limits.max_scope_values); 0 means
	// syncproto.DefaultMaxScopeValues.
	MaxScopeValues int
	// MaxClockSkew is how far ahead of the server's clock a mutation's
	// timestamp may be; 0 means syncproto.DefaultMaxClockSkew.
	MaxClockSkew time.Duration
	// AllowedOrigins are host[:port] patterns (path.Match syntax, without
	// case; with "://", matched against scheme://host) of browser origins
	// allowed to open a websocket besides the server's own host; requests
	// without an Origin header (native clients) are always allowed.
	AllowedOrigins []string
	// PeerURLs are the public base URLs (http(s):// or ws(s)://) through
	// which devices reach this database: this node's and, on a cluster, the
	// other nodes'. welcome announces them (servers), so a device
	// configured with one URL can fail over to another node. Empty: none
	// announced.
	PeerURLs []string
	// MaxConnections caps open websocket sessions; 0 means DefaultMaxConnections.
	MaxConnections int
	// HTTPTimeouts are the timeouts of the listeners HTTPServer builds;
	// zero fields take the defaults (ReadHeaderTimeout, ReadTimeout,
	// WriteTimeout, IdleTimeout).
	HTTPTimeouts HTTPTimeouts
	// MaxConnectionsPerAddress caps the TCP connections one IP address
	// holds open on a listener wrapped by LimitListener; 0 means
	// DefaultMaxConnectionsPerAddress, negative means no cap.
	MaxConnectionsPerAddress int
	// HelloTimeout is how long a session may take to send hello; 0 means
	// DefaultHelloTimeout.
	HelloTimeout time.Duration
	// MaxConcurrentSnapshots caps snapshots served at once (and the
	// snapshot pool's connections); 0 means DefaultMaxConcurrentSnapshots.
	MaxConcurrentSnapshots int
	// MaxQueuedSnapshots caps snapshots waiting for a turn beyond
	// MaxConcurrentSnapshots; 0 means DefaultMaxQueuedSnapshots, negative
	// means none wait (refused at once). SnapshotQueueTimeout bounds one
	// wait; 0 means DefaultSnapshotQueueTimeout. Either way a refusal is
	// 503 server_busy with a Retry-After from the queue.
	MaxQueuedSnapshots   int
	SnapshotQueueTimeout time.Duration
	// MaxSnapshotsPerTenant caps one tenant's snapshots running or waiting
	// (all its tokens together), so one tenant's storm cannot fill the
	// queue; 0 means DefaultMaxSnapshotsPerTenant, negative means no cap.
	// Beyond it: 503 server_busy with Retry-After.
	MaxSnapshotsPerTenant int
	// SessionWorkTurns caps the frames the sessions decode, meter and
	// admit, and the feed pages they read and build, at once (workGate):
	// a session beyond it waits, parked, for a turn that goes round the
	// tenants by TenantWeights, so one tenant's many sessions cannot crowd
	// another's off the cores. 0 means GOMAXPROCS; negative means no cap.
	SessionWorkTurns int
	// SnapshotShareBytes bounds the body a snapshot read served to several
	// devices keeps for its slowest reader; 0 means
	// DefaultSnapshotShareBytes.
	SnapshotShareBytes int
	// SnapshotTimeout bounds one snapshot download; 0 means
	// DefaultSnapshotTimeout. SnapshotWriteTimeout bounds each write of
	// one; 0 means DefaultSnapshotWriteTimeout.
	SnapshotTimeout      time.Duration
	SnapshotWriteTimeout time.Duration
	// Quotas bound each token's and tenant's mutation rate, sessions and
	// share of the frame budget; zero fields take their defaults.
	Quotas Quotas
	// TenantWeights are the tenants' weights in the committer's fair
	// order (internal/fairshare): when it is saturated, each tenant with
	// pushes waiting gets mutations committed in proportion to its weight,
	// from 1 to MaxTenantWeight. A tenant absent has weight 1. On a
	// cluster node it orders the batches the node publishes to the command
	// stream (cluster.Cluster.ShareFairly); the stream keeps the nodes'
	// commands in their arrival order. The same weight is the tenant's
	// turns a round in the snapshot queue (snapshotGate) and the work gate.
	TenantWeights map[string]int
	// MaxTenantLabels caps the tenants given their own tenant label in the
	// per-tenant metrics (syncd_commit_*, syncd_snapshot_turns_*,
	// syncd_work_turns_*), beyond those of
	// TenantWeights: the first seen since start; the others share the
	// label "~other". 0 means DefaultMaxTenantLabels; negative, none.
	MaxTenantLabels int
	// FrameBudgetBytes bounds the bytes of frames being read, decoded or
	// applied, over all sessions (frameBudget); 0 means
	// DefaultFrameBudgetBytes, and it is never below one largest frame.
	FrameBudgetBytes int64
	// FrameReadTimeout bounds reading one message once it started to
	// arrive (not counting a wait for the frame budgets); past it the
	// connection is cut. 0 means DefaultFrameReadTimeout.
	FrameReadTimeout time.Duration
	// EventLogInterval is how often counts of refusals and authentication
	// failures are logged, one line per kind (eventLog); 0 means
	// DefaultEventLogInterval.
	EventLogInterval time.Duration
	// RequestsPerSecond and RequestBurst rate-limit each session's
	// requests (announced in welcome); 0 means the defaults
	// (DefaultRequestsPerSecond, DefaultRequestBurst).
	RequestsPerSecond float64
	RequestBurst      int
	// IdleTimeout closes a session that sent nothing for this long (4000);
	// 0 means syncproto.DefaultIdleTimeout.
	IdleTimeout time.Duration
	// WriteTimeout bounds one frame write and one keepalive ping; 0 means
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// TokenRecheck is how often an open session checks that its token was
	// not revoked; a revoked token's sessions get unauthorized and close
	// 1008. 0 means DefaultTokenRecheck.
	TokenRecheck time.Duration
	// PingInterval is how often the server pings each client; 0 means a
	// third of IdleTimeout.
	PingInterval time.Duration
	// Retention bounds the ledger, oplog and conflict log; zero fields take
	// the packages' defaults. RetentionInterval is how often pruning runs
	// (0: DefaultRetentionInterval; negative: never, for tests).
	Retention         Retention
	RetentionInterval time.Duration
	// Now is the server's clock; nil means time.Now.
	Now func() time.Time
	// Logger receives the server's logs; nil discards them. Logs never
	// hold tokens or values.
	Logger *slog.Logger
	// Registry receives the server's metrics and is served at /metrics;
	// nil means a fresh registry with the Go and process collectors.
	Registry *prometheus.Registry
	// Cluster, when set, makes this server one node of a cluster: a
	// connected (not started) membership whose command stream decides every
	// push. New prepares DataPath from the cluster (restoring a snapshot
	// when the node is new or behind), opens it with the cluster's identity
	// and starts the membership; Close closes it. Retention then runs as
	// the cluster's replicated jobs, not on this node's timer.
	Cluster *cluster.Cluster
}

// Retention bounds what syncd keeps. Every count bound applies to each
// tenant on its own (Oplog.MaxEntries is the oplog entries kept per tenant,
// replication.DefaultOplogEntriesPerTenant by default), so one tenant's
// writes never push another's history out. The ledger evicts by decision
// time; a resend not held and at or before its tenant's ledger floor is
// answered "expired". A cursor older than its tenant's oplog floor (entries
// of its own tenant after it were compacted) gets a resync; another
// tenant's compaction never sends it there.
type Retention struct {
	LedgerMaxAge     time.Duration
	LedgerMaxEntries int
	Oplog            replication.Retention
	Conflicts        replication.Retention
}

func (c *Config) setDefaults() error {
	if c.DataPath == "" {
		return errors.New("Config.DataPath is required")
	}
	if c.Authenticator == nil {
		return errors.New("Config.Authenticator is required")
	}
	if len(c.PeerURLs) > syncproto.MaxServers {
		return fmt.Errorf("Config.PeerURLs: %d URLs, at most %d", len(c.PeerURLs), syncproto.MaxServers)
	}
	for _, u := range c.PeerURLs {
		if err := syncproto.ValidateServerURL(u); err != nil {
			return fmt.Errorf("Config.PeerURLs: %w", err)
		}
	}
	if c.NodeID == "" {
		c.NodeID = DefaultNodeID
	}
	if err := syncproto.ValidateID(c.NodeID); err != nil {
		return fmt.Errorf("node id: %w", err)
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if !c.HTTPTimeouts.valid() {
		return errors.New("Config.HTTPTimeouts: negative timeout")
	}
	c.HTTPTimeouts = c.HTTPTimeouts.withDefaults()
	def(&c.MaxClockSkew, syncproto.DefaultMaxClockSkew)
	def(&c.IdleTimeout, syncproto.DefaultIdleTimeout)
	def(&c.WriteTimeout, DefaultWriteTimeout)
	def(&c.TokenRecheck, DefaultTokenRecheck)
	def(&c.HelloTimeout, DefaultHelloTimeout)
	def(&c.SnapshotTimeout, DefaultSnapshotTimeout)
	def(&c.SnapshotWriteTimeout, DefaultSnapshotWriteTimeout)
	def(&c.SnapshotQueueTimeout, DefaultSnapshotQueueTimeout)
	def(&c.PingInterval, c.IdleTimeout/3)
	def(&c.RetentionInterval, DefaultRetentionInterval)
	def(&c.EventLogInterval, DefaultEventLogInterval)
	def(&c.FrameReadTimeout, DefaultFrameReadTimeout)
	if c.FrameBudgetBytes == 0 {
		c.FrameBudgetBytes = DefaultFrameBudgetBytes
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if err := c.Quotas.setDefaults(c.MaxConnections); err != nil {
		return fmt.Errorf("quotas: %w", err)
	}
	if c.MaxConcurrentSnapshots <= 0 {
		c.MaxConcurrentSnapshots = DefaultMaxConcurrentSnapshots
	}
	if c.SnapshotShareBytes <= 0 {
		c.SnapshotShareBytes = DefaultSnapshotShareBytes
	}
	if c.MaxQueuedSnapshots == 0 {
		c.MaxQueuedSnapshots = DefaultMaxQueuedSnapshots
	}
	if c.MaxSnapshotsPerTenant == 0 {
		c.MaxSnapshotsPerTenant = DefaultMaxSnapshotsPerTenant
	}
	if c.MaxConnectionsPerAddress == 0 {
		c.MaxConnectionsPerAddress = DefaultMaxConnectionsPerAddress
	}
	if c.RequestsPerSecond == 0 {
		c.RequestsPerSecond = DefaultRequestsPerSecond
	}
	if c.RequestBurst == 0 {
		c.RequestBurst = DefaultRequestBurst
	}
	if c.MaxTenantLabels == 0 {
		c.MaxTenantLabels = DefaultMaxTenantLabels
	}
	for tenant, w := range c.TenantWeights {
		if err := syncproto.ValidateID(tenant); err != nil {
			return fmt.Errorf("tenant weight of %q: %w", tenant, err)
		}
		if w < 1 || w > MaxTenantWeight {
			return fmt.Errorf("tenant weight of %q is %d: want 1 to %d", tenant, w, MaxTenantWeight)
		}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxClockSkew < 0 || c.IdleTimeout < 0 || c.WriteTimeout < 0 || c.TokenRecheck < 0 || c.HelloTimeout < 0 || c.SnapshotTimeout < 0 || c.SnapshotWriteTimeout < 0 || c.SnapshotQueueTimeout < 0 || c.FrameReadTimeout < 0 || c.EventLogInterval < 0 || c.FrameBudgetBytes < 0 || c.PingInterval < 0 || c.MaxConnections < 0 || c.RequestsPerSecond < 0 || c.RequestBurst < 0 {
		return errors.New("durations, limits and rates must not be negative")
	}
	return nil
}

// Server is syncd's service over one SQLite database: the websocket sync
// endpoint, the snapshot endpoint, health, metrics and the admin API.
// Create it with New, serve Handler (and AdminHandler on a loopback
// listener), then call Shutdown and Close.
type Server struct {
	cfg   Config
	log   *slog.Logger
	now   func() time.Time
	store *replication.Store // the state: records, oplog, ledger, conflict log
	// databaseID is what devices see as welcome.database_id
	// (devicesDatabaseID).
	databaseID string
	// checkpoints runs the database's checkpoints beside its writer (the
	// store's Checkpointer); closed after the writer stops.
	checkpoints *sqlitedb.Checkpointer
	tail        *feedTail // the newest oplog entries, shared by every subscription
	// snapshotDB is the snapshots' own pool; snapshots admits them.
	snapshotDB *sql.DB
	snapshots  *snapshotGate
	// work hands the sessions' work turns round the tenants (workGate);
	// nil when SessionWorkTurns is negative.
	work *workGate
	// snapshotSends admits snapshot bodies' writes (snapshotSender).
	snapshotSends *snapshotSender
	quotas        *quotaBook   // per token and per tenant
	frames        *frameBudget // bytes of frames in flight, all sessions
	events        *eventLog    // refusals and auth failures, counted per interval
	commits       committer    // decides admitted batches and makes them durable
	clock         *syncproto.Clock
	resolver      *replication.Resolver
	registry      *prometheus.Registry
	metrics       *metrics
	breakers      *breakerMetrics
	slo           *sloMetrics
	versions      *valueVersions // Config.ValueVersions, checked at the edge
	started       time.Time

	// hardStop ends every session at once; Shutdown cancels it when its
	// deadline passes.
	hardStop context.Context
	cancel   context.CancelFunc

	draining atomic.Bool
	serving  atomic.Bool // MarkServing was called: /startupz answers 200
	conns    atomic.Int64
	mu       sync.Mutex
	sessions map[*session]struct{}
	wg       sync.WaitGroup // sessions and the janitor
	janitor  chan struct{}  // closed to stop the retention janitor

	consoleOnce sync.Once
	console     *console.Console // made by the first AdminHandler; Close stops it
	devices     *deviceBook      // last push and last error per device (admin API)
}

// New opens the database and prepares the service.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	breakers := newBreakerMetrics()
	resolver, err := replication.NewResolver(replication.ResolverOptions{Policies: cfg.Policies, Hook: cfg.Hook, HookTimeout: cfg.HookTimeout, Logger: cfg.Logger,
		Breaker: cfg.HookBreaker, Now: cfg.Now, OnBreaker: breakers.transition})
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if err := breakers.register(reg, resolver); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	slo, err := newSLOMetrics(reg, cfg.SLOObjective, cfg.SLOPushLatency)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	versions, err := newValueVersions(cfg.ValueVersions, cfg.Logger, reg)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	var clusterID string
	if cfg.Cluster != nil {
		if _, err := cfg.Cluster.PrepareData(ctx, cfg.DataPath); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		clusterID = cfg.Cluster.ID()
	}
	// No commit checkpoints: the store's one writer (the committer, or a
	// cluster node's materializer) has the checkpointer run them beside
	// it (sqlitedb.Checkpointer says why).
	db, err := sqlitedb.Open(ctx, cfg.DataPath, sqlitedb.Options{Synchronous: cfg.Synchronous, NoAutoCheckpoint: true})
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	// The writer's own checkpoint is PASSIVE (WaitForReaders unset): a
	// snapshot stream is a read that may last seconds, which a RESTART
	// would make the committer wait for.
	checkpoints := sqlitedb.StartCheckpointer(db, sqlitedb.CheckpointerOptions{MaxLogPages: cfg.MaxLogPages})
	// One writer (the committer) and a few readers (feeds, snapshots, the
	// admin API). Without a cap, a burst opens connections whose files
	// SQLite keeps open for the life of the process.
	db.SetMaxOpenConns(maxDBConns)
	db.SetMaxIdleConns(maxDBConns)
	s := &Server{
		cfg: cfg, log: cfg.Logger, now: cfg.Now, resolver: resolver, registry: reg, checkpoints: checkpoints,
		metrics:  newMetrics(reg),
		breakers: breakers,
		slo:      slo,
		versions: versions,
		clock:    syncproto.NewClock(cfg.NodeID, cfg.Now),
		started:  cfg.Now(),
		sessions: map[*session]struct{}{},
		janitor:  make(chan struct{}),
		devices:  newDeviceBook(reg),
	}
	labels := newTenantLabels(cfg.TenantWeights, max(0, cfg.MaxTenantLabels))
	s.snapshots = newSnapshotGate(cfg.MaxConcurrentSnapshots, max(0, cfg.MaxQueuedSnapshots), cfg.MaxSnapshotsPerTenant, cfg.TenantWeights,
		s.metrics.snapshotsWaiting, newSnapshotTurnMetrics(reg, labels))
	if cfg.SessionWorkTurns >= 0 {
		s.work = newWorkGate(cmp.Or(cfg.SessionWorkTurns, runtime.GOMAXPROCS(0)), cfg.TenantWeights, newWorkTurnMetrics(reg, labels))
	}
	s.snapshotSends = newSnapshotSender(max(1, runtime.GOMAXPROCS(0)/2))
	s.quotas = newQuotaBook(cfg.Quotas, cfg.Now, s.metrics)
	s.frames = newFrameBudget(cfg.FrameBudgetBytes, s.metrics.frameBudgetInUse, s.metrics.frameBudgetWaits)
	s.events = newEventLog(cfg.Logger, cfg.EventLogInterval)
	s.store, err = replication.OpenStore(ctx, db, replication.StoreOptions{
		Ledger: ledger.Options{MaxAge: cfg.Retention.LedgerMaxAge, MaxEntries: cfg.Retention.LedgerMaxEntries},
		Log:    cfg.Retention.Oplog, Conflicts: cfg.Retention.Conflicts, Now: cfg.Now, ID: clusterID,
		Checkpoints: checkpoints, Scopes: cfg.Scopes,
	})
	if err == nil && s.store.MigratedFrom != s.store.SchemaVersion {
		s.log.Info("database migrated", "path", cfg.DataPath, "from_schema_version", s.store.MigratedFrom, "schema_version", s.store.SchemaVersion)
	}
	if err == nil {
		s.databaseID = devicesDatabaseID(s.store.ID, cfg.Cluster != nil, s.declared())
		if n := s.store.ScopesReindexed; n > 0 {
			s.log.Info("scope declarations changed: records reindexed; devices resync at their next connection",
				"records", n, "scopes", cfg.Scopes.String(), "database_id", s.databaseID)
		}
		s.tail = newFeedTail(s.store.Log, newRouter(s.declared(), reg))
		err = s.setOplogGauges(ctx)
	}
	if err == nil {
		err = reg.Register(newInfoCollector(s.databaseID, s.store.SchemaVersion, s.store.Ledger))
	}
	if err == nil {
		err = reg.Register(checkpoints) // syncd_wal_*
	}
	if err == nil {
		s.snapshotDB, err = openSnapshotPool(ctx, cfg)
	}
	if err == nil && cfg.Cluster != nil {
		cfg.Cluster.ShareFairly(cfg.TenantWeights, newCommitShareMetrics(reg, labels))
		// A group the materializer applied may hold a compaction job: the
		// feed tail must forget what the oplog no longer retains.
		err = cfg.Cluster.Start(s.store, func(uint64) {
			if err := s.setOplogGauges(context.Background()); err != nil {
				s.log.Warn("oplog bounds", "err", err)
			}
		})
		s.commits = clusterCommitter{cluster: cfg.Cluster, metrics: s.metrics, now: cfg.Now}
	} else if err == nil {
		share := newCommitShareMetrics(reg, labels)
		s.commits, err = newGroupCommitter(ctx, s.store, s.tail, cfg.Now, s.metrics, share, cfg.TenantWeights, cfg.Logger)
	}
	if err != nil {
		if s.snapshotDB != nil {
			s.snapshotDB.Close()
		}
		checkpoints.Close()
		db.Close()
		return nil, fmt.Errorf("server: open store: %w", err)
	}
	s.hardStop, s.cancel = context.WithCancel(context.Background())
	if cfg.RetentionInterval > 0 && cfg.Cluster == nil {
		s.wg.Add(1)
		go s.runJanitor()
	}
	return s, nil
}

// Handler serves the public endpoints: the sync websocket, the snapshot,
// /healthz, /readyz, /startupz and /metrics.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(syncproto.SyncPath, s.serveSync)
	mux.Handle("GET "+syncproto.SnapshotPath, s.crossOrigin(http.HandlerFunc(s.serveSnapshot)))
	mux.Handle("OPTIONS "+syncproto.SnapshotPath, s.crossOrigin(http.HandlerFunc(s.snapshotPreflight)))
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /startupz", s.startupz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpError(w, http.StatusNotFound, syncproto.Errorf(syncproto.CodeBadRequest, "no endpoint at %s", r.URL.Path))
	})
	return mux
}

// healthz answers 200 while the process is alive: it checks nothing else,
// so an orchestrator restarts syncd only when it is truly stuck.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ok\n")
}

// readyz answers 200 when syncd can take traffic: the database answers and
// the server is not draining; 503 otherwise, with the reason.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if why := s.readiness(r.Context()); why != "" {
		http.Error(w, why, http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ready\n")
}

// principal authenticates the request's bearer token. On failure it has
// answered 401 and returns false. Admin tokens are accepted only when admin.
func (s *Server) principal(w http.ResponseWriter, r *http.Request, admin bool) (auth.Principal, bool) {
	var p auth.Principal
	err := auth.ErrUnauthorized
	if token := bearerToken(r); token != "" {
		p, err = s.cfg.Authenticator.Authenticate(token)
	}
	if err == nil && p.Admin != admin {
		err = auth.ErrUnauthorized
	}
	if err != nil {
		e := authError(err)
		s.metrics.connectionsTotal.WithLabelValues("unauthorized").Inc()
		s.events.add("authentication failed", string(e.Code), r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="syncd"`)
		httpError(w, http.StatusUnauthorized, e)
		return auth.Principal{}, false
	}
	return p, true
}

func (s *Server) serveSync(w http.ResponseWriter, r *http.Request) {
	p, ok := s.admitUpgrade(w, r)
	if !ok {
		return
	}
	defer s.releaseUpgrade(p)
	// A websocket ping from the client keeps its session as any frame does
	// (PROTOCOL.md section 14); the stack answers it. The callback runs on
	// the session's reader, which starts after heard is set.
	var heard atomic.Pointer[session]
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols: []string{syncproto.Subprotocol},
		// admitUpgrade applied the origin allow-list already.
		InsecureSkipVerify: true,
		OnPingReceived: func(context.Context, []byte) bool {
			if ss := heard.Load(); ss != nil {
				ss.heard()
			}
			return true
		},
	})
	if err != nil {
		// Accept has answered; admitUpgrade checked everything it checks.
		s.metrics.connectionsTotal.WithLabelValues("refused").Inc()
		s.log.Warn("websocket upgrade refused", "remote", r.RemoteAddr, "err", err)
		return
	}
	// The session enforces MaxFrameBytes itself, so it can answer
	// frame_too_large before closing (readFrame).
	conn.SetReadLimit(-1)
	s.metrics.connectionsTotal.WithLabelValues("accepted").Inc()

	ss := newSession(s, conn, p, r.RemoteAddr)
	heard.Store(ss)
	if !s.track(ss) {
		e := syncproto.Errorf(syncproto.CodeShuttingDown, "server shutting down")
		if frame, err := syncproto.Encode(e); err == nil {
			conn.Write(r.Context(), websocket.MessageText, frame)
		}
		conn.Close(websocket.StatusGoingAway, string(e.Code))
		return
	}
	defer s.untrack(ss)
	s.metrics.connections.Inc()
	defer s.metrics.connections.Dec()
	ss.run(s.hardStop)
}

// httpError answers a refused HTTP request with the JSON error object
// PROTOCOL.md section 1 promises.
func httpError(w http.ResponseWriter, status int, e *syncproto.Error) {
	body, err := syncproto.Encode(e)
	if err != nil {
		body = []byte(`{"type":"error","code":"internal","retryable":true}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(body)
}

// track registers a session unless the server is draining.
func (s *Server) track(ss *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining.Load() {
		return false
	}
	s.sessions[ss] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Server) untrack(ss *session) {
	s.mu.Lock()
	delete(s.sessions, ss)
	s.mu.Unlock()
	s.noteUntracked(ss)
	s.wg.Done()
}

func (s *Server) sessionList() []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := make([]*session, 0, len(s.sessions))
	for ss := range s.sessions {
		list = append(list, ss)
	}
	slices.SortFunc(list, func(a, b *session) int { return a.since.Compare(b.since) })
	return list
}

// limits are the limits announced in welcome.
func (s *Server) limits() syncproto.Limits {
	l := syncproto.DefaultLimits()
	l.MaxClockSkewMS = s.cfg.MaxClockSkew.Milliseconds()
	l.IdleTimeoutMS = s.cfg.IdleTimeout.Milliseconds()
	l.RequestsPerSecond = s.cfg.RequestsPerSecond
	l.RequestBurst = s.cfg.RequestBurst
	l.LedgerRetentionMS = cmp.Or(s.cfg.Retention.LedgerMaxAge, ledger.DefaultMaxAge).Milliseconds()
	return l
}

// modelAccess lists the declared models the principal may use, with their
// policies. Undeclared models follow the default policy that welcome
// announces (default_policy): lww unless configured otherwise, or refused
// under "none".
func (s *Server) modelAccess(p auth.Principal) map[string]syncproto.ModelAccess {
	out := map[string]syncproto.ModelAccess{}
	for model, policy := range s.cfg.Policies {
		if !s.cfg.Policies.Declared(model) {
			continue
		}
		r, w := p.CanRead(model), p.CanWrite(model)
		if r || w {
			out[model] = syncproto.ModelAccess{Policy: policy, Read: r, Write: w}
		}
	}
	return out
}

// runJanitor prunes the ledger, oplog and conflict log on an interval.
func (s *Server) runJanitor() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.RetentionInterval)
	defer t.Stop()
	for {
		select {
		case <-s.janitor:
			return
		case <-t.C:
			s.prune(s.hardStop)
		}
	}
}

// prune runs one retention pass; each store prunes in bounded chunks. On a
// cluster node retention is the lease holder's replicated jobs: prune asks
// the cluster to run them now, and fails on a node without the lease.
func (s *Server) prune(ctx context.Context) error {
	if c := s.cfg.Cluster; c != nil {
		err := c.RunRetention(ctx)
		if err == nil {
			err = s.setOplogGauges(ctx)
		}
		return err
	}
	if n, err := s.store.Ledger.Prune(ctx, s.now()); err != nil {
		s.log.Warn("ledger prune", "err", err)
	} else {
		s.metrics.ledgerEvictions.Add(float64(n))
	}
	if _, err := s.store.Log.Compact(ctx); err != nil {
		s.log.Warn("oplog compaction", "err", err)
	}
	if _, err := s.store.Conflicts.Prune(ctx); err != nil {
		s.log.Warn("conflict log prune", "err", err)
	}
	if err := s.setOplogGauges(ctx); err != nil {
		s.log.Warn("oplog bounds", "err", err)
	}
	// The pass wrote beside the committer; an idle committer would not
	// count it.
	s.store.Wrote(1)
	return nil
}

// setOplogGauges reports the oplog's retained range, and hands the feed
// tail the floors compaction raised, so that it refuses the cursors the
// oplog refuses.
func (s *Server) setOplogGauges(ctx context.Context) error {
	b, err := s.store.Log.Bounds(ctx, replication.Scope{AllTenants: true})
	if err != nil {
		return err
	}
	s.metrics.oplogHead.Set(float64(b.Head))
	s.metrics.oplogOldest.Set(float64(b.Oldest))
	start, ok := s.tail.startSeq()
	if !ok {
		return nil
	}
	floors, err := s.store.Log.Floors(ctx, start)
	if err != nil {
		return err
	}
	s.tail.forget(floors)
	return nil
}

// Shutdown drains the server: /readyz fails, new sessions are refused, every
// session answers the pushes it already submitted and closes with 1001
// (going away). When ctx ends first, the remaining sessions are cut.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining.Store(true)
	s.mu.Unlock()
	for _, ss := range s.sessionList() {
		ss.drain()
	}
	stopped := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(stopped)
	}()
	select {
	case <-s.janitor:
	default:
		close(s.janitor)
	}
	select {
	case <-stopped:
		return nil
	case <-ctx.Done():
		s.cancel()
		<-stopped
		return fmt.Errorf("server: shutdown deadline passed; remaining sessions were cut: %w", ctx.Err())
	}
}

// Close stops the committer (after it has committed what was queued) and
// releases the database. Call it after Shutdown.
func (s *Server) Close() error {
	s.cancel()
	s.mu.Lock()
	s.draining.Store(true)
	s.mu.Unlock()
	select {
	case <-s.janitor:
	default:
		close(s.janitor)
	}
	s.wg.Wait()
	s.closeConsole()
	s.events.close()
	s.commits.close()
	waitCtx, cancel := context.WithTimeout(context.Background(), s.cfg.WriteTimeout)
	defer cancel()
	if err := s.resolver.Wait(waitCtx); err != nil {
		s.log.Warn("conflict hooks still running at close", "err", err)
	}
	s.checkpoints.Close()
	return errors.Join(s.snapshotDB.Close(), s.store.DB.Close())
}

// openSnapshotPool opens the snapshots' own read-only handle on the
// database, MaxConcurrentSnapshots connections at most.
func openSnapshotPool(ctx context.Context, cfg Config) (*sql.DB, error) {
	db, err := sqlitedb.Open(ctx, cfg.DataPath, sqlitedb.Options{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("snapshot pool: %w", err)
	}
	db.SetMaxOpenConns(cfg.MaxConcurrentSnapshots)
	db.SetMaxIdleConns(cfg.MaxConcurrentSnapshots)
	return db, nil
}
