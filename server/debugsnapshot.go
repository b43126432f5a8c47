package server

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/replication/cluster"
)

// MaxDebugSnapshotBytes caps GET /debug/snapshot's body. A snapshot whose
// encoding is larger lists fewer sessions (the longest-connected first) and
// says so in sessions_truncated.
const MaxDebugSnapshotBytes = 1 << 20

// DebugSnapshot is GET /debug/snapshot's body: a copy of the server's
// moving parts, taken under each part's own lock for as long as it takes
// to copy it (never while encoding or writing), so a slow reader never
// stalls the server.
type DebugSnapshot struct {
	At       time.Time `json:"at"`
	Serving  bool      `json:"serving"`
	Draining bool      `json:"draining"`
	// Sessions are the open websocket sessions, longest-connected first.
	Sessions          []DebugSession `json:"sessions"`
	SessionsTotal     int            `json:"sessions_total"`
	SessionsTruncated bool           `json:"sessions_truncated,omitempty"`
	Pools             DebugPools     `json:"pools"`
	// Breakers are the conflict hooks' circuit breakers.
	Breakers []replication.BreakerStatus `json:"breakers"`
	// Lease is this node's cluster status (lease held, applied seq, lag);
	// absent on a single node, which needs no lease.
	Lease  *cluster.Status `json:"lease,omitempty"`
	Queues DebugQueues     `json:"queues"`
}

// DebugSession is one session in a DebugSnapshot: who, since when, how far
// its feed got and what waits on it. Values and tokens are never shown.
type DebugSession struct {
	Tenant       string    `json:"tenant"`
	ClientID     string    `json:"client_id"`
	Remote       string    `json:"remote"`
	Since        time.Time `json:"since"`
	Cursor       uint64    `json:"cursor"`
	PendingPush  int64     `json:"pending_pushes"`
	OutboxDepth  int       `json:"outbox_depth"`
	FeedboxDepth int       `json:"feedbox_depth"`
}

// DebugPools are the database connection pools and the frame budget.
type DebugPools struct {
	Database          sql.DBStats `json:"database"`
	Snapshots         sql.DBStats `json:"snapshots"`
	FrameBudgetBytes  int64       `json:"frame_budget_bytes"`
	FrameBudgetInUse  int64       `json:"frame_budget_in_use_bytes"`
	FrameBudgetWaiter int         `json:"frame_budget_waiters"`
}

// DebugQueues are the queues between the sessions and the store.
type DebugQueues struct {
	// Commit is the pushes waiting for the committer, over every
	// tenant's line (single node).
	Commit           int `json:"commit"`
	SnapshotsRunning int `json:"snapshots_running"`
	SnapshotsWaiting int `json:"snapshots_waiting"`
}

// debugSnapshot answers GET /debug/snapshot (admin token required).
func (s *Server) debugSnapshot(w http.ResponseWriter, _ *http.Request) {
	body, err := encodeDebugSnapshot(s.takeDebugSnapshot(), MaxDebugSnapshotBytes)
	if err != nil {
		s.log.Error("debug snapshot", "err", err)
		http.Error(w, "debug snapshot failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(body)
}

// takeDebugSnapshot copies the server's state, each part under its own
// short lock.
func (s *Server) takeDebugSnapshot() *DebugSnapshot {
	snap := &DebugSnapshot{At: s.now().UTC(), Serving: s.serving.Load(), Draining: s.draining.Load(), Breakers: s.resolver.Breakers()}
	s.mu.Lock()
	for ss := range s.sessions {
		snap.Sessions = append(snap.Sessions, DebugSession{
			Tenant: ss.p.Tenant, ClientID: ss.p.ClientID, Remote: ss.remote, Since: ss.since.UTC(),
			Cursor: ss.cursor.Load(), PendingPush: ss.pending.Load(), OutboxDepth: len(ss.outbox), FeedboxDepth: len(ss.feedbox),
		})
	}
	s.mu.Unlock()
	snap.SessionsTotal = len(snap.Sessions)
	sort.Slice(snap.Sessions, func(i, j int) bool { return snap.Sessions[i].Since.Before(snap.Sessions[j].Since) })

	snap.Pools.Database = s.store.DB.Stats()
	if s.snapshotDB != nil {
		snap.Pools.Snapshots = s.snapshotDB.Stats()
	}
	if f := s.frames; f != nil {
		f.mu.Lock()
		snap.Pools.FrameBudgetBytes, snap.Pools.FrameBudgetInUse, snap.Pools.FrameBudgetWaiter = f.size, f.used, len(f.waiters)
		f.mu.Unlock()
	}
	if gc, ok := s.commits.(*groupCommitter); ok {
		gc.mu.Lock()
		snap.Queues.Commit = gc.queue.Len()
		gc.mu.Unlock()
	}
	if g := s.snapshots; g != nil {
		g.mu.Lock()
		snap.Queues.SnapshotsRunning, snap.Queues.SnapshotsWaiting = g.running, g.queue.len()
		g.mu.Unlock()
	}
	if s.cfg.Cluster != nil {
		st := s.cfg.Cluster.Status()
		snap.Lease = &st
	}
	return snap
}

// encodeDebugSnapshot encodes snap within limit bytes, dropping the
// newest sessions (halving the list) until it fits.
func encodeDebugSnapshot(snap *DebugSnapshot, limit int) ([]byte, error) {
	for {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		if err := enc.Encode(snap); err != nil {
			return nil, err
		}
		if buf.Len() <= limit || len(snap.Sessions) == 0 {
			return buf.Bytes(), nil
		}
		snap.Sessions = snap.Sessions[:len(snap.Sessions)/2]
		snap.SessionsTruncated = true
	}
}
