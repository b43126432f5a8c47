package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// Snapshot budgets. Snapshots read through a connection pool of their own
// (MaxConcurrentSnapshots connections), so devices bootstrapping at once
// never take the connections hello, pull, feeds, /readyz and the admin API
// use. Devices beyond the limit wait their turn in a bounded queue, a line
// per tenant whose turns go round the tenants (snapshotgate.go), holding no
// database connection; when a device's turn comes, the waiters of its
// scope join its read (snapshotshare.go). Beyond
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
	// DefaultMaxSnapshotsPerTenant is Config.MaxSnapshotsPerTenant's
	// default: half of the default queue.
	DefaultMaxSnapshotsPerTenant = DefaultMaxQueuedSnapshots / 2
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

// scopeOf is what a principal may read: its tenant, and its readable models.
func scopeOf(p auth.Principal) replication.Scope {
	if p.CanRead(auth.Wildcard) {
		return replication.Scope{Tenant: p.Tenant, AllModels: true}
	}
	return replication.Scope{Tenant: p.Tenant, Models: p.Read}
}

// scopeKey names a scope: principals whose keys are equal read the same
// snapshot (tenant, models, and the scope values followed).
func scopeKey(sc replication.Scope) string {
	key := sc.Tenant + "\x00*"
	if !sc.AllModels {
		models := slices.Clone(sc.Models)
		slices.Sort(models)
		key = sc.Tenant + "\x00" + strings.Join(slices.Compact(models), ",")
	}
	if sc.Follow != nil {
		key += "\x00"
		for _, name := range sortedScopes(sc.Follow) {
			key += name + "=" + strings.Join(sc.Follow[name], ",") + ";"
		}
	}
	return key
}

// snapshotScope is what a snapshot request of p reads (PROTOCOL.md 19.6):
// its readable models and, when scopes are declared, the values named by
// the query (scoped=1&scope=NAME:VALUE..., "*" for every value granted)
// that p is granted, or without scoped=1 every value granted. The refusal
// is invalid_scope or too_many_scope_values, as for a subscription.
func (s *Server) snapshotScope(ctx context.Context, p auth.Principal, q url.Values) (replication.Scope, *syncproto.Error) {
	scope := scopeOf(p)
	decl := s.declared()
	var requested syncproto.ScopeSet
	if q.Get("scoped") == "1" {
		requested = syncproto.ScopeSet{}
		for _, item := range q["scope"] {
			name, value, ok := strings.Cut(item, ":")
			if !ok {
				return scope, syncproto.Errorf(syncproto.CodeInvalidScope, "scope %q: want NAME:VALUE", item)
			}
			requested[name] = append(requested[name], value)
		}
		requested.Normalize()
		if err := requested.Validate("scope", 0); err != nil {
			return scope, syncproto.AsError(err)
		}
		if decl.Empty() {
			return scope, syncproto.Errorf(syncproto.CodeInvalidScope, "this server declares no scope")
		}
	}
	if decl.Empty() {
		return scope, nil
	}
	grants, err := s.grantsOf(ctx, p)
	if err != nil {
		s.log.Error("read scope grants", "err", err)
		return scope, internalError(err)
	}
	sc, e := planScopes(decl, grants, declaredTokenGrants(decl, p), requested, nil, nil, s.maxScopeValues())
	if e != nil {
		return scope, e
	}
	scope.Follow, scope.Scopes = sc.follow, decl
	return scope, nil
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
	scope, e := s.snapshotScope(r.Context(), p, r.URL.Query())
	if e != nil {
		status := http.StatusBadRequest
		if e.Code == syncproto.CodeInternal {
			status = http.StatusInternalServerError
		}
		httpError(w, status, e)
		return
	}
	key := scopeKey(scope)
	owner := snapshotOwner{token: p.TokenID, tenant: p.Tenant}
	joined, refused := s.snapshots.enter(r.Context(), owner, key, s.cfg.SnapshotQueueTimeout)
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
		defer s.snapshots.leaveShared(owner)
		s.metrics.snapshotsShared.Inc()
		s.sendSnapshot(w, r, rc, p, joined)
		return
	}
	began := time.Now()
	defer func() { s.snapshots.leave(owner, time.Since(began)) }()

	share := newSnapshotShare(s.cfg.SnapshotShareBytes)
	mine := share.reader()
	s.snapshots.share(key, share)
	// The read runs on a goroutine this handler waits for. It serves the
	// joiners too, so this device going away does not end it: it ends when
	// the body is whole, when every reader has gone, or at SnapshotTimeout.
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
// returns an error. With scopes declared, its header names the values it
// holds complete (scope.Follow's values; a scope followed for every value
// names none) and its records carry their scope value.
func (s *Server) readSnapshot(ctx context.Context, scope replication.Scope, out io.Writer) error {
	var held syncproto.ScopeSet
	if scope.Follow != nil {
		held = syncproto.ScopeSet{}
		for name, values := range scope.Follow {
			if !scope.Follow.All(name) && len(values) > 0 {
				held[name] = values
			}
		}
	}
	var sw *syncproto.SnapshotWriter
	head, err := s.store.Records.SnapshotLive(ctx, s.snapshotDB, scope, func(head uint64, rec *replication.LiveRecord) error {
		if sw == nil {
			var err error
			if sw, err = syncproto.NewScopedSnapshotWriter(out, head, held); err != nil {
				return err
			}
		}
		return sw.Write(syncproto.SnapshotRecord{Model: rec.Model, Key: rec.Key, Value: rec.Value, Version: rec.Version, HLC: rec.HLC, ScopeValue: rec.ScopeValue})
	})
	if err == nil && sw == nil {
		sw, err = syncproto.NewScopedSnapshotWriter(out, head, held)
	}
	if err != nil {
		return err
	}
	return sw.Close()
}

// sendSnapshot writes the body reader takes from a shared read to w, each
// write within the per-write deadline and all within SnapshotTimeout, and
// leaves the read.
func (s *Server) sendSnapshot(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, p auth.Principal, reader *shareReader) {
	defer reader.close()
	end := time.Now().Add(s.cfg.SnapshotTimeout)
	ctx, cancel := context.WithDeadline(r.Context(), end)
	defer cancel()
	out := &deadlineWriter{w: w, rc: rc, timeout: s.cfg.SnapshotWriteTimeout, end: end}
	wrote := false
	for {
		chunk, err := reader.next(ctx)
		if err == io.EOF {
			return
		}
		if err == nil {
			if !wrote {
				w.Header().Set("Content-Type", syncproto.SnapshotContentType)
			}
			err = s.snapshotSends.write(ctx, out, chunk)
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
// timeout however long the whole body takes, and no write goes past end.
type deadlineWriter struct {
	w       io.Writer
	rc      *http.ResponseController
	timeout time.Duration
	end     time.Time
	renewed time.Time
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	if now := time.Now(); now.Sub(d.renewed) > d.timeout/4 {
		deadline := now.Add(d.timeout)
		if deadline.After(d.end) {
			deadline = d.end
		}
		if err := d.rc.SetWriteDeadline(deadline); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return 0, fmt.Errorf("set write deadline: %w", err)
		}
		d.renewed = now
	}
	return d.w.Write(p)
}
