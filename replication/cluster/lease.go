package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
)

const leaseKey = "jobs"

// runLease competes for the singleton-job lease and, while it holds it,
// publishes the retention jobs and stores snapshots. Ownership is decided
// only by a create or an update succeeding, never by reading the key (a
// read may be served stale by a follower); the key's revision after the
// create or the last renewal is the fencing token every job carries. The
// bucket's TTL (not a per-key TTL, which an update would drop) expires a
// lease whose holder stopped renewing.
func (c *Cluster) runLease(ctx context.Context) {
	renewEvery := c.opts.LeaseTTL / 3
	for ctx.Err() == nil {
		token, err := c.lease.Create(ctx, leaseKey, []byte(c.opts.Node))
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
				c.log.Debug("lease not acquired", "err", err)
			}
			sleep(ctx, renewEvery)
			continue
		}
		c.log.Info("acquired the singleton-job lease", "token", token)
		c.holdLease(ctx, token, renewEvery)
		c.log.Info("released the singleton-job lease")
	}
}

// holdLease renews the lease and runs the jobs until a renewal fails or
// ctx ends.
func (c *Cluster) holdLease(ctx context.Context, token uint64, renewEvery time.Duration) {
	c.leaseToken.Store(token)
	c.leaseHeld.Store(true)
	c.metrics.leaseHeld.Set(1)
	defer func() {
		c.leaseHeld.Store(false)
		c.metrics.leaseHeld.Set(0)
	}()
	renew := time.NewTicker(renewEvery)
	defer renew.Stop()
	jobs := time.NewTicker(c.opts.JobInterval)
	defer jobs.Stop()
	snapshots := time.NewTicker(c.opts.SnapshotEvery)
	defer snapshots.Stop()
	checks := time.NewTicker(c.opts.RecordsCheckEvery)
	defer checks.Stop()
	var snapAt uint64 // the seq of the last snapshot this holder stored
	for {
		select {
		case <-ctx.Done():
			// Let a successor take over at once rather than after the TTL.
			dctx, cancel := context.WithTimeout(context.Background(), c.opts.APITimeout)
			_ = c.lease.Delete(dctx, leaseKey, jetstream.LastRevision(token))
			cancel()
			return
		case <-renew.C:
			rctx, cancel := context.WithTimeout(ctx, renewEvery)
			next, err := c.lease.Update(rctx, leaseKey, []byte(c.opts.Node), token)
			cancel()
			if err != nil {
				c.log.Warn("lease renewal failed; giving the lease up", "err", err)
				return
			}
			token = next
			c.leaseToken.Store(token)
		case <-jobs.C:
			c.publishJobs(ctx, token)
		case <-snapshots.C:
			snapAt = c.takeSnapshot(ctx, snapAt)
		case <-checks.C:
			// Until every node understands records checks, none is
			// published (ErrFormatNotInUse): the format gate.
			if err := c.publishRecordsCheck(ctx, token); err != nil && !errors.Is(err, ErrFormatNotInUse) && ctx.Err() == nil {
				c.log.Warn("records check not published", "err", err)
			}
		}
	}
}

// ErrNotLeaseHolder is returned by RunRetention on a node that does not
// hold the singleton-job lease: ask the holder (syncctl status names it).
var ErrNotLeaseHolder = errors.New("this node does not hold the singleton-job lease")

// RunRetention runs a round of retention jobs now, as the lease holder does
// every JobInterval, and returns once this node applied them. Only the
// lease holder may (ErrNotLeaseHolder).
func (c *Cluster) RunRetention(ctx context.Context) error {
	if !c.leaseHeld.Load() {
		return ErrNotLeaseHolder
	}
	c.publishJobs(ctx, c.leaseToken.Load())
	return nil
}

// maxJobChunks bounds the chunks of one kind a retention round publishes.
const maxJobChunks = 100

// publishJobs publishes one round of retention jobs under token: for each
// kind, chunks of JobLimit rows, the next one once this node applied the
// previous one and it removed a full chunk, so that retention keeps up with
// the write rate without one long transaction on every node.
func (c *Cluster) publishJobs(ctx context.Context, token uint64) {
	now := c.opts.Now().UTC()
	for _, kind := range []JobKind{JobCompactOplog, JobPruneConflicts, JobPruneLedger} {
		for range maxJobChunks {
			rows, err := c.runJob(ctx, &Job{Kind: kind, Token: token, Now: now, Limit: c.opts.JobLimit})
			if err != nil {
				c.log.Warn("job not run", "kind", kind, "err", err)
				return
			}
			if rows < int64(c.opts.JobLimit) {
				break
			}
		}
	}
}

// runJob publishes job and waits until this node applied it, returning the
// rows it removed.
func (c *Cluster) runJob(ctx context.Context, job *Job) (int64, error) {
	cmd := Command{ID: uuid.NewString(), Job: job}
	done := make(chan applied, 1)
	c.addWaiter(cmd.ID, func(a applied, err error) {
		if err == nil {
			done <- a
		}
		close(done)
	})
	if _, err := c.publish(ctx, cmd); err != nil {
		c.takeWaiter(cmd.ID)
		return 0, err
	}
	select {
	case a, ok := <-done:
		if !ok {
			return 0, ErrOutcomeUnknown
		}
		return a.jobRows, nil
	case <-ctx.Done():
		c.takeWaiter(cmd.ID)
		return 0, ctx.Err()
	case <-time.After(c.opts.CommitTimeout):
		c.takeWaiter(cmd.ID)
		return 0, ErrOutcomeUnknown
	}
}

// checkpoint is one node's digest at one stream seq. Records marks the
// seq of a records check: the digest there covers record contents.
type checkpoint struct {
	Node    string `json:"node"`
	Seq     uint64 `json:"seq"`
	Digest  string `json:"digest"`
	Records bool   `json:"records,omitempty"`
}

// checkpoint hands a checkpoint of this node to the report loop.
func (c *Cluster) checkpoint(cp checkpoint) {
	select {
	case c.checkpoints <- cp:
	default:
		c.log.Warn("digest checkpoint dropped: the report loop is behind", "seq", cp.Seq)
	}
}

// reportEvery is how often a node publishes its status.
const reportEvery = 2 * time.Second

// runReports publishes this node's status and digest checkpoints, and
// compares its digests with its peers': a node that disagrees with its
// peers at the same seq, and agrees with fewer than disagree, stops
// serving rather than serve divergent data.
func (c *Cluster) runReports(ctx context.Context) {
	// The peers' newest checkpoints first, then every update: a node that
	// reaches a seq after its peers reported there (catching up, or
	// restored) still compares its digest with theirs.
	watcher, err := c.nodes.Watch(ctx, "digest.*")
	if err != nil {
		c.log.Warn("cannot watch peer digests", "err", err)
	}
	var peerDigests <-chan jetstream.KeyValueEntry
	if watcher != nil {
		defer watcher.Stop()
		peerDigests = watcher.Updates()
	}
	seen := newDigestBook(c.opts.Node)
	tick := time.NewTicker(reportEvery)
	defer tick.Stop()
	c.watchStream(ctx)
	c.report(ctx)
	peers := c.survey(ctx)
	if c.unverified.Load() {
		// Once peers' checkpoints are watched and the cluster version
		// known: a check published before would be compared with nothing.
		c.wg.Add(1)
		go func() { defer c.wg.Done(); c.verifyRecords(ctx) }()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			c.watchStream(ctx)
			c.report(ctx)
			peers = c.survey(ctx)
			c.observeSnapshotAge(ctx)
		case cp := <-c.checkpoints:
			c.putJSON(ctx, "digest."+cp.Node, cp)
			c.judge(ctx, seen.add(cp), &peers)
		case e, ok := <-peerDigests:
			if !ok {
				peerDigests = nil
				continue
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var cp checkpoint
			if json.Unmarshal(e.Value(), &cp) == nil && cp.Node != c.opts.Node {
				c.judge(ctx, seen.add(cp), &peers)
			}
		}
	}
}

// survey reads every node's status, compares this node's configuration
// with the live peers' (surveyAgreement), computes the cluster version
// (clusterVersion), and returns how many live peers there are. When the
// statuses cannot be read, the agreement and the version keep their last
// verdict.
func (c *Cluster) survey(ctx context.Context) int {
	nodes, err := c.readNodes(ctx)
	if err != nil {
		return 0
	}
	c.surveyAgreement(ctx, nodes)
	c.setVersion(clusterVersion(c.opts.Format, c.opts.Node, nodes, c.opts.Now()))
	return c.countLive(nodes)
}

// livePeers counts the other nodes that reported their status recently.
func (c *Cluster) livePeers(ctx context.Context) int {
	nodes, err := c.readNodes(ctx)
	if err != nil {
		return 0
	}
	return c.countLive(nodes)
}

// readNodes is Nodes within one API timeout.
func (c *Cluster) readNodes(ctx context.Context) ([]Status, error) {
	lctx, cancel := context.WithTimeout(ctx, c.opts.APITimeout)
	defer cancel()
	return c.Nodes(lctx)
}

// servingPeers counts the other nodes that reported recently that they
// serve.
func (c *Cluster) servingPeers(ctx context.Context) int {
	nodes, err := c.readNodes(ctx)
	if err != nil {
		return math.MaxInt // no verdict without the peers
	}
	n := 0
	for _, st := range nodes {
		if st.Node != c.opts.Node && st.Ready && c.opts.Now().Sub(st.At) < 5*reportEvery {
			n++
		}
	}
	return n
}

func (c *Cluster) countLive(nodes []Status) int {
	n := 0
	for _, st := range nodes {
		if st.Node != c.opts.Node && c.opts.Now().Sub(st.At) < 5*reportEvery {
			n++
		}
	}
	return n
}

// watchStream asks the stream for its head, every report: the head
// Status and the lag show is then the stream's own, and an answer proves
// the stream has a quorum again. Without it a node that waited for quorum
// would stay not ready until its next publish, and a node cut off from
// its peers has none: its clients moved to other nodes.
func (c *Cluster) watchStream(ctx context.Context) {
	ictx, cancel := context.WithTimeout(ctx, c.opts.APITimeout)
	defer cancel()
	info, err := c.stream.Info(ictx)
	if err == nil && !FromLeader(info) {
		err = errNoLeader // a copy of the stream, no proof of a quorum
	}
	c.checkShape(info, err)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return // the stream is gone (checkShape): not a wait for quorum
	}
	if err != nil {
		// Whatever the error, the stream did not prove it answers.
		if ctx.Err() == nil {
			c.waitForQuorum("read the stream's head", 0, err)
		}
		return
	}
	c.setHead(info.State.LastSeq)
	c.quorumReached("read the stream's head")
}

// errNoLeader: the stream's info came from a server other than the
// stream's leader (as a node cut off from the others does, seeing none).
var errNoLeader = errors.New("the command stream's leader did not answer")

// FromLeader reports whether info, a JetStream stream's info, came from
// the stream's leader, the one server whose copy is the stream: a server
// of the stream's group that sees no leader answers with its own copy, and
// so may a new member of the group (a node that lost its disk) while it
// catches up. The server that answered is the one member of the group not
// among info's replicas; a server alone (no cluster) is its own leader.
func FromLeader(info *jetstream.StreamInfo) bool {
	if info.Cluster == nil {
		return true
	}
	if info.Cluster.Leader == "" {
		return false
	}
	for _, r := range info.Cluster.Replicas {
		if r.Name == info.Cluster.Leader {
			return false
		}
	}
	return true
}

// observeSnapshotAge sets the snapshot-age gauge from the newest
// snapshot's modification time.
func (c *Cluster) observeSnapshotAge(ctx context.Context) {
	ictx, cancel := context.WithTimeout(ctx, c.opts.APITimeout)
	defer cancel()
	info, err := c.objects.GetInfo(ictx, snapshotName)
	if err != nil {
		return // none yet, or no answer: the gauge keeps its last value
	}
	c.metrics.snapshotAge.Set(c.opts.Now().Sub(info.ModTime).Seconds())
}

// report publishes this node's status, with its configuration's
// agreement parts computed afresh.
func (c *Cluster) report(ctx context.Context) {
	a := c.agreement()
	c.agreed.Store(&a)
	c.putJSON(ctx, "status."+c.opts.Node, c.Status())
}

func (c *Cluster) putJSON(ctx context.Context, key string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, c.opts.APITimeout)
	defer cancel()
	if _, err := c.nodes.Put(pctx, key, data); err != nil && ctx.Err() == nil {
		c.log.Debug("status not published", "key", key, "err", err)
	}
}

// verdict is a comparison of this node's digest with its peers' at one seq:
// the new comparisons a checkpoint made, and the tally of every peer.
// mine is whether this node's own checkpoint at seq is known, records
// whether seq is a records check's.
type verdict struct {
	seq                 uint64
	matched, mismatched int
	agree, disagree     []string
	mine, records       bool
}

// judge counts v's comparisons and, once every live peer has reported at
// v.seq, stops this node when more peers disagree with it than agree (with
// one peer, a disagreement stops both: neither can tell which is right).
//
// At a records check, a node whose restored records wait for verification
// is verified once every live peer that serves reported there and more
// agree than disagree (or no such peer is live: a node alone has none to
// ask; a peer that stopped would never report).
func (c *Cluster) judge(ctx context.Context, v verdict, livePeers *int) {
	c.noteCheck(v)
	c.metrics.digestChecks.WithLabelValues("match").Add(float64(v.matched))
	c.metrics.digestChecks.WithLabelValues("mismatch").Add(float64(v.mismatched))
	if v.records {
		c.metrics.recordsChecks.WithLabelValues("match").Add(float64(v.matched))
		c.metrics.recordsChecks.WithLabelValues("mismatch").Add(float64(v.mismatched))
	}
	if len(v.disagree) == 0 {
		if v.records && v.mine && c.unverified.Load() && len(v.agree) >= c.servingPeers(ctx) {
			c.recordsVerified(ctx, v.seq, v.agree)
		}
		return
	}
	// A mismatch: count the live peers afresh, so that a peer whose report
	// is late is waited for rather than overruled.
	*livePeers = max(*livePeers, c.livePeers(ctx))
	if len(v.agree)+len(v.disagree) < max(*livePeers, 1) {
		return
	}
	if len(v.agree) < len(v.disagree) {
		c.fail(&DivergedError{Seq: v.seq, Peers: v.disagree, Records: v.records})
		return
	}
	if v.records && v.mine && c.unverified.Load() && len(v.agree) > len(v.disagree) {
		c.recordsVerified(ctx, v.seq, v.agree)
	}
	c.log.Error("a peer's state digest differs from this node's", "seq", v.seq, "peers", v.disagree, "agreeing", v.agree)
}

// DivergedError says this node's state differs from its peers' at the same
// stream seq. The node stops serving; an operator replaces its data (start
// it empty: it restores the newest snapshot). Records is set when the seq
// is a records check's: what differs is the contents of the records.
type DivergedError struct {
	Seq     uint64
	Peers   []string
	Records bool
}

func (e *DivergedError) Error() string {
	if e.Records {
		return "records differ from peers " + joinProblems(e.Peers) + " at the records check of stream seq " + formatSeq(e.Seq) + " (their contents, read on every node, do not digest alike): this node stops serving"
	}
	return "state digest differs from peers " + joinProblems(e.Peers) + " at stream seq " + formatSeq(e.Seq) + ": this node stops serving"
}

// digestBook remembers the recent checkpoints of every node, to compare
// this node's with its peers' at the same seq.
type digestBook struct {
	self    string
	bySeq   map[uint64]map[string]string
	records map[uint64]bool // the seqs of records checks
	order   []uint64
}

const keepCheckpoints = 32

func newDigestBook(self string) *digestBook {
	return &digestBook{self: self, bySeq: map[uint64]map[string]string{}, records: map[uint64]bool{}}
}

// add records cp and compares this node's digest at cp.Seq with the peers'.
func (b *digestBook) add(cp checkpoint) verdict {
	at, ok := b.bySeq[cp.Seq]
	if !ok {
		at = map[string]string{}
		b.bySeq[cp.Seq] = at
		b.order = append(b.order, cp.Seq)
		if len(b.order) > keepCheckpoints {
			delete(b.bySeq, b.order[0])
			delete(b.records, b.order[0])
			b.order = b.order[1:]
		}
	}
	at[cp.Node] = cp.Digest
	if cp.Records {
		b.records[cp.Seq] = true
	}
	v := verdict{seq: cp.Seq, records: b.records[cp.Seq]}
	mine, ok := at[b.self]
	if !ok {
		return v
	}
	v.mine = true
	for node, d := range at {
		if node == b.self {
			continue
		}
		fresh := cp.Node == b.self || cp.Node == node
		if d == mine {
			v.agree = append(v.agree, node)
			if fresh {
				v.matched++
			}
		} else {
			v.disagree = append(v.disagree, node)
			if fresh {
				v.mismatched++
			}
		}
	}
	slices.Sort(v.agree)
	slices.Sort(v.disagree)
	return v
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func decodeJSON(data []byte, v any) error { return json.Unmarshal(data, v) }
