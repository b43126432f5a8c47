// Package soak is syncd's soak harness: it runs syncd and a population of
// clients as real processes, breaks the network and the processes under
// them for a while, lets everything settle, and then proves (or disproves)
// the project's main promise from what they left on disk: nothing a user
// wrote is lost, nothing is applied twice, everyone converges.
//
// # Running it
//
//	make soak                          # ten minutes, 20 clients, report under var/soak/
//	make soak SOAK_DURATION=30m
//	make soak SOAK_NODES=3             # against a three-node syncd cluster
//	go run ./soak/cmd/soak --help      # every knob; --seed replays a run's choices
//
// Shorter runs: TestShortSoak and TestShortClusterSoak (about a minute
// each) are part of make test; make cluster-test runs the latter with the
// cluster's process tests.
// Programs call Run with a Config; a binary that embeds the harness must
// call Child first thing in main (or TestMain), because the harness
// re-executes its own binary to get client processes.
//
// # The scenario
//
// Run builds ./cmd/syncd (or takes Config.SyncdBinary) and starts it as a
// child process on a fresh database, with the models notes (last writer
// wins), docs (optimistic) and audit (readable by every token, writable by
// none). Each client is a child process with its own token, durable queue
// (NDJSON and SQLite alternate), replica and journal, and its own fault
// proxy (package faultproxy) between it and syncd, so every client's
// network fails on its own. The population (see population) mixes a clock
// beyond syncd's skew bound, one ahead within it, one behind, clients that
// may not read or write docs, and a client alone in a second tenant.
//
// Each client writes a mix on a shared key space with hot keys: LWW puts
// and deletes, optimistic PutIfVersion at the version its replica shows
// (its conflict handler rebases three conflicts in four and drops the
// rest, the same way every time it is asked), and poison writes the server
// always refuses (a put to audit, a delete in docs without a base
// version), which must end in the dead-letter store. Every write is
// journaled before the call and after it returns (package journal).
//
// Partial sync: syncd declares scope project over tasks and members (by
// project_id; a members row grants its project to its user). The clients
// of the main tenant that may write docs are scoped: each is its own user,
// follows every project it is granted ("*"), and makes a quarter of its
// writes in the membership churn: tasks put in a project it holds (often
// moving a task between projects) or deleted, projects granted to a user
// or revoked by membership rows, a project founded when it holds none.
// A write to a value the writer no longer holds is refused forbidden_scope
// and dead-lettered, the one refusal besides poison writes the checker
// accepts. c00's token also grants p0.
//
// While it runs, every scoped client journals what reaches it from the
// server in tasks and members (client.Changes: feed entries, backfill
// rows and evicted rows), each with the oplog seq at which the server
// read it (ChangeEvent.At) and its scope value. The checker derives each
// client's grants at every seq from syncd's database (the membership
// rows' history in the oplog, and its token's grants) and calls a leak
// any row the client was sent of a value it did not follow at that seq,
// even one evicted long before quiescence. After a resync the client
// journals the rows its snapshot left, judged at the snapshot's head
// (but those its own pending writes cover, judged at quiescence only),
// and an oplog compacted from the front is judged from its first
// retained seq; the verdict says both.
//
// A scheduler with a seeded RNG injects, at random times and with every
// kind planned at least once: network flaps on one client's proxy
// (blackhole, outage, reset, delay, throttle, an acknowledgement lost
// after the commit, connections cut after a few bytes in either
// direction), client crashes (SIGKILL, while online or after queueing
// writes offline, and a restart on the same files), and syncd kills
// (SIGKILL) and graceful restarts (SIGTERM) on the same database and
// port. Every event goes to events.log with its time.
//
// # A cluster
//
// With Config.Nodes above one, Run starts that many `syncd --cluster`
// processes (embedded NATS, each node on its own database under
// nodes/<id>/), started together since each waits for the others' quorum.
// Every NATS route goes through a fault proxy, and each client has one
// proxy per node (a flap hits them all: the client's network, not one
// node's) and lists every node, starting at a different one per client,
// so the clients spread over the nodes and must follow a killed node's
// sessions to another. The syncd kinds hit one node at a time (SIGKILL or
// SIGTERM, restart on its own disk), and route-cut cuts one node off from
// the others for one to eight seconds, then heals it; a node kill heals a
// cut first, so the cluster keeps a quorum. After quiescence every node
// must reach the stream's head with the same applied sequence and digest
// (its status on the admin API): the same records everywhere. The six
// invariants are judged on node-1's database; invariant 6 measures
// node-1 against its own baseline.
//
// # Quiescence and the check
//
// When the churn ends, every fault is lifted, every client is restarted if
// it was down, told to stop writing, and the harness waits (bounded) until
// every queue holds only dead letters, every client is connected, and every
// cursor is past every entry its token may read (of unscoped models: a
// device is sent no entry of a value it does not follow). Then the harness
// writes a sentinel note and waits until every client of the main tenant
// is past it: the feed is in seq order and ends a backfill before its
// next frame, so each then holds what it follows, which invariant 4
// compares with the server's records filtered by its grants (and with
// what each was sent while the churn ran). Then the clients stop
// cleanly, the proxies close, syncd's goroutines and open files are read
// from its /metrics against the baseline taken after its newest start, and
// syncd stops with SIGTERM. Package checker then loads the files (syncd's
// database read-only, each queue, replica and journal) and judges the six
// invariants; package report writes report.md and a queue-depth plot into
// the run's directory, which keeps all the state for inspection.
//
// A run passes when every invariant holds, every enabled fault kind was
// injected (and at least Config.MinFlaps flaps), the clients quiesced, and
// the harness found nothing wrong with the processes themselves (an exit
// it did not cause, a stop that was not clean, a race report or panic in a
// log).
//
// # The checker can fail
//
// Config.Break deliberately breaks one component: a queue that forgets
// attempt counts, a client whose queue lives in memory, a ledger wiped
// between a commit and the resend of its lost acknowledgement. The tests
// run short scenarios with each and require the checker to name the
// invariant that breaks.
//
// # Bounds
//
// Servers and proxies bind 127.0.0.1 only. Every wait is bounded (syncd's
// readiness and stop, a client's stop, quiescence, the leak settle); the
// churn ends at its deadline; cancelling the context stops the run, and
// whatever it started is killed before Run returns. Children also die with
// the harness (a parent-death signal on Linux; elsewhere when their stdin
// closes).
package soak
