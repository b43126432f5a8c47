// Package server is syncd's HTTP service: the sync websocket and its
// sessions, authentication and tenancy at the edge, the write path to a
// durable decision, the change feed, snapshots, health, metrics and the
// admin API. cmd/syncd wires it to flags, listeners and signals; an
// embedder can run it the same way.
//
// # Use
//
// New opens the database (SQLite, Config.DataPath) and starts the
// committer; Handler serves the public endpoints (syncproto.SyncPath,
// syncproto.SnapshotPath, /healthz, /readyz, /metrics) and AdminHandler
// the admin API (package adminapi is its contract) and the operator
// console under /console/ (package console, built on that API), each on a listener of
// the caller's: HTTPServer and LimitListener give them the timeouts and
// connection bound the server promises, ErrorLog their logger. To stop,
// call Shutdown (drain: /readyz fails, new sessions are refused, every
// session is answered for the pushes it submitted and closed with 1001),
// then Close (the committer commits what was queued, the database is
// released). Config's zero value means the defaults; New validates it.
//
// # Promises
//
//   - An acknowledged write is durable, through a power cut: each group of
//     pushes is one SQLite transaction (ledger lookup, policy, oplog,
//     record, conflict log, ledger record) committed before any of them
//     is answered, with synchronous=FULL unless Config.Synchronous lowers
//     it; in a cluster, the push is answered
//     once this node's materializer applied it from the command stream.
//   - A resend is answered from the replay ledger, never applied twice;
//     a resend older than the ledger still covers is answered expired.
//   - Everything that depends on this node (the token's rights, the clock
//     skew bound, the conflict hook's answers) is decided at the edge
//     before a batch is committed or replicated, so every node of a
//     cluster decides the same batch the same way.
//   - A session sees only its tenant's data and the models its principal
//     may read; every limit of PROTOCOL.md is
//     enforced with its error code; quotas bound what one token and one
//     tenant take.
//   - Memory is bounded per session (frame budget, feed pages in flight)
//     and per node (feed tail, snapshot queue).
//   - Every goroutine the server starts ends by Shutdown and Close.
//
// # Files
//
//   - server.go: Config, New, Handler, Shutdown, Close; /healthz, /readyz.
//   - handshake.go: the upgrade's checks in PROTOCOL.md's order, bearer
//     tokens, the principal of a request.
//   - session.go: one websocket session: the reader loop that owns its
//     state, the writer goroutine and its lanes, hello, push, pull,
//     subscribe.
//   - framebudget.go: the bytes a session may read per frame and hold.
//   - edge.go: the edge of the write path (rights, skew, policies, hooks).
//   - commit.go: the single-node group committer; cluster.go: the cluster
//     committer over replication/cluster.
//   - feedtail.go: the newest oplog entries kept in memory and shared by
//     every subscription.
//   - snapshot.go: the snapshot endpoint and its budgets; snapshotshare.go:
//     one read shared by the devices of a scope waiting at once.
//   - quota.go: per-token and per-tenant quotas.
//   - doors.go: listener timeouts and the connection bound.
//   - admin.go: the admin API's handlers (adminapi holds its types).
//   - adminconsole.go: the answers the console added to the admin API
//     (figures, tenants, disconnect) and the console's lifetime (made by
//     the first AdminHandler, stopped by Close).
//   - metrics.go: the Prometheus metrics (docs/metrics.md);
//     eventlog.go: refusals a peer can cause, logged as counts per
//     interval, and the listeners' error log.
package server
