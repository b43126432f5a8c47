package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/syncd-dev/syncd/replication"
)

// CommandVersion is the encoding version of the commands this package
// writes. A materializer refuses (and stops on) a command of a version it
// does not know: deciding it wrongly would make its replica diverge, and
// stopping says "upgrade this node" loudly.
const CommandVersion = 1

// Command is one entry of the command stream: the push batches one edge
// admitted while its previous publish was in flight (group publish, as a
// single node groups commits), or a singleton job. Exactly one of Batches
// and Job is set.
type Command struct {
	Version int `json:"v"`
	// ID is unique per command: the publish's message id (JetStream drops
	// a republished duplicate within its window) and what the edge waits
	// for.
	ID      string              `json:"id"`
	Batches []replication.Batch `json:"batches,omitempty"`
	Job     *Job                `json:"job,omitempty"`
}

// JobKind names a singleton job.
type JobKind string

// The jobs. Each prunes one store as of Job.Now, at most Job.Limit rows.
// JobCompactOplog compacts each tenant's entries beyond its own bound; it
// is named apart from jobCompactWholeOplog, the job of syncd releases that
// compacted the whole log, so that a node of either kind meeting the
// other's job stops loudly instead of removing other rows than its peers.
const (
	JobCompactOplog   JobKind = "compact_oplog_per_tenant"
	JobPruneLedger    JobKind = "prune_ledger"
	JobPruneConflicts JobKind = "prune_conflicts"
)

// jobCompactWholeOplog is the oplog compaction of releases before
// per-tenant retention. This release cannot apply it as they did.
const jobCompactWholeOplog JobKind = "compact_oplog"

// Job is an operator job run by every replica at the same point of the
// stream. It is published by the lease holder only, and carries the
// lease's fencing token: a materializer ignores a job whose token is lower
// than the highest it has applied, so a holder that lost its lease (paused,
// partitioned) cannot act after its successor.
type Job struct {
	Kind  JobKind   `json:"kind"`
	Token uint64    `json:"token"`
	Now   time.Time `json:"now"`
	Limit int       `json:"limit"`
}

// ErrBadCommand is wrapped when a stream message is not a command this
// version can apply.
var ErrBadCommand = errors.New("bad command")

func encodeCommand(c Command) ([]byte, error) {
	c.Version = CommandVersion
	return json.Marshal(c)
}

func decodeCommand(data []byte) (Command, error) {
	var c Command
	if err := json.Unmarshal(data, &c); err != nil {
		return Command{}, fmt.Errorf("%w: %v", ErrBadCommand, err)
	}
	switch {
	case c.Version != CommandVersion:
		return Command{}, fmt.Errorf("%w: version %d, this node applies version %d", ErrBadCommand, c.Version, CommandVersion)
	case (len(c.Batches) == 0) == (c.Job == nil):
		return Command{}, fmt.Errorf("%w: %s holds neither or both of batches and a job", ErrBadCommand, c.ID)
	}
	return c, nil
}
