package cluster

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// Names of what syncd keeps in JetStream.
const (
	// StreamName is the command stream.
	StreamName = "SYNCD_COMMANDS"
	// Subject is the one subject of the command stream.
	Subject = "syncd.commands"
	// LeaseBucket holds the singleton-job lease and the cluster's identity.
	LeaseBucket = "syncd_lease"
	// NodesBucket holds each node's status and digest checkpoints.
	NodesBucket = "syncd_nodes"
	// SnapshotBucket is the object store of state snapshots.
	SnapshotBucket = "syncd_snapshots"

	clusterIDKey = "cluster_id"
	metaCluster  = "syncd.cluster_id"
)

// Defaults of Options' zero fields.
const (
	DefaultReplicas        = 3
	DefaultStreamMaxAge    = 7 * 24 * time.Hour
	DefaultMaxCommandBytes = 2*syncproto.MaxFrameBytes + 1<<20
	DefaultAPITimeout      = 2 * time.Second
	DefaultCommitTimeout   = 30 * time.Second
	DefaultLeaseTTL        = 10 * time.Second
	DefaultJobInterval     = time.Minute
	DefaultSnapshotEvery   = time.Hour
	DefaultCheckpointEvery = 1000
	DefaultPoll            = 20 * time.Millisecond
	// DefaultRecordsCheckEvery: a records check an hour, as snapshots.
	DefaultRecordsCheckEvery = time.Hour
	DefaultRecordsCheckGap   = time.Minute
)

// Options configure a node's membership in a cluster. The zero value of
// every field except Node means its default.
type Options struct {
	// Node is this node's name, unique in the cluster (syncproto id syntax).
	Node string
	// Replicas is how many NATS servers hold each stream, bucket and object
	// store; 1 is for tests. A stream that exists with another count is a
	// configuration error (ErrMisconfigured).
	Replicas int
	// StreamMaxAge and StreamMaxBytes bound the command stream (0: the
	// default age, no byte bound). A node whose position falls below the
	// stream's first message restores from a snapshot, so snapshots must be
	// taken well within this retention (SnapshotEvery).
	StreamMaxAge   time.Duration
	StreamMaxBytes int64
	// MaxCommandBytes is the largest command published; the stream and
	// the NATS servers must accept messages of this size.
	MaxCommandBytes int
	// APITimeout bounds one attempt of a JetStream API call; calls are
	// retried until their context ends, since a call made while the
	// cluster has no leader gets no answer at all.
	APITimeout time.Duration
	// CommitTimeout bounds how long Submit waits for this node to apply a
	// published command before answering that the outcome is unknown.
	CommitTimeout time.Duration
	// LeaseTTL is how long the singleton-job lease outlives its holder's
	// last renewal; JobInterval how often the holder publishes the
	// retention jobs; SnapshotEvery how often it stores a snapshot.
	LeaseTTL      time.Duration
	JobInterval   time.Duration
	SnapshotEvery time.Duration
	// Retention of the jobs: JobLimit rows per job command.
	JobLimit int
	// SnapshotDir is where a snapshot is written before its upload; ""
	// means the system's temporary directory.
	SnapshotDir string
	// CheckpointEvery is how many stream messages lie between two digest
	// checkpoints the nodes compare.
	CheckpointEvery uint64
	// Poll is how often an idle node reads its replica of the stream for
	// what other nodes published: the most a device on this node waits,
	// beyond the replication itself, to see another node's write.
	Poll time.Duration
	// CommandKey authenticates every command: a node publishes each with
	// its HMAC-SHA256 under this key (HeaderAuth) and applies only those
	// that carry it; every other message is refused and skipped
	// (RefusedUnauthenticated). Snapshots are authenticated with a key
	// derived from it. Required, at least MinCommandKeyBytes, the same on
	// every node: Secret.CommandKey.
	CommandKey []byte
	// MaxClockSkew is the edge's bound on how far ahead of its clock a
	// write's timestamp may be (server.Config.MaxClockSkew; 0 means
	// replication.DefaultMaxClockSkew). The materializer refuses commands
	// stamped beyond their stream time plus this bound. The same on every
	// node.
	MaxClockSkew time.Duration
	// Policies are the model declarations the edges admit writes under
	// (server.Config.Policies); the materializer refuses a batch that
	// breaks them (replication.Batch.Recheck). The same on every node.
	Policies replication.Config
	// Agreement, when not nil, returns what of the node's configuration
	// must be the same on every node, as a hash per named part (the token
	// file's contents, the identity settings...). Each node publishes it
	// with its status, with the parts the cluster adds itself (the skew
	// bound and model declarations, the command key's fingerprint); a node
	// that differs from the majority of the live nodes in a part does not
	// serve, naming the part (ErrConfigMismatch). It is called on the
	// report loop, every few seconds, and must return quickly.
	Agreement func() map[string]string
	// AgreementAbsent is, for a part of Agreement that releases before it
	// did not publish, the value such a node stands for: what it does
	// without the setting the part covers (no scope declarations, for a
	// release before partial sync). A peer without the part counts with
	// this value, so a node of this release whose setting an older node
	// cannot share does not serve beside it; a part not listed here is
	// compared only among the nodes that publish it.
	AgreementAbsent map[string]string
	// Generations names the parts of Agreement whose source carries a
	// generation that grows with every change (syncd's token file and JWT
	// deny list): for
	// each, Agreement also returns GenerationPart(part), the generation
	// in decimal. A node whose generation of such a part is behind a live
	// peer's serves on for GenerationGrace, reading its configuration
	// again at every survey, and refuses (ErrConfigMismatch) only once
	// the grace is over; a node at the newest generation is not outvoted
	// by nodes behind it. Nodes of the same generation, and peers that
	// publish none, are compared by value as any part.
	Generations []string
	// GenerationGrace: see Generations. 0 means DefaultGenerationGrace;
	// at most MaxGenerationGrace.
	GenerationGrace time.Duration
	// Format is the highest command stream format this node understands
	// and announces (Formats); 0 means LatestFormat. A lower one makes
	// the node act as a node of the release that stopped at it: it
	// announces that format, holds the cluster version at it, and waits
	// (ErrNeedsUpgrade) at a command of a later one. For tests of rolling
	// upgrades, and to hold a cluster at a format while a release is
	// tried.
	Format int
	// RecordsCheckEvery is how often the lease holder publishes a records
	// check (the check_records job, once the cluster version allows it):
	// every node then reads its whole records table once, and the nodes
	// compare what they read. 0 means DefaultRecordsCheckEvery.
	RecordsCheckEvery time.Duration
	// RecordsCheckGap is the least stream time between two records checks
	// a node digests: the bound on their cost, whoever publishes them (a
	// closer one is a no-op). The same on every node (PartRecordsCheckGap);
	// 0 means DefaultRecordsCheckGap.
	RecordsCheckGap time.Duration
	// Now is the clock of jobs (the retention reference they carry); nil
	// means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
	// Registerer receives the cluster metrics; nil means none.
	Registerer prometheus.Registerer
}

func (o *Options) setDefaults() error {
	if err := syncproto.ValidateID(o.Node); err != nil {
		return fmt.Errorf("node name: %w", err)
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.StreamMaxAge, DefaultStreamMaxAge)
	def(&o.APITimeout, DefaultAPITimeout)
	def(&o.CommitTimeout, DefaultCommitTimeout)
	def(&o.LeaseTTL, DefaultLeaseTTL)
	def(&o.JobInterval, DefaultJobInterval)
	def(&o.SnapshotEvery, DefaultSnapshotEvery)
	def(&o.Poll, DefaultPoll)
	def(&o.RecordsCheckEvery, DefaultRecordsCheckEvery)
	def(&o.RecordsCheckGap, DefaultRecordsCheckGap)
	if err := o.validateGenerations(); err != nil {
		return err
	}
	if o.Format == 0 {
		o.Format = LatestFormat
	}
	if o.Format < FormatBase || o.Format > LatestFormat {
		return fmt.Errorf("format %d: want %d to %d", o.Format, FormatBase, LatestFormat)
	}
	def(&o.MaxClockSkew, replication.DefaultMaxClockSkew)
	if len(o.CommandKey) < MinCommandKeyBytes {
		return fmt.Errorf("CommandKey: %d bytes, want at least %d (the cluster secret's command key)", len(o.CommandKey), MinCommandKeyBytes)
	}
	o.CommandKey = slices.Clone(o.CommandKey)
	if o.Replicas == 0 {
		o.Replicas = DefaultReplicas
	}
	if o.MaxCommandBytes == 0 {
		o.MaxCommandBytes = DefaultMaxCommandBytes
	}
	if o.JobLimit == 0 {
		o.JobLimit = replication.DefaultPruneChunk
	}
	if o.CheckpointEvery == 0 {
		o.CheckpointEvery = DefaultCheckpointEvery
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Replicas < 1 || o.Replicas > 5 {
		return fmt.Errorf("replicas %d: want 1 to 5", o.Replicas)
	}
	if o.JobInterval < 0 {
		return fmt.Errorf("job interval %s: want a positive interval (--retention-interval: retention cannot be switched off in a cluster)", o.JobInterval)
	}
	if o.Poll < time.Millisecond || o.Poll > time.Second {
		return fmt.Errorf("poll %s: want 1ms to 1s", o.Poll)
	}
	return nil
}

// Errors of Connect. Each names what the operator must fix.
var (
	// ErrMisconfigured: the stream, a bucket or the NATS servers exist
	// with settings syncd cannot run on (replicas, message size limits,
	// subjects). Nothing was changed.
	ErrMisconfigured = errors.New("cluster misconfigured")
	// ErrOtherCluster: the stream belongs to another syncd cluster than
	// this node's data. Nothing was changed.
	ErrOtherCluster = errors.New("stream belongs to another cluster")
)

// Cluster is one node's membership: the command stream it publishes to,
// the materializer that applies the stream to the node's Store, the lease
// loop that runs singleton jobs, and the digest checks against its peers.
// Create it with Connect, then Start it with the node's Store.
type Cluster struct {
	opts    Options
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  jetstream.Stream
	lease   jetstream.KeyValue
	nodes   jetstream.KeyValue
	objects jetstream.ObjectStore
	id      string
	log     *slog.Logger
	metrics *metrics

	store     *replication.Store
	onApplied func(uint64)
	pub       *publisher
	weights   map[string]int // ShareFairly's, read by the publisher from Start
	shareObs  ShareObserver  // ShareFairly's

	want          jetstream.StreamConfig // the command stream as this node requires it
	misconfig     atomic.Pointer[error]  // set while the stream drifted from want, or is gone (checkShape)
	mismatch      atomic.Pointer[error]  // set while this node's configuration differs from the cluster's (checkAgreement)
	agreed        atomic.Pointer[map[string]string]
	seenMismatch  int            // surveys in a row that found a mismatch; the report loop's
	agr           *agreementBook // the report loop's
	waitingQuorum atomic.Bool
	quorumLogged  atomic.Int64                 // unix nanos of the last "waiting for cluster quorum" log
	failed        atomic.Pointer[error]        // set when this node must stop serving
	blocked       atomic.Pointer[error]        // set while the materializer waits at a command of a later format (waitForUpgrade)
	version       atomic.Int64                 // the cluster version, as of the last survey (setVersion)
	unverified    atomic.Bool                  // set while this node's restored records wait for a records check to agree with its peers
	applied       atomic.Pointer[appliedState] // what the store holds, for Status
	streamHead    atomic.Uint64                // the stream's head, as last read or seen
	published     chan struct{}                // signalled when this node's publish is acknowledged: its materializer reads at once
	leaseHeld     atomic.Bool
	leaseToken    atomic.Uint64 // the lease's revision while held

	lastDigestCheck  atomic.Pointer[Check] // the last digest comparison with peers (noteCheck)
	lastRecordsCheck atomic.Pointer[Check] // the last records check's

	checkpoints chan checkpoint // from the materializer to the report loop

	waitMu  sync.Mutex
	waiters map[string]waiter // by command id

	runCtx context.Context // the node's life, from Start to Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Connect joins the cluster through nc: it creates the command stream, the
// buckets and the object store when missing (the first node of a new
// cluster also creates its identity) and checks them when present. It
// retries each JetStream call until ctx ends, reporting "waiting for
// cluster quorum" while there is no answer.
func Connect(ctx context.Context, nc *nats.Conn, o Options) (*Cluster, error) {
	if err := o.setDefaults(); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c := &Cluster{opts: o, nc: nc, js: js, log: o.Logger.With("node", o.Node),
		waiters: map[string]waiter{}, checkpoints: make(chan checkpoint, 16), published: make(chan struct{}, 1)}
	c.metrics = newMetrics(o.Registerer)
	c.agr = newAgreementBook(o.Generations, o.Registerer)
	c.metrics.nodeFormat.Set(float64(o.Format))
	c.setVersion(FormatBase) // until the first survey says otherwise
	if max := nc.MaxPayload(); max < int64(o.MaxCommandBytes) {
		return nil, fmt.Errorf("cluster: %w: the NATS servers accept messages up to %d bytes, syncd publishes up to %d: set max_payload to at least %d on every server",
			ErrMisconfigured, max, o.MaxCommandBytes, o.MaxCommandBytes)
	}
	if err := c.setUp(ctx); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return c, nil
}

// ID is the cluster's identity: every node's database takes it
// (replication.StoreOptions.ID) and clients see it as welcome.database_id.
func (c *Cluster) ID() string { return c.id }

// setUp creates or checks the stream, the buckets and the identity.
func (c *Cluster) setUp(ctx context.Context) error {
	o := c.opts
	// The stream first: a node configured unlike it is refused before it
	// creates or changes anything. The cluster's identity lives in the
	// stream's metadata, set by the node that creates the stream.
	want := jetstream.StreamConfig{
		Name: StreamName, Description: "syncd: the command stream every node applies",
		Subjects: []string{Subject}, Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardOld,
		MaxAge: o.StreamMaxAge, MaxBytes: o.StreamMaxBytes, MaxMsgSize: int32(o.MaxCommandBytes),
		Storage: jetstream.FileStorage, Replicas: o.Replicas, Duplicates: 2 * time.Minute,
		DenyDelete: true, DenyPurge: true, AllowDirect: true,
		Metadata: map[string]string{metaCluster: uuid.NewString()},
	}
	if want.MaxBytes == 0 {
		want.MaxBytes = -1
	}
	err := c.retry(ctx, "open the command stream", func(ctx context.Context) error {
		s, err := c.js.Stream(ctx, StreamName)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			s, err = c.js.CreateStream(ctx, want)
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				s, err = c.js.Stream(ctx, StreamName) // another node created it first
				if errors.Is(err, jetstream.ErrStreamNotFound) {
					// The create said it exists; the server that answered
					// the lookup has not learned of it yet.
					err = errNotSettled
				}
			}
		}
		c.stream = s
		return err
	})
	if err != nil {
		return err
	}
	c.want = want
	if err := checkStream(c.stream.CachedInfo().Config, want); err != nil {
		return err
	}
	if cfg := c.stream.CachedInfo().Config; !cfg.AllowDirect {
		// A stream an earlier syncd created: nodes read their own replica
		// of it (replicaReader), which direct gets allow.
		cfg.AllowDirect = true
		if err := c.retry(ctx, "allow direct reads of the command stream", func(ctx context.Context) (err error) {
			c.stream, err = c.js.UpdateStream(ctx, cfg)
			return err
		}); err != nil {
			return err
		}
	}
	c.id = c.stream.CachedInfo().Config.Metadata[metaCluster]
	err = c.retry(ctx, "open the lease bucket", func(ctx context.Context) (err error) {
		c.lease, err = c.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: LeaseBucket, Description: "syncd: the singleton-job lease and the cluster identity",
			TTL: o.LeaseTTL, History: 1, Replicas: o.Replicas, Storage: jetstream.FileStorage,
		})
		return err
	})
	if err != nil {
		return err
	}
	if err := c.retry(ctx, "open the nodes bucket", func(ctx context.Context) (err error) {
		c.nodes, err = c.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: NodesBucket, Description: "syncd: node status and digest checkpoints",
			History: 1, Replicas: o.Replicas, Storage: jetstream.FileStorage,
		})
		return err
	}); err != nil {
		return err
	}
	return c.retry(ctx, "open the snapshot store", func(ctx context.Context) (err error) {
		c.objects, err = c.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket: SnapshotBucket, Description: "syncd: state snapshots for new and lagging nodes",
			Replicas: o.Replicas, Storage: jetstream.FileStorage,
		})
		return err
	})
}

// checkStream refuses a stream syncd did not create for this use, or one
// whose settings drifted from this node's (streamProblems).
func checkStream(got, want jetstream.StreamConfig) error {
	if problems := streamProblems(got, want); len(problems) > 0 {
		return fmt.Errorf("%w: stream %s: %s", ErrMisconfigured, StreamName, joinProblems(problems))
	}
	return nil
}

func joinProblems(p []string) string {
	s := p[0]
	for _, q := range p[1:] {
		s += "; " + q
	}
	return s
}

// retry runs fn with a per-attempt timeout until it succeeds, fails with
// an answer that retrying cannot change, or ctx ends. While attempts time
// out (no JetStream leader answers), the node reports that it waits for
// quorum.
func (c *Cluster) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, c.opts.APITimeout)
		err := fn(actx)
		cancel()
		if err == nil {
			c.quorumReached(what)
			return nil
		}
		if !retryable(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: waiting for cluster quorum: %w (last: %v)", what, ctx.Err(), err)
		}
		c.waitForQuorum(what, attempt+1, err)
		select {
		case <-time.After(min(time.Duration(attempt+1)*100*time.Millisecond, maxRetryPause)):
		case <-ctx.Done():
		}
	}
}

// maxRetryPause caps the pause between attempts of a JetStream call. An
// attempt during a leader election fails at once (no responders), so a
// short pause costs little, and a long one is time writers wait after the
// new leader is there.
const maxRetryPause = 250 * time.Millisecond

// waitForQuorum marks the node as waiting for the cluster's quorum: a
// JetStream call of step what got no answer. The log says so at most every
// quorumLogEvery.
func (c *Cluster) waitForQuorum(what string, attempt int, err error) {
	c.waitingQuorum.Store(true)
	c.metrics.waitingQuorum.Set(1)
	now := time.Now().UnixNano()
	if last := c.quorumLogged.Load(); now-last > int64(quorumLogEvery) && c.quorumLogged.CompareAndSwap(last, now) {
		c.log.Warn("waiting for cluster quorum", "step", what, "attempt", attempt, "err", err)
	}
}

// quorumLogEvery rate-limits the "waiting for cluster quorum" log.
const quorumLogEvery = 10 * time.Second

// quorumReached ends a wait for quorum: a JetStream call of step what was
// answered.
func (c *Cluster) quorumReached(what string) {
	if c.waitingQuorum.CompareAndSwap(true, false) {
		c.log.Info("cluster quorum reached", "step", what)
		c.metrics.waitingQuorum.Set(0)
	}
}

// errNotSettled: the JetStream servers do not agree yet (one said the
// stream exists, another that it does not), as while three nodes start
// together and the metadata leader is being elected. Retried.
var errNotSettled = errors.New("JetStream metadata not settled")

// errCodeDuplicateInProcess is JetStream's answer to a publish whose
// message id an earlier publish still being stored carries (409, "duplicate
// message id is in process"): a retry after an attempt's timeout gets it
// while the stream has no quorum.
const errCodeDuplicateInProcess jetstream.ErrorCode = 10158

// errCodeNoPeers is JetStream's answer to creating a stream or bucket with
// more replicas than the servers it knows (400, "no suitable peers for
// placement"): nodes started together create them before every server has
// joined. Retried until the start's timeout, whose error then names it.
const errCodeNoPeers jetstream.ErrorCode = 10005

// retryable reports whether a JetStream error may go away by itself (no
// leader yet, a timeout, a lost connection) rather than being an answer.
func retryable(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		// 5xx: JetStream temporarily unavailable, no leader. A publish's
		// earlier attempt still being stored: its outcome comes later. Too
		// few servers for the replicas: the others have not joined yet.
		return apiErr.Code >= 500 || apiErr.ErrorCode == errCodeDuplicateInProcess || apiErr.ErrorCode == errCodeNoPeers
	}
	return errors.Is(err, errNotSettled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrDisconnected) || errors.Is(err, errNoReplica)
}

// Start runs the node on store, opened with replication.StoreOptions.ID
// set to ID: the materializer from the store's applied position, the
// publisher, the lease loop and the status reports. onApplied, when not
// nil, is called on the materializer's goroutine after every commit that
// appended to the oplog, with the oplog's new head, or compacted it (with
// 0 when it only compacted: the feed tail must take in the new floors); it
// must return quickly.
// Stop the node with Close.
func (c *Cluster) Start(store *replication.Store, onApplied func(oplogHead uint64)) error {
	if store.ID != c.id {
		return fmt.Errorf("cluster: %w: the store is database %s, the stream is cluster %s: point the node at its own cluster's NATS (--nats-url, --nats-route), or move its data file aside to join this cluster as a new node", ErrOtherCluster, store.ID, c.id)
	}
	pos, err := readPosition(context.Background(), store.DB)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	unverified, err := readUnverified(context.Background(), store.DB)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if unverified {
		c.unverified.Store(true)
		c.metrics.recordsUnverified.Set(1)
	}
	c.store = store
	c.onApplied = onApplied
	c.setApplied(pos)
	ctx, cancel := context.WithCancel(context.Background())
	c.runCtx, c.cancel = ctx, cancel
	c.pub = newPublisher(c)
	c.wg.Add(4)
	go func() { defer c.wg.Done(); c.pub.run(ctx) }()
	go func() { defer c.wg.Done(); c.materialize(ctx) }()
	go func() { defer c.wg.Done(); c.runLease(ctx) }()
	go func() { defer c.wg.Done(); c.runReports(ctx) }()
	return nil
}

// Close stops the node's goroutines and waits for them. Pending submits
// are answered with ErrClosed. The NATS connection stays the caller's.
func (c *Cluster) Close() {
	if c.cancel != nil {
		c.cancel()
	}
	c.wg.Wait()
	c.failWaiters(ErrClosed)
}

// ErrClosed answers submits of a closing node; nothing of them is known to
// be applied (resend, the ledger answers duplicates).
var ErrClosed = errors.New("cluster node closed")

// Ready returns nil when the node may serve: it is not waiting for quorum,
// has not failed (divergence, a gap it must restore from a snapshot), the
// command stream exists with the settings syncd requires
// (ErrMisconfigured, ErrStreamDeleted), its configuration agrees with
// the cluster's (ErrConfigMismatch), it does not wait at a command of a
// later format (ErrNeedsUpgrade), and, when it restored a snapshot, a
// records check agreed with its peers since (ErrRecordsUnverified).
func (c *Cluster) Ready() error {
	for _, p := range []*atomic.Pointer[error]{&c.failed, &c.misconfig, &c.mismatch, &c.blocked} {
		if errp := p.Load(); errp != nil {
			return *errp
		}
	}
	if c.unverified.Load() {
		return c.unverifiedError()
	}
	if c.waitingQuorum.Load() {
		return ErrWaitingForQuorum
	}
	return nil
}

// ErrWaitingForQuorum is Ready's answer while the node cannot reach a
// majority of the NATS servers: a wait, not a fault of this node.
var ErrWaitingForQuorum = errors.New("waiting for cluster quorum")

// Refuses reports why this node must not serve devices at all, reads
// included: it diverged, its stream is misconfigured, its configuration
// differs from the cluster's (a token file missing a revocation, other
// model declarations), it waits for an upgrade, or its restored records
// are not verified yet. nil while it serves, and while it
// only waits for quorum.
func (c *Cluster) Refuses() error {
	if err := c.Ready(); err != nil && !errors.Is(err, ErrWaitingForQuorum) {
		return err
	}
	return nil
}

// fail marks the node as unable to serve, loudly.
func (c *Cluster) fail(err error) {
	if c.failed.CompareAndSwap(nil, &err) {
		c.log.Error("this node stops serving", "err", err)
		c.metrics.failed.Set(1)
	}
}

// Status is what a node reports about itself.
type Status struct {
	Node       string `json:"node"`
	AppliedSeq uint64 `json:"applied_seq"`
	// Digest is the node's running state digest (hex) after AppliedSeq:
	// two nodes at the same AppliedSeq with different digests diverged.
	Digest     string    `json:"digest"`
	StreamHead uint64    `json:"stream_head"`
	Lag        uint64    `json:"lag"`
	LeaseHeld  bool      `json:"lease_held"`
	Ready      bool      `json:"ready"`
	Problem    string    `json:"problem,omitempty"`
	At         time.Time `json:"at"`
	// Agreement is a hash per named part of the configuration every node
	// must share (Options.Agreement), as of the node's last report.
	Agreement map[string]string `json:"agreement,omitempty"`
	// Format is the highest command stream format the node understands
	// (Formats); nodes of releases before formats leave it out (0, read
	// as FormatBase). ClusterVersion is the cluster version as the node
	// last surveyed it: the formats it publishes.
	Format         int `json:"format,omitempty"`
	ClusterVersion int `json:"cluster_version,omitempty"`
	// LeaseToken is the singleton-job lease's fencing token (its
	// revision) while the node holds it, 0 otherwise.
	LeaseToken uint64 `json:"lease_token,omitempty"`
	// LastDigestCheck and LastRecordsCheck are the node's last
	// comparisons of its digest with its peers' (nil before the first).
	LastDigestCheck  *Check `json:"last_digest_check,omitempty"`
	LastRecordsCheck *Check `json:"last_records_check,omitempty"`
}

// Status returns this node's status now.
func (c *Cluster) Status() Status {
	st := Status{Node: c.opts.Node, StreamHead: c.streamHead.Load(), LeaseHeld: c.leaseHeld.Load(), At: c.opts.Now().UTC(),
		Format: c.opts.Format, ClusterVersion: int(c.version.Load())}
	if a := c.applied.Load(); a != nil { // nil before Start
		st.AppliedSeq, st.Digest = a.seq, a.digest
	}
	st.Lag = st.StreamHead - min(st.StreamHead, st.AppliedSeq)
	if st.LeaseHeld {
		st.LeaseToken = c.leaseToken.Load()
	}
	st.LastDigestCheck, st.LastRecordsCheck = c.lastDigestCheck.Load(), c.lastRecordsCheck.Load()
	if a := c.agreed.Load(); a != nil {
		st.Agreement = *a
	}
	if err := c.Ready(); err != nil {
		st.Problem = err.Error()
	} else {
		st.Ready = true
	}
	return st
}

// appliedState is the materializer's committed position as Status shows
// it: the seq and the digest after it, read together.
type appliedState struct {
	seq    uint64
	digest string
}

// setApplied publishes pos, just committed, to Status.
func (c *Cluster) setApplied(pos position) {
	c.applied.Store(&appliedState{seq: pos.applied, digest: hex.EncodeToString(pos.digest)})
}

// Nodes returns the last status every node reported (itself included).
func (c *Cluster) Nodes(ctx context.Context) ([]Status, error) {
	keys, err := c.nodes.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var out []Status
	for key := range keys.Keys() {
		if len(key) < 7 || key[:7] != "status." {
			continue
		}
		e, err := c.nodes.Get(ctx, key)
		if err != nil {
			continue
		}
		var st Status
		if decodeJSON(e.Value(), &st) == nil {
			out = append(out, st)
		}
	}
	return out, nil
}

func formatSeq(seq uint64) string { return strconv.FormatUint(seq, 10) }
