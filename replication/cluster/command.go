package cluster

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/syncd-dev/syncd/replication"
)

// CommandVersion is the encoding version of the commands this package
// writes. What may change in commands beyond it is listed in Formats, and
// published only once every node understands it (Cluster.uses).
//
// A materializer meeting an authenticated command of a newer version or
// format than it understands (a node of a newer release that joined a
// cluster whose version had moved past this node's) waits there, loudly
// (ErrNeedsUpgrade): the command is an honest peer's, and skipping it
// while the newer nodes apply it would make the replicas diverge. A
// command that is not authenticated is never given that power: whatever
// its version, it is refused and skipped like any other unauthenticated
// message (see refusal).
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
// lease's fencing token (the lease key's revision): a materializer ignores
// a job whose token is lower than that of the last job it applied, within
// jobFenceLapse of stream time, so a holder that lost its lease (paused,
// partitioned) cannot act after its successor. Token and Now are bounded
// against the command's stream time (see checkJob).
type Job struct {
	Kind  JobKind   `json:"kind"`
	Token uint64    `json:"token"`
	Now   time.Time `json:"now"`
	Limit int       `json:"limit"`
}

// ErrBadCommand is wrapped when an authenticated stream message is a
// command this node cannot apply as its peers may have (a retired job):
// the node stops serving.
var ErrBadCommand = errors.New("bad command")

// HeaderAuth is the NATS header that carries a command's authenticator:
// AuthScheme followed by the hex HMAC-SHA256, keyed with
// Options.CommandKey, of the message's data exactly as published (the
// command's JSON encoding). The data is not re-encoded before it is
// checked, so any encoder may have written it.
const (
	HeaderAuth = "Syncd-Command-Auth"
	AuthScheme = "hmac-sha256="
)

// MinCommandKeyBytes is the shortest Options.CommandKey accepted.
const MinCommandKeyBytes = 32

// Authenticate returns the value of HeaderAuth for a command whose
// encoding is data, under key.
func Authenticate(key, data []byte) string {
	return AuthScheme + hex.EncodeToString(mac(key, data))
}

func mac(key, data []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(data)
	return h.Sum(nil)
}

// authentic reports whether header, a message's HeaderAuth value, is
// data's authenticator under key (compared in constant time).
func authentic(key, data []byte, header string) bool {
	if len(header) != len(AuthScheme)+2*sha256.Size || header[:len(AuthScheme)] != AuthScheme {
		return false
	}
	got, err := hex.DecodeString(header[len(AuthScheme):])
	return err == nil && hmac.Equal(got, mac(key, data))
}

// deriveKey derives from the command key a key of its own for purpose
// (HKDF-SHA256), so that no authenticator of one kind is one of another.
func deriveKey(commandKey []byte, purpose string) []byte {
	k, err := hkdf.Key(sha256.New, commandKey, nil, purpose, sha256.Size)
	if err != nil {
		panic(err) // only for an output longer than HKDF allows
	}
	return k
}

func encodeCommand(c Command) ([]byte, error) {
	c.Version = CommandVersion
	return json.Marshal(c)
}
