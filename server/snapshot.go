package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// Snapshot budgets. Snapshots read through a connection pool of their own
// (MaxConcurrentSnapshots connections), so devices bootstrapping at once
// never take the connections hello, pull, feeds, /readyz and the admin API
// use.
const (
	// DefaultMaxConcurrentSnapshots is Config.MaxConcurrentSnapshots's
	// default: snapshots served at once; more are refused 503 server_busy
	// with Retry-After.
	DefaultMaxConcurrentSnapshots = 4
	// MaxSnapshotsPerToken is how many snapshots one token may download at
	// once; more are refused 503 server_busy.
	MaxSnapshotsPerToken = 1
	// DefaultSnapshotWriteTimeout is Config.SnapshotWriteTimeout's
	// default: each write of a snapshot body must finish within it, so a
	// client that stops reading is cut and its read transaction ends.
	DefaultSnapshotWriteTimeout = 10 * time.Second
	// DefaultSnapshotTimeout is Config.SnapshotTimeout's default: the
	// longest one snapshot may take, which bounds how long its read
	// transaction holds back WAL checkpoints.
	DefaultSnapshotTimeout = 5 * time.Minute
	// snapshotRetryAfter is the Retry-After of a refused snapshot, in
	// seconds.
	snapshotRetryAfter = 5
)

// snapshotGate admits snapshots within the global and per-token limits.
type snapshotGate struct {
	mu      sync.Mutex
	max     int
	running int
	byToken map[string]int
}

// enter admits one snapshot for token, or returns false.
func (g *snapshotGate) enter(token string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running >= g.max || g.byToken[token] >= MaxSnapshotsPerToken {
		return false
	}
	g.running++
	g.byToken[token]++
	return true
}

func (g *snapshotGate) leave(token string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running--
	if g.byToken[token]--; g.byToken[token] <= 0 {
		delete(g.byToken, token)
	}
}

// scopeOf is what a principal may read: its tenant, and its readable models.
func scopeOf(p auth.Principal) replication.Scope {
	if p.CanRead(auth.Wildcard) {
		return replication.Scope{Tenant: p.Tenant, AllModels: true}
	}
	return replication.Scope{Tenant: p.Tenant, Models: p.Read}
}

// serveSnapshot streams the principal's readable records as of one oplog
// head (PROTOCOL.md, "Snapshot"), for a client that must resync. Deleted
// records are left out: the snapshot is what a fresh replica starts from.
// A body that ends without its trailer was cut short and must be discarded.
func (s *Server) serveSnapshot(w http.ResponseWriter, r *http.Request) {
	p, ok := s.principal(w, r, false)
	if !ok {
		return
	}
	if !s.snapshots.enter(p.TokenID) {
		s.metrics.snapshotsRefused.Inc()
		w.Header().Set("Retry-After", strconv.Itoa(snapshotRetryAfter))
		httpError(w, http.StatusServiceUnavailable, syncproto.Errorf(syncproto.CodeServerBusy,
			"too many snapshots at once (at most %d, %d per token); retry later", s.snapshots.max, MaxSnapshotsPerToken))
		return
	}
	defer s.snapshots.leave(p.TokenID)
	s.metrics.snapshotsActive.Inc()
	defer s.metrics.snapshotsActive.Dec()

	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.SnapshotTimeout)
	defer cancel()
	out := &deadlineWriter{w: w, rc: http.NewResponseController(w), timeout: s.cfg.SnapshotWriteTimeout}
	var sw *syncproto.SnapshotWriter
	start := func(head uint64) error {
		w.Header().Set("Content-Type", syncproto.SnapshotContentType)
		var err error
		sw, err = syncproto.NewSnapshotWriter(out, head)
		return err
	}
	head, err := s.store.Records.SnapshotLive(ctx, s.snapshotDB, scopeOf(p), func(head uint64, rec *replication.LiveRecord) error {
		if sw == nil {
			if err := start(head); err != nil {
				return err
			}
		}
		return sw.Write(syncproto.SnapshotRecord{Model: rec.Model, Key: rec.Key, Value: rec.Value, Version: rec.Version, HLC: rec.HLC})
	})
	if err == nil && sw == nil {
		err = start(head)
	}
	if err == nil {
		err = sw.Close()
	}
	if err != nil {
		s.metrics.snapshotsCut.Inc()
		s.log.Warn("snapshot cut short", "client_id", p.ClientID, "err", err)
		if sw == nil {
			httpError(w, http.StatusInternalServerError, syncproto.Errorf(syncproto.CodeInternal, "snapshot failed; retry later"))
		}
	}
}

// deadlineWriter gives every write to a response its own deadline (renewed
// at most every quarter of timeout), so a reader that stalls is cut after
// timeout however long the whole body takes.
type deadlineWriter struct {
	w       io.Writer
	rc      *http.ResponseController
	timeout time.Duration
	renewed time.Time
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	if now := time.Now(); now.Sub(d.renewed) > d.timeout/4 {
		if err := d.rc.SetWriteDeadline(now.Add(d.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return 0, fmt.Errorf("set write deadline: %w", err)
		}
		d.renewed = now
	}
	return d.w.Write(p)
}
