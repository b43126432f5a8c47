package server

import "context"

// RunRetention runs one retention pass (ledger, oplog, conflict log) now,
// so tests need not wait for the janitor's interval. On a cluster node it
// fails unless the node holds the singleton-job lease.
func (s *Server) RunRetention(ctx context.Context) error { return s.prune(ctx) }
