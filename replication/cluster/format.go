package cluster

import (
	"errors"
	"fmt"
	"time"
)

// Format is one version of what nodes write to the command stream: a new
// job kind, a changed rule of an existing one, a new command member that
// changes what a node does. Each node announces the highest format it
// understands with its status (Status.Format); the cluster version is the
// lowest format announced by the cluster's members (clusterVersion), and a
// node publishes a command of format F only while the cluster version is F
// or more (Cluster.uses). A node therefore never meets a command it
// cannot apply, and a cluster upgrades one node at a time: the new format
// switches on by itself once the last node announces it.
type Format struct {
	Version int
	Name    string
	// Changes says what a node understanding this format does that the
	// one before does not.
	Changes string
}

// The formats this release knows, by version.
const (
	// FormatBase: the command stream as releases before formats wrote it.
	FormatBase = 1
	// FormatRecordsCheck: the check_records job.
	FormatRecordsCheck = 2
	// FormatRequestedSets: push batches carrying a requested set
	// (replication.Batch.Requested).
	FormatRequestedSets = 3
	// LatestFormat is the highest format this release understands.
	LatestFormat = FormatRequestedSets
)

// Formats is every format, oldest first: the one table of what each
// changes. A release adds a row here (and its gate at the one place that
// publishes what it introduces) rather than requiring its nodes to be
// upgraded together.
var Formats = []Format{
	{FormatBase, "base", "commands of version 1: push batches, and the jobs compact_oplog_per_tenant, prune_conflicts and prune_ledger. A node that announces no format (a release before this table) understands this one."},
	{FormatRecordsCheck, "records_check", "the job check_records: every node digests its records table at the job's stream seq into its running digest and checkpoints there, so the replicas compare record contents, not only what they applied; a node restored from a snapshot serves only once such a check agreed with its peers."},
	{FormatRequestedSets, "requested_sets", "a push batch may carry a device's requested scope set (member requested, usually without writes): every node records it in its requested_sets table, so each node answers what an offline device requests."},
}

// jobFormats is the format that introduced each job kind this release
// applies.
var jobFormats = map[JobKind]int{
	JobCompactOplog:   FormatBase,
	JobPruneConflicts: FormatBase,
	JobPruneLedger:    FormatBase,
	JobCheckRecords:   FormatRecordsCheck,
}

// formatMemberWindow is how long a node that stopped reporting still
// counts toward the cluster version with the format it last announced: a
// node restarting during a rolling upgrade holds the new format back until
// it announces again, and one that left the cluster for good holds it back
// for this long.
const formatMemberWindow = 10 * time.Minute

// clusterVersion is the lowest format announced by the members among
// nodes (statuses read from the nodes bucket, this node's own included or
// not): those that reported within formatMemberWindow of now. A status
// without a format is a node of a release before formats: FormatBase. mine
// is this node's format, always counted.
func clusterVersion(mine int, self string, nodes []Status, now time.Time) int {
	v := mine
	for _, st := range nodes {
		if st.Node == self || now.Sub(st.At) >= formatMemberWindow {
			continue
		}
		f := st.Format
		if f < FormatBase {
			f = FormatBase
		}
		v = min(v, f)
	}
	return v
}

// uses reports whether this node may publish a command of format f: every
// member of the cluster announces f or a later one. It is the one gate of
// new formats.
func (c *Cluster) uses(f int) bool { return int(c.version.Load()) >= f }

// Uses reports whether this node may publish commands of format f: the
// cluster version, as last surveyed, is f or more. What a format
// introduces is published only while Uses reports true for it.
func (c *Cluster) Uses(f int) bool { return c.uses(f) }

// setVersion records the cluster version a survey found.
func (c *Cluster) setVersion(v int) {
	if old := c.version.Swap(int64(v)); old != int64(v) {
		c.log.Info("cluster version", "version", v, "was", old, "this_node", c.opts.Format)
	}
	c.metrics.clusterVersion.Set(float64(v))
}

// ErrNeedsUpgrade is wrapped by Ready while this node waits at a command
// it cannot apply: an authenticated command of a format it does not
// understand, published by a node of a newer release (which the format
// gate prevents unless a node of an older release joined a cluster whose
// version had already moved on). The node neither applies nor skips it:
// it stays where it is, not serving, until it is upgraded (restarted on a
// newer release, which applies the command and goes on). *FormatError
// says where and what.
var ErrNeedsUpgrade = errors.New("this node needs a newer release")

// FormatError is the command an older node waits at.
type FormatError struct {
	Seq uint64
	// What the command needs, as the node could tell it.
	What string
	// Have is this node's format.
	Have int
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%v: stream seq %d is %s, this node understands formats up to %d; it waits there without applying it: upgrade it", ErrNeedsUpgrade, e.Seq, e.What, e.Have)
}

// Is makes errors.Is(err, ErrNeedsUpgrade) true.
func (e *FormatError) Is(target error) bool { return target == ErrNeedsUpgrade }

// waitForUpgrade marks the node as waiting at a command it cannot apply,
// loudly; it serves again only once restarted on a release that can.
func (c *Cluster) waitForUpgrade(err *FormatError) {
	var e error = err
	if c.blocked.CompareAndSwap(nil, &e) {
		c.log.Error("this node waits at a command it cannot apply", "err", err)
		c.metrics.waitingForUpgrade.Set(1)
	}
}

// ErrFormatNotInUse is returned by a publish of a command of a format the
// cluster version has not reached: some member does not announce it yet.
// Nothing was published; the caller publishes the older format's command
// instead, or nothing.
var ErrFormatNotInUse = errors.New("format not in use by every node yet")

// commandFormat is the format a command needs: the format of its job's
// kind, FormatBase for batches.
func commandFormat(cmd Command) int {
	if cmd.Job != nil {
		if f, ok := jobFormats[cmd.Job.Kind]; ok {
			return f
		}
		return LatestFormat + 1 // never published
	}
	return FormatBase
}
