// Package cluster is syncd's cluster mode: state-machine replication of
// the write path over NATS JetStream, so several syncd nodes hold one
// replicated oplog.
//
// A node joins with Connect (through a NATS connection; StartEmbedded runs
// an embedded NATS server) and Starts its Cluster with its Store. The edge
// of a push Submits the decided-at-the-edge batch as a command to the
// command stream (StreamName); every node's one materializer reads the
// stream in order from its last applied sequence, requires each message to
// be exactly the next, and applies it with replication's decision step in
// one SQLite transaction that also records the applied sequence. Given the
// same stream every node therefore holds the same records, oplog (same
// seqs), ledger and conflict log.
//
// Singleton jobs (compaction, retention) run under a lease in a JetStream
// key-value bucket whose revision fences stale holders; snapshots in a
// JetStream object store let a new or lagging node catch up (PrepareData);
// every node publishes a running digest of what it applied (Status, Nodes)
// and stops serving (Ready) on a mismatch with a peer at the same sequence.
// Records checks (JobCheckRecords) fold a digest of every node's records
// into that digest at one sequence, so the nodes compare record contents
// too; a node restored from a snapshot serves only once one agreed.
//
// Rolling upgrades: each node announces the highest command stream
// format it understands (Status.Format, the table Formats); the cluster
// version is the lowest its members announce, and a command of a newer
// format is published only once the version reaches it, so no node meets
// a command it cannot apply (one that does, a node of an older release
// joining late, waits there: ErrNeedsUpgrade).
package cluster
