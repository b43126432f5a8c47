package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// Snapshot budgets. Snapshots read through a connection pool of their own
// (MaxConcurrentSnapshots connections), so devices bootstrapping at once
// never take the connections hello, pull, feeds, /readyz and the admin API
// use. Devices beyond the limit wait their turn in a bounded queue (first
// come, first served, holding no database connection; when a device's turn
// comes, the waiters of its scope join its read: snapshotshare.go). Beyond
// the queue, or after waiting SnapshotQueueTimeout, they are refused 503
// server_busy with a Retry-After from the queue's length and the recent
// snapshots' duration.
const (
	// DefaultMaxConcurrentSnapshots is Config.MaxConcurrentSnapshots's
	// default: snapshots served at once.
	DefaultMaxConcurrentSnapshots = 4
	// DefaultMaxQueuedSnapshots is Config.MaxQueuedSnapshots's default:
	// snapshots waiting for a turn.
	DefaultMaxQueuedSnapshots = 1024
	// DefaultSnapshotQueueTimeout is Config.SnapshotQueueTimeout's default:
	// the longest a snapshot waits for its turn. A device refused after
	// waiting goes to the back of the queue, so the wait is long enough to
	// ride out a storm of several hundred devices; the client library
	// waits up to 30 minutes for a snapshot. (The HTTP server's own
	// timeouts do not cut a wait: its read deadline is cleared while a
	// handler runs, and the per-write deadline replaces its write
	// deadline at the snapshot's first write.)
	DefaultSnapshotQueueTimeout = 2 * time.Minute
	// MaxSnapshotsPerToken is how many snapshots one token may download or
	// wait for at once; more are refused 503 server_busy.
	MaxSnapshotsPerToken = 1
	// DefaultSnapshotWriteTimeout is Config.SnapshotWriteTimeout's
	// default: each write of a snapshot body must finish within it, so a
	// client that stops reading is cut and its read transaction ends.
	DefaultSnapshotWriteTimeout = 10 * time.Second
	// DefaultSnapshotTimeout is Config.SnapshotTimeout's default: the
	// longest one snapshot may take, which bounds how long its read
	// transaction holds back WAL checkpoints.
	DefaultSnapshotTimeout = 5 * time.Minute
	// DefaultSnapshotShareBytes is Config.SnapshotShareBytes's default:
	// how far, in bytes of body, the fastest reader of a shared snapshot
	// read may be ahead of the slowest.
	DefaultSnapshotShareBytes = 16 << 20
	// snapshotFirstGuess is the duration a refusal's Retry-After assumes
	// for a snapshot before any was served.
	snapshotFirstGuess = time.Second
	// snapshotMaxRetryAfter caps a refused snapshot's Retry-After.
	snapshotMaxRetryAfter = 5 * time.Minute
)

// snapshotGate admits snapshots within the global and per-token limits,
// queueing those beyond the global one. A waiter is given either a turn of
// its own (a read of the database) or a place in the read of another
// waiter of the same scope whose turn came (snapshotshare.go). It is safe
// for concurrent use.
type snapshotGate struct {
	max, maxQueue int
	waitingGauge  prometheus.Gauge // syncd_snapshots_waiting

	mu      sync.Mutex
	running int
	queue   []*snapshotWaiter // first first
	byToken map[string]int    // snapshots running or waiting, by token
	took    time.Duration     // moving average of the served snapshots' durations
}

// snapshotWaiter is one snapshot waiting in the queue.
type snapshotWaiter struct {
	scope string
	// turn gets nil for a turn of its own, or a reader of another's read.
	turn chan *shareReader
}

// snapshotRefusal says why a snapshot was not admitted and when to ask
// again.
type snapshotRefusal struct {
	reason     string
	retryAfter time.Duration
}

// enter admits one snapshot of scope for token, waiting in the queue at
// most wait (or until ctx ends). Admitted with a turn of its own it
// returns nil, nil: read, then call leave. Admitted into another's read it
// returns a reader of it: follow it, then call leaveShared.
func (g *snapshotGate) enter(ctx context.Context, token, scope string, wait time.Duration) (*shareReader, *snapshotRefusal) {
	g.mu.Lock()
	if g.byToken[token] >= MaxSnapshotsPerToken {
		defer g.mu.Unlock()
		return nil, g.refuseLocked(fmt.Sprintf("this token already has %d snapshot running or waiting", MaxSnapshotsPerToken))
	}
	if g.running < g.max && len(g.queue) == 0 {
		g.running++
		g.byToken[token]++
		g.mu.Unlock()
		return nil, nil
	}
	if len(g.queue) >= g.maxQueue {
		defer g.mu.Unlock()
		return nil, g.refuseLocked(fmt.Sprintf("%d snapshots running and %d waiting, the most this server queues", g.running, len(g.queue)))
	}
	w := &snapshotWaiter{scope: scope, turn: make(chan *shareReader, 1)}
	g.queue = append(g.queue, w)
	g.waitingGauge.Inc()
	g.byToken[token]++
	g.mu.Unlock()

	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case r := <-w.turn:
		return r, nil
	case <-timer.C:
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	i := slices.Index(g.queue, w)
	if i < 0 { // given a turn as the wait ended: take it
		return <-w.turn, nil
	}
	g.queue = slices.Delete(g.queue, i, i+1)
	g.waitingGauge.Dec()
	g.dropTokenLocked(token)
	return nil, g.refuseLocked(fmt.Sprintf("no turn within %s", wait))
}

// share hands every waiter of scope a reader of share, the read of a
// snapshot whose turn came, and returns how many joined. Call it before
// the read begins: the read then holds every write acknowledged before
// any joiner asked.
func (g *snapshotGate) share(scope string, share *snapshotShare) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	joined := 0
	g.queue = slices.DeleteFunc(g.queue, func(w *snapshotWaiter) bool {
		if w.scope != scope {
			return false
		}
		w.turn <- share.reader()
		g.waitingGauge.Dec()
		joined++
		return true
	})
	return joined
}

// leaveShared ends a snapshot admitted into another's read.
func (g *snapshotGate) leaveShared(token string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dropTokenLocked(token)
}

// leave ends an admitted snapshot that took d, handing its turn to the
// first waiter.
func (g *snapshotGate) leave(token string, d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dropTokenLocked(token)
	if g.took == 0 {
		g.took = d
	} else {
		g.took += (d - g.took) / 8
	}
	if len(g.queue) > 0 {
		g.queue[0].turn <- nil
		g.queue = slices.Delete(g.queue, 0, 1)
		g.waitingGauge.Dec()
		return
	}
	g.running--
}

func (g *snapshotGate) dropTokenLocked(token string) {
	if g.byToken[token]--; g.byToken[token] <= 0 {
		delete(g.byToken, token)
	}
}

// refuseLocked is a refusal with the time the queue as it stands needs to
// drain: the running reads and one read per scope waiting (the waiters of
// a scope share one), max at a time, each taking what the recent ones
// took.
func (g *snapshotGate) refuseLocked(reason string) *snapshotRefusal {
	took := g.took
	if took == 0 {
		took = snapshotFirstGuess
	}
	scopes := map[string]struct{}{}
	for _, w := range g.queue {
		scopes[w.scope] = struct{}{}
	}
	rounds := (g.running + len(scopes) + g.max) / g.max
	return &snapshotRefusal{reason: reason, retryAfter: min(time.Duration(rounds)*took, snapshotMaxRetryAfter)}
}

// scopeOf is what a principal may read: its tenant, and its readable models.
func scopeOf(p auth.Principal) replication.Scope {
	if p.CanRead(auth.Wildcard) {
		return replication.Scope{Tenant: p.Tenant, AllModels: true}
	}
	return replication.Scope{Tenant: p.Tenant, Models: p.Read}
}

// scopeKey names a scope: principals whose keys are equal read the same
// snapshot.
func scopeKey(sc replication.Scope) string {
	if sc.AllModels {
		return sc.Tenant + "\x00*"
	}
	models := slices.Clone(sc.Models)
	slices.Sort(models)
	return sc.Tenant + "\x00" + strings.Join(slices.Compact(models), ",")
}

// serveSnapshot streams the principal's readable records as of one oplog
// head (PROTOCOL.md, "Snapshot"), for a client that must resync. Deleted
// records are left out: the snapshot is what a fresh replica starts from.
// A body that ends without its trailer was cut short and must be discarded.
//
// The device whose turn it is reads the database; the devices of the same
// scope waiting when its read begins are served the same body
// (snapshotshare.go).
func (s *Server) serveSnapshot(w http.ResponseWriter, r *http.Request) {
	p, ok := s.principal(w, r, false)
	if !ok {
		return
	}
	rc := http.NewResponseController(w)
	scope := scopeOf(p)
	key := scopeKey(scope)
	joined, refused := s.snapshots.enter(r.Context(), p.TokenID, key, s.cfg.SnapshotQueueTimeout)
	if refused != nil {
		s.metrics.snapshotsRefused.Inc()
		// The wait may have outlasted the HTTP server's write deadline,
		// which runs from the request's start.
		if err := rc.SetWriteDeadline(time.Now().Add(s.cfg.SnapshotWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			s.log.Warn("snapshot refusal: set write deadline", "err", err)
		}
		secs := int((refused.retryAfter + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		e := syncproto.Errorf(syncproto.CodeServerBusy, "too many snapshots at once: %s; retry in %d s", refused.reason, secs)
		e.RetryAfterMS = refused.retryAfter.Milliseconds()
		httpError(w, http.StatusServiceUnavailable, e)
		return
	}
	s.metrics.snapshotsActive.Inc()
	defer s.metrics.snapshotsActive.Dec()
	if joined != nil {
		defer s.snapshots.leaveShared(p.TokenID)
		s.metrics.snapshotsShared.Inc()
		s.sendSnapshot(w, r, rc, p, joined)
		return
	}
	began := time.Now()
	defer func() { s.snapshots.leave(p.TokenID, time.Since(began)) }()

	share := newSnapshotShare(s.cfg.SnapshotShareBytes)
	mine := share.reader()
	s.snapshots.share(key, share)
	// The read runs on its own goroutine, owned here: it serves the
	// joiners too, so it outlives neither this handler nor its readers
	// (it ends once they have all gone), and not this device's going.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.cfg.SnapshotTimeout)
	defer cancel()
	read := make(chan struct{})
	go func() {
		defer close(read)
		share.finish(s.readSnapshot(ctx, scope, shareWriter{ctx: ctx, share: share}))
	}()
	s.sendSnapshot(w, r, rc, p, mine)
	<-read
}

// readSnapshot writes the snapshot of scope to out, whole unless it
// returns an error.
func (s *Server) readSnapshot(ctx context.Context, scope replication.Scope, out io.Writer) error {
	var sw *syncproto.SnapshotWriter
	head, err := s.store.Records.SnapshotLive(ctx, s.snapshotDB, scope, func(head uint64, rec *replication.LiveRecord) error {
		if sw == nil {
			var err error
			if sw, err = syncproto.NewSnapshotWriter(out, head); err != nil {
				return err
			}
		}
		return sw.Write(syncproto.SnapshotRecord{Model: rec.Model, Key: rec.Key, Value: rec.Value, Version: rec.Version, HLC: rec.HLC})
	})
	if err == nil && sw == nil {
		sw, err = syncproto.NewSnapshotWriter(out, head)
	}
	if err != nil {
		return err
	}
	return sw.Close()
}

// sendSnapshot writes the body reader takes from a shared read to w, each
// write within the per-write deadline, and leaves the read.
func (s *Server) sendSnapshot(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, p auth.Principal, reader *shareReader) {
	defer reader.close()
	out := &deadlineWriter{w: w, rc: rc, timeout: s.cfg.SnapshotWriteTimeout}
	wrote := false
	for {
		chunk, err := reader.next(r.Context())
		if err == io.EOF {
			return
		}
		if err == nil {
			if !wrote {
				w.Header().Set("Content-Type", syncproto.SnapshotContentType)
			}
			_, err = out.Write(chunk)
			wrote = true
		}
		if err != nil {
			s.metrics.snapshotsCut.Inc()
			s.log.Warn("snapshot cut short", "client_id", p.ClientID, "err", err)
			if !wrote {
				httpError(w, http.StatusInternalServerError, syncproto.Errorf(syncproto.CodeInternal, "snapshot failed; retry later"))
			}
			return
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
