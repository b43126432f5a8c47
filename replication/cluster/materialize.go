package cluster

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/syncd-dev/syncd/ledger"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// maxApplyGroup bounds the stream messages applied in one transaction.
const maxApplyGroup = 64

// GapError says the stream no longer holds the message after this node's
// position: the stream's retention removed it, so this node cannot catch
// up by consuming. It must restore a snapshot (RestoreSnapshot, run at the
// next start) and consume from there; it never skips.
type GapError struct {
	Applied uint64 // this node's position
	Next    uint64 // the first message the stream delivered
}

func (e *GapError) Error() string {
	return fmt.Sprintf("stream gap: this node applied up to %d, the stream's next message is %d; restart the node to restore from a snapshot", e.Applied, e.Next)
}

// position is what the materializer has applied: kept in the store's
// database, in the same transaction as the state it describes.
type position struct {
	applied  uint64 // stream seq
	digest   []byte // running digest after applied
	jobToken uint64 // the fencing token of the last applied job
	jobAt    int64  // the stream time of the last applied job, unix nanoseconds (0: none recorded)
	checkAt  int64  // the stream time of the last records check digested, unix nanoseconds (0: none)
}

const (
	metaApplied  = "cluster_applied_seq"
	metaDigest   = "cluster_digest"
	metaJobToken = "cluster_job_token"
	metaJobAt    = "cluster_job_token_at"
	metaCheckAt  = "cluster_records_checked_at"
)

// readPosition reads the materializer's position from db (zero when it
// never applied anything).
func readPosition(ctx context.Context, db *sql.DB) (position, error) {
	var p position
	rows, err := db.QueryContext(ctx, `SELECT name, value FROM syncd_meta WHERE name IN (?, ?, ?, ?, ?)`, metaApplied, metaDigest, metaJobToken, metaJobAt, metaCheckAt)
	if err != nil {
		return p, fmt.Errorf("read the applied position: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return p, err
		}
		switch name {
		case metaApplied:
			p.applied, err = strconv.ParseUint(value, 10, 64)
		case metaDigest:
			p.digest, err = hex.DecodeString(value)
		case metaJobToken:
			p.jobToken, err = strconv.ParseUint(value, 10, 64)
		case metaJobAt:
			p.jobAt, err = strconv.ParseInt(value, 10, 64)
		case metaCheckAt:
			p.checkAt, err = strconv.ParseInt(value, 10, 64)
		}
		if err != nil {
			return p, fmt.Errorf("read the applied position: %s: %w", name, err)
		}
	}
	return p, rows.Err()
}

func writePosition(ctx context.Context, tx *sql.Tx, p position) error {
	for name, value := range map[string]string{
		metaApplied:  strconv.FormatUint(p.applied, 10),
		metaDigest:   hex.EncodeToString(p.digest),
		metaJobToken: strconv.FormatUint(p.jobToken, 10),
		metaJobAt:    strconv.FormatInt(p.jobAt, 10),
		metaCheckAt:  strconv.FormatInt(p.checkAt, 10),
	} {
		if _, err := tx.ExecContext(ctx, `INSERT INTO syncd_meta (name, value) VALUES (?, ?)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`, name, value); err != nil {
			return fmt.Errorf("store the applied position: %w", err)
		}
	}
	return nil
}

// materialize applies the stream to the store, from the store's position,
// until the node closes or cannot go on (a gap, a command it cannot apply):
// then the node fails and stops serving.
func (c *Cluster) materialize(ctx context.Context) {
	pos, err := readPosition(ctx, c.store.DB)
	if err != nil {
		c.fail(err)
		return
	}
	writer, err := c.store.DB.Conn(ctx)
	if err != nil {
		c.fail(fmt.Errorf("open the materializer's connection: %w", err))
		return
	}
	defer writer.Close()
	m := &materializer{c: c, writer: writer, pos: pos}
	pause := minRestartPause
	for ctx.Err() == nil {
		before := m.pos.applied
		err := m.consume(ctx)
		if ctx.Err() != nil {
			return
		}
		var gap *GapError
		if errors.As(err, &gap) {
			err = m.confirmGap(ctx, gap)
		}
		// A command of a later format: wait there, neither applying nor
		// skipping it, until this node is upgraded.
		var later *FormatError
		if errors.As(err, &later) {
			c.waitForUpgrade(later)
			return
		}
		// A gap, an authenticated command this node cannot apply as its
		// peers may have, or a batch the decision code found malformed
		// after it passed every check: stopping is the one safe answer.
		// Whatever else a message holds is refused and skipped (check).
		if errors.As(err, &gap) || errors.Is(err, ErrBadCommand) || errors.Is(err, replication.ErrMalformedBatch) {
			c.fail(err)
			return
		}
		c.log.Warn("reading the command stream failed; reading again", "applied", m.pos.applied, "err", err)
		if m.pos.applied > before {
			pause = minRestartPause
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
		}
		pause = min(2*pause, time.Second)
	}
}

// minRestartPause is the first pause before the materializer reads again
// after a read or an apply failed; it doubles up to a second while they
// fail without applying anything.
const minRestartPause = 50 * time.Millisecond

// confirmGap asks the stream whether the message after this node's position
// is really gone. A read may skip messages without the stream having lost
// them (a replica that answered while it was catching up): then reading
// again from the position fills the gap. Only a stream whose first
// message is past the position makes the gap this node's, to be filled
// from a snapshot.
func (m *materializer) confirmGap(ctx context.Context, gap *GapError) error {
	var first uint64
	err := m.c.retry(ctx, "check a gap in the stream", func(ctx context.Context) error {
		s, err := m.c.js.Stream(ctx, StreamName)
		if err != nil {
			return err
		}
		first = s.CachedInfo().State.FirstSeq
		return nil
	})
	if err != nil {
		return err
	}
	if first > gap.Applied+1 {
		return gap
	}
	return fmt.Errorf("a read skipped from stream seq %d to %d; the stream still holds them", gap.Applied, gap.Next)
}

// materializer is the state of the node's one applier goroutine.
type materializer struct {
	c      *Cluster
	writer *sql.Conn
	pos    position

	refusedLogged time.Time // when a refusal was last logged
	refusedQuiet  int       // refusals not logged since
}

// minReadTimeout bounds a read of the replica, doubling up to the API
// timeout while reads fail. NATS hands a read to any replica, not
// necessarily the local one, and one sent to a server that just died gets
// no answer: a short first bound is what lets the node read again from a
// live one within a moment, the doubling what keeps a slow machine from
// abandoning every read.
const minReadTimeout = 250 * time.Millisecond

// consume reads the stream from the position, from the node's own replica
// (replicaReader), and applies it, each read's messages in one
// transaction. It returns when the node closes or a read or an apply
// fails.
//
// An idle node reads again every Poll, to see what other nodes published.
// While the stream is known to hold more than this node applied (its own
// publish was acknowledged, or another read said so) but its replica does
// not have it yet, it reads again sooner, from a millisecond up to Poll.
func (m *materializer) consume(ctx context.Context) error {
	c := m.c
	r, err := newReplicaReader(c.nc)
	if err != nil {
		return err
	}
	defer r.close()
	var wait time.Duration
	timeout := minReadTimeout
	for {
		var group []streamMsg
		err := c.retry(ctx, "read the command stream", func(ctx context.Context) (err error) {
			rctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			group, err = r.read(rctx, m.pos.applied+1)
			if err != nil {
				timeout = min(2*timeout, c.opts.APITimeout)
			}
			return err
		})
		if err != nil {
			return err
		}
		timeout = minReadTimeout
		if len(group) > 0 {
			if err := m.apply(ctx, group); err != nil {
				return err
			}
			wait = 0
			continue
		}
		if c.streamHead.Load() > m.pos.applied {
			wait = min(max(2*wait, time.Millisecond), c.opts.Poll)
		} else {
			wait = c.opts.Poll
		}
		select {
		case <-time.After(wait):
		case <-c.published:
			wait = 0
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// answer is a command's outcome for its edge.
type answer struct {
	id string
	applied
}

// apply applies group in one transaction with the new position.
func (m *materializer) apply(ctx context.Context, group []streamMsg) (err error) {
	c := m.c
	// A group is applied whole once begun, and on a context that cannot be
	// cancelled: with one that can, the SQLite driver starts a goroutine
	// per statement to watch it.
	ctx = context.WithoutCancel(ctx)
	start := time.Now()
	pos := m.pos
	var answers []answer
	var refusals []*RefusedError
	var checkpoints []checkpoint
	var oplogHead uint64
	var compacted bool // a job of the group removed oplog entries
	var batches []*replication.Batch
	var last streamMsg
	tx, err := m.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("apply: begin: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	st := c.store.In(tx)
	for _, msg := range group {
		seq := msg.seq
		c.noteHead(seq + msg.pending)
		last = msg
		if seq <= pos.applied {
			continue // read again after a read that failed
		}
		if seq != pos.applied+1 {
			return &GapError{Applied: pos.applied, Next: seq}
		}
		cmd, refused, err := m.check(msg, pos)
		if err != nil {
			return err
		}
		if refused != nil {
			pos.digest = chainRefused(pos.digest, seq, refused.Reason)
			pos.applied = seq
			refusals = append(refusals, refused)
			if seq%c.opts.CheckpointEvery == 0 {
				checkpoints = append(checkpoints, checkpoint{Node: c.opts.Node, Seq: seq, Digest: hex.EncodeToString(pos.digest)})
			}
			continue
		}
		var fxs []replication.Effects
		var jobRows int64
		var records []byte // the records digest of a records check
		if cmd.Job != nil && cmd.Job.Kind == JobCheckRecords {
			if records, err = m.checkRecords(ctx, tx, &pos, msg.at); err != nil {
				return fmt.Errorf("apply stream seq %d: %w", seq, err)
			}
		} else if cmd.Job != nil {
			if jobRows, err = m.applyJob(ctx, tx, &pos, cmd.Job, msg.at); err != nil {
				return fmt.Errorf("apply stream seq %d: %w", seq, err)
			}
			compacted = compacted || (cmd.Job.Kind == JobCompactOplog && jobRows > 0)
		}
		for i := range cmd.Batches {
			batches = append(batches, &cmd.Batches[i])
			fx, err := replication.Apply(ctx, st, &cmd.Batches[i])
			if err != nil {
				return fmt.Errorf("apply stream seq %d: %w", seq, err)
			}
			if n := len(fx.Entries); n > 0 {
				oplogHead = fx.Entries[n-1].Seq
			}
			fxs = append(fxs, fx)
		}
		pos.digest = chain(pos.digest, seq, fxs, jobRows)
		if records != nil {
			pos.digest = chainRecords(pos.digest, seq, records)
		}
		pos.applied = seq
		answers = append(answers, answer{id: cmd.ID, applied: applied{fxs: fxs, jobRows: jobRows}})
		if seq%c.opts.CheckpointEvery == 0 || records != nil {
			checkpoints = append(checkpoints, checkpoint{Node: c.opts.Node, Seq: seq, Digest: hex.EncodeToString(pos.digest), Records: records != nil})
		}
	}
	if pos.applied == m.pos.applied {
		return tx.Rollback()
	}
	if err := writePosition(ctx, tx, pos); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("apply: commit: %w", err)
	}
	// The materializer is the node's one writer: with automatic
	// checkpoints off, its checkpointer keeps the log bounded.
	c.store.Wrote(replication.CheckpointWeight(batches))
	m.pos = pos
	c.setApplied(pos)
	c.metrics.appliedSeq.Set(float64(pos.applied))
	c.metrics.applySeconds.Observe(time.Since(start).Seconds())
	if last.pending == 0 || last.at.IsZero() {
		c.metrics.lagSeconds.Set(0)
	} else {
		c.metrics.lagSeconds.Set(time.Since(last.at).Seconds())
	}
	if oplogHead > 0 {
		c.store.Committed(oplogHead)
	}
	if (oplogHead > 0 || compacted) && c.onApplied != nil {
		c.onApplied(oplogHead)
	}
	for _, a := range answers {
		if w := c.takeWaiter(a.id); w != nil {
			w(a.applied, nil)
		}
	}
	for _, r := range refusals {
		m.refused(r)
	}
	for _, cp := range checkpoints {
		c.checkpoint(cp)
	}
	return nil
}

// applyJob runs a job, stored in the stream at at, inside tx, unless its
// fencing token is older than the last applied job's while that one's
// fence holds (staleJob). It returns the rows the job removed.
func (m *materializer) applyJob(ctx context.Context, tx *sql.Tx, pos *position, j *Job, at time.Time) (int64, error) {
	c := m.c
	if staleJob(*pos, j.Token, at) {
		c.metrics.jobs.WithLabelValues(string(j.Kind), "stale_token").Inc()
		c.log.Info("ignored a job of an older lease", "kind", j.Kind, "token", j.Token, "newest", pos.jobToken)
		return 0, nil
	}
	pos.jobToken, pos.jobAt = j.Token, at.UnixNano()
	var n int64
	var err error
	switch j.Kind {
	case JobCompactOplog:
		n, err = c.store.Log.CompactIn(ctx, tx, j.Now, j.Limit)
	case JobPruneConflicts:
		n, err = c.store.Conflicts.PruneIn(ctx, tx, j.Now, j.Limit)
	case JobPruneLedger:
		var evicted int
		evicted, _, err = c.store.Ledger.In(tx).Prune(ctx, j.Now, j.Limit)
		n = int64(evicted)
	case jobCompactWholeOplog:
		return 0, fmt.Errorf("%w: job %q is an older syncd's compaction of the whole oplog, which this release (per-tenant retention) cannot apply as its peers did: upgrade every node at once (docs/operations.md, Upgrades), then move this node's data aside so that it restores a snapshot", ErrBadCommand, j.Kind)
	default:
		return 0, fmt.Errorf("%w: unknown job %q", ErrBadCommand, j.Kind)
	}
	if err != nil {
		return 0, err
	}
	c.metrics.jobs.WithLabelValues(string(j.Kind), "applied").Inc()
	return n, nil
}

// chain is the running digest: what this node applied at seq, chained to
// everything before. Two nodes with the same digest at a seq applied the
// same decisions in the same order, whichever releases they run: each
// batch's effects are hashed in their digest form (digestEffects), whose
// bytes a release that adds a member to the effects leaves unchanged while
// the member is empty.
func chain(prev []byte, seq uint64, fxs []replication.Effects, jobRows int64) []byte {
	h := sha256.New()
	h.Write(prev)
	h.Write(binary.BigEndian.AppendUint64(nil, seq))
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(jobRows)))
	enc := json.NewEncoder(h)
	for i := range fxs {
		_ = enc.Encode(newDigestEffects(&fxs[i])) // writing to a hash cannot fail
	}
	return h.Sum(nil)
}

// digestEffects is replication.Effects as the running digest hashes it:
// the JSON of the effects as the first release with a cluster wrote them,
// and each member added since only where it is not empty. Nodes of the
// release before scopes hash oplog entries without ScopeOld, Member and
// Grants; a node of this release hashes them only on entries of scoped
// models, which no node applies before every node declares the same scopes
// (the configuration agreement), so a mixed cluster's digests agree. A
// member added to Effects or to anything it holds is added here with
// omitempty (or the equivalent), or a rolling upgrade ends in every
// upgraded node diverging from the older ones
// (TestDigestFormOfEffectsIsThePreviousRelease's).
type digestEffects struct {
	Results   []syncproto.Result
	Entries   []digestEntry
	Conflicts []replication.ConflictEntry
	Decisions []ledger.Decision
	Stale     []int
}

// digestEntry is an oplog entry's digest form: the members added with
// partial sync are left out when empty (they come after the others, as
// in replication.Entry).
type digestEntry struct {
	replication.Entry
	ScopeOld string                    `json:",omitempty"`
	Member   string                    `json:",omitempty"`
	Grants   []replication.GrantChange `json:",omitempty"`
}

func newDigestEffects(fx *replication.Effects) *digestEffects {
	d := &digestEffects{Results: fx.Results, Conflicts: fx.Conflicts, Decisions: fx.Decisions, Stale: fx.Stale}
	if fx.Entries != nil {
		d.Entries = make([]digestEntry, len(fx.Entries))
		for i, e := range fx.Entries {
			d.Entries[i] = digestEntry{Entry: e, ScopeOld: e.ScopeOld, Member: e.Member, Grants: e.Grants}
		}
	}
	return d
}

// chainRefused is the running digest after the command at seq was refused
// for reason: the skip is part of what the nodes compare.
func chainRefused(prev []byte, seq uint64, reason string) []byte {
	h := sha256.New()
	h.Write(prev)
	h.Write(binary.BigEndian.AppendUint64(nil, seq))
	h.Write([]byte("refused " + reason))
	return h.Sum(nil)
}

// refused counts and logs a command the materializer skipped, and answers
// its edge when it was this node's own. The log is rate-limited: a flood
// of refused messages logs one line per refusalLogEvery, with the count
// of those it did not log.
func (m *materializer) refused(r *RefusedError) {
	c := m.c
	c.metrics.refused.WithLabelValues(r.Reason).Inc()
	if r.id != "" {
		if w := c.takeWaiter(r.id); w != nil {
			w(applied{}, r)
		}
	}
	now := time.Now()
	if now.Sub(m.refusedLogged) < refusalLogEvery {
		m.refusedQuiet++
		return
	}
	c.log.Warn("refused a command; it is skipped on every node", "seq", r.Seq, "reason", r.Reason, "err", r.Err, "not_logged_since_last", m.refusedQuiet)
	m.refusedLogged, m.refusedQuiet = now, 0
}

// refusalLogEvery rate-limits the log of refused commands.
const refusalLogEvery = 10 * time.Second
