package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/syncd-dev/syncd/replication"
)

// Reasons a materializer refuses a command (the reason label of
// syncd_cluster_commands_refused_total). A refused command is skipped the
// same way by every node: it changes no state, the node's position moves
// past it in the same transaction, and the running digest records the
// skip and its reason, so nodes that refused differently would disagree
// at the next checkpoint.
const (
	// RefusedUnauthenticated: the message has no authenticator, or one
	// that is not the command key's over its data.
	RefusedUnauthenticated = "unauthenticated"
	// RefusedMalformed: authenticated, but not a command of this version:
	// it does not decode, holds neither or both of batches and a job, or
	// has no stream timestamp.
	RefusedMalformed = "malformed"
	// RefusedInvalid: a batch breaks a check its edge made
	// (replication.Batch.Recheck), or a job's limit is out of range.
	RefusedInvalid = "invalid"
	// RefusedFutureStamp: a batch's time is beyond the command's stream
	// time plus the skew bound, or a write's timestamp beyond the batch's
	// time plus the skew bound.
	RefusedFutureStamp = "future_stamp"
	// RefusedJobNow: a job's Now is beyond the command's stream time plus
	// the skew bound.
	RefusedJobNow = "job_now"
	// RefusedJobToken: a job's token is beyond what the lease's revision
	// can have grown to (maxLeaseRevisionsPerSecond).
	RefusedJobToken = "job_token"
)

var refusalReasons = []string{RefusedUnauthenticated, RefusedMalformed, RefusedInvalid, RefusedFutureStamp, RefusedJobNow, RefusedJobToken}

// ErrCommandRefused is what a RefusedError is: nothing of the command was
// applied, on any node. A refused command of this node's own answers its
// batches with it (the client resends; the ledger answers duplicates).
var ErrCommandRefused = errors.New("command refused")

// RefusedError says why the command at stream seq Seq was refused.
type RefusedError struct {
	Seq    uint64
	Reason string // one of the Refused constants
	Err    error
	id     string // the command's id, when it decoded
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("command at stream seq %d refused (%s): %v", e.Seq, e.Reason, e.Err)
}

// Is makes errors.Is(err, ErrCommandRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrCommandRefused }

// maxLeaseRevisionsPerSecond bounds how fast the lease's revision, the
// jobs' fencing token, can grow: a job's token may exceed the last applied
// job's by at most one plus this many per second of stream time between
// them. The lease bucket's revision grows by one per renewal (every
// LeaseTTL/3) and per acquisition or release, orders of magnitude below
// the bound, so a current holder's token always passes, while a forged
// token of 2^64-1 (which would make every later job look stale) never
// does.
const maxLeaseRevisionsPerSecond = 1000

// jobFenceLapse is how long, in stream time, the last applied job's token
// fences off jobs with lower tokens. Past it the fence lapses and a lower
// token is accepted (and becomes the fence), so no token, however
// obtained, can hold off later jobs for longer. The materializer cannot
// read the lease bucket to learn its current revision: what it reads there
// would depend on when it applies, and replicas must decide from the log
// alone; hence a bound on growth and a lapse instead. A late job of a lost
// lease that gets through once the fence lapsed is harmless: retention as
// of its Now, which is bounded like every job's, removes what a current
// holder's job would.
const jobFenceLapse = 10 * time.Minute

// maxJobLimit bounds the rows one job command may remove per store.
const maxJobLimit = 1_000_000

// check decides whether msg, the stream's next message, is a command this
// node applies: it returns the command, or the refusal that skips it, or
// an error that must stop the node (an authenticated command of a newer
// version or format: *FormatError, at which the node waits). It reads nothing but msg, the node's options that every node
// shares (checked by the configuration agreement) and pos, the log's
// state, so every node decides alike.
func (m *materializer) check(msg streamMsg, pos position) (Command, *RefusedError, error) {
	o := m.c.opts
	var c Command
	refuse := func(reason, format string, args ...any) (Command, *RefusedError, error) {
		return Command{}, &RefusedError{Seq: msg.seq, Reason: reason, Err: fmt.Errorf(format, args...), id: c.ID}, nil
	}
	if !authentic(o.CommandKey, msg.data, msg.auth) {
		if msg.auth == "" {
			return refuse(RefusedUnauthenticated, "no %s header", HeaderAuth)
		}
		return refuse(RefusedUnauthenticated, "its %s is not the command key's", HeaderAuth)
	}
	if msg.at.IsZero() {
		return refuse(RefusedMalformed, "no stream timestamp")
	}
	if err := json.Unmarshal(msg.data, &c); err != nil {
		c = Command{}
		return refuse(RefusedMalformed, "%v", err)
	}
	switch {
	case c.Version > CommandVersion:
		return Command{}, nil, &FormatError{Seq: msg.seq, What: fmt.Sprintf("an authenticated command of version %d (this node applies version %d)", c.Version, CommandVersion), Have: o.Format}
	case c.Version != CommandVersion:
		return refuse(RefusedMalformed, "version %d", c.Version)
	case (len(c.Batches) == 0) == (c.Job == nil):
		return refuse(RefusedMalformed, "%s holds neither or both of batches and a job", c.ID)
	}
	if j := c.Job; j != nil && j.Kind != jobCompactWholeOplog {
		if f, ok := jobFormats[j.Kind]; !ok {
			return Command{}, nil, &FormatError{Seq: msg.seq, What: fmt.Sprintf("an authenticated job of a kind this release does not know (%q)", j.Kind), Have: o.Format}
		} else if f > o.Format {
			return Command{}, nil, &FormatError{Seq: msg.seq, What: fmt.Sprintf("the job %s of format %d", j.Kind, f), Have: o.Format}
		}
	}
	bound := msg.at.Add(o.MaxClockSkew)
	for i := range c.Batches {
		b := &c.Batches[i]
		if b.At.After(bound) {
			return refuse(RefusedFutureStamp, "batch %d is stamped %s, beyond its stream time %s plus %s", i, b.At.UTC().Format(time.RFC3339Nano), msg.at.UTC().Format(time.RFC3339Nano), o.MaxClockSkew)
		}
		for j := range b.Writes {
			w := &b.Writes[j]
			if w.Refusal != nil {
				continue
			}
			if err := replication.CheckSkew(w.Mutation.HLC, b.At, o.MaxClockSkew); err != nil {
				return refuse(RefusedFutureStamp, "batch %d write %d (op %s): %v", i, j, w.Mutation.OpID, err)
			}
		}
		if err := b.Recheck(o.Policies, o.MaxClockSkew); err != nil {
			return refuse(RefusedInvalid, "batch %d: %v", i, err)
		}
	}
	if j := c.Job; j != nil {
		if j.Now.After(bound) {
			return refuse(RefusedJobNow, "job %s runs as of %s, beyond its stream time %s plus %s", j.Kind, j.Now.UTC().Format(time.RFC3339Nano), msg.at.UTC().Format(time.RFC3339Nano), o.MaxClockSkew)
		}
		if max := maxToken(pos, msg.at); j.Token > max {
			return refuse(RefusedJobToken, "job %s carries token %d, the lease's revision cannot exceed %d yet", j.Kind, j.Token, max)
		}
		if j.Limit < 1 || j.Limit > maxJobLimit {
			return refuse(RefusedInvalid, "job %s has limit %d, want 1 to %d", j.Kind, j.Limit, maxJobLimit)
		}
	}
	return c, nil, nil
}

// maxToken is the highest fencing token a job at stream time at may carry,
// after the jobs pos records. Integer arithmetic only, so that nodes of
// every architecture decide alike.
func maxToken(pos position, at time.Time) uint64 {
	elapsed := max(at.Sub(time.Unix(0, pos.jobAt)), 0) // saturates at about 292 years
	growth := uint64(elapsed/time.Millisecond) * maxLeaseRevisionsPerSecond / 1000
	if pos.jobToken > math.MaxUint64-1-growth {
		return math.MaxUint64
	}
	return pos.jobToken + 1 + growth
}

// staleJob reports whether a job with token, at stream time at, comes from
// an older lease than the last job pos records, whose fence still holds.
func staleJob(pos position, token uint64, at time.Time) bool {
	return token < pos.jobToken && at.Sub(time.Unix(0, pos.jobAt)) < jobFenceLapse
}
