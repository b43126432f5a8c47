package server

import "context"

// RunRetention runs one retention pass (ledger, oplog, conflict log) now,
// so tests need not wait for the janitor's interval.
func (s *Server) RunRetention(ctx context.Context) { s.prune(ctx) }
