// Package syncdtest starts real syncd servers for tests, the way
// net/http/httptest starts HTTP servers: every test package that needs a
// syncd uses it, so there is one way to start one.
//
// Start runs one server.Server on loopback listeners (127.0.0.1, a free
// port each for the public and the admin handler) over its own SQLite file
// and token file in the test's temporary directory, with an admin token,
// and stops it gracefully when the test ends. StartCluster runs n such
// servers as the nodes of one cluster, each with an embedded NATS server
// (replicas 3 when n is 3 or more, else 1), sharing one token file, so a
// test written against a *Server runs unchanged against any node.
//
// The rest of the kit is what the module's tests share beside a server:
// the admin API read through adminapi's types (Status, Oplog, Decided,
// Admin), snapshots, metrics, embedded NATS servers (StartNATS), a buffer
// safe for concurrent writers (Buffer) and a free loopback address
// (FreeAddr, FreePort). internal/fakeclock is the one settable clock.
//
// Only tests import this package (internal/layering keeps it so).
//
// The helpers fail the test (require) on any unexpected error and bound
// every network step by Timeout: a broken server fails a test, it never
// hangs it.
package syncdtest
