// Package metricscatalogue holds no code: its test keeps docs/metrics.md and
// the metrics syncd and the client library export from drifting apart. The
// test runs a scenario against a real server and a real client, scrapes
// both, and compares what they export with the catalogue's tables, in both
// directions. It lives here because it needs both the server and the client
// packages, which import neither each other nor anything of docs/.
//
// The same scenario's logs are scanned for tokens and written values, which
// syncd and the client must never log.
package metricscatalogue
