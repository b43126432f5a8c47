package server

import (
	"errors"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// BearerSubprotocolPrefix starts the Sec-WebSocket-Protocol entry that
// carries a token for clients that cannot set an Authorization header on
// the upgrade (a browser's WebSocket): "syncproto.bearer.<token>", offered
// beside syncproto.v1. The server never selects it, so it is not echoed.
const BearerSubprotocolPrefix = "syncproto.bearer."

// admitUpgrade runs PROTOCOL.md section 1's checks, in the table's order,
// on a request for the sync endpoint. On a refusal it has answered with the
// JSON error body and returns false; otherwise it returns the principal
// and has counted the connection (release it with s.releaseUpgrade).
func (s *Server) admitUpgrade(w http.ResponseWriter, r *http.Request) (auth.Principal, bool) {
	refuse := func(status int, e *syncproto.Error) (auth.Principal, bool) {
		s.metrics.connectionsTotal.WithLabelValues("refused").Inc()
		s.events.add("upgrade refused", string(e.Code), r.RemoteAddr)
		httpError(w, status, e)
		return auth.Principal{}, false
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		return refuse(http.StatusMethodNotAllowed, syncproto.Errorf(syncproto.CodeBadRequest, "%s needs GET with the websocket upgrade headers", syncproto.SyncPath))
	}
	if problem := upgradeProblem(r); problem != "" {
		return refuse(http.StatusBadRequest, syncproto.Errorf(syncproto.CodeBadRequest, "not a websocket upgrade: %s", problem))
	}
	if s.draining.Load() {
		return refuse(http.StatusServiceUnavailable, retryIn(w, upgradeRetryAfterSeconds, syncproto.Errorf(syncproto.CodeShuttingDown, "server shutting down")))
	}
	if c := s.cfg.Cluster; c != nil {
		if err := c.Refuses(); err != nil {
			return refuse(http.StatusServiceUnavailable, retryIn(w, upgradeRetryAfterSeconds, syncproto.Errorf(syncproto.CodeServerBusy, "this node does not serve: %v; another node does", err)))
		}
	}
	if s.conns.Add(1) > int64(s.cfg.MaxConnections) {
		s.conns.Add(-1)
		return refuse(http.StatusServiceUnavailable, retryIn(w, upgradeRetryAfterSeconds, syncproto.Errorf(syncproto.CodeServerBusy, "too many connections")))
	}
	p, ok := s.principal(w, r, false)
	if !ok {
		s.conns.Add(-1)
		return auth.Principal{}, false
	}
	if !originAllowed(r, s.cfg.AllowedOrigins) {
		s.conns.Add(-1)
		return refuse(http.StatusForbidden, syncproto.Errorf(syncproto.CodeForbiddenOrigin, "origin %q is not allowed", r.Header.Get("Origin")))
	}
	if !offersSubprotocol(r) {
		s.conns.Add(-1)
		return refuse(http.StatusBadRequest, syncproto.Errorf(syncproto.CodeBadRequest, "the websocket subprotocol %s is required", syncproto.Subprotocol))
	}
	if e := s.quotas.openConn(p); e != nil {
		s.conns.Add(-1)
		s.metrics.connectionsTotal.WithLabelValues("refused").Inc()
		s.events.add("upgrade refused", string(e.Code), r.RemoteAddr)
		refuseConns(w, e)
		return auth.Principal{}, false
	}
	return p, true
}

// upgradeRetryAfterSeconds is when an upgrade refused because the server
// drains or holds MaxConnections sessions may be tried again.
const upgradeRetryAfterSeconds = 5

// retryIn sets e's retry_after_ms and w's Retry-After to secs seconds, so
// a client reading either learns the same wait, and returns e.
func retryIn(w http.ResponseWriter, secs int, e *syncproto.Error) *syncproto.Error {
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	e.RetryAfterMS = int64(secs) * 1000
	return e
}

// releaseUpgrade gives back what admitUpgrade counted for p.
func (s *Server) releaseUpgrade(p auth.Principal) {
	s.quotas.closeConn(p)
	s.conns.Add(-1)
}

// upgradeProblem names what makes r not a websocket upgrade request, or
// returns "".
func upgradeProblem(r *http.Request) string {
	switch {
	case !headerHasToken(r.Header, "Connection", "upgrade"):
		return "Connection: Upgrade is missing"
	case !headerHasToken(r.Header, "Upgrade", "websocket"):
		return "Upgrade: websocket is missing"
	case r.Header.Get("Sec-WebSocket-Version") != "13":
		return "Sec-WebSocket-Version must be 13"
	case r.Header.Get("Sec-WebSocket-Key") == "":
		return "Sec-WebSocket-Key is missing"
	}
	return ""
}

// headerHasToken reports whether the comma-separated header name holds
// token, compared without case.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// originAllowed applies the origin allow-list (Config.AllowedOrigins): a
// request without Origin (a native client) passes; an Origin whose host is
// the request's Host passes; otherwise its host[:port] must match one of
// patterns (path.Match syntax, without case: "app.example.com",
// "*.example.com", "localhost:*"). A pattern holding "://" is matched
// against the whole origin, scheme included.
func originAllowed(r *http.Request, patterns []string) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	for _, p := range patterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(target)); ok {
			return true
		}
	}
	return false
}

// crossOrigin serves the snapshot to web pages (PROTOCOL.md section 7): a
// response to a request whose Origin the allow-list admits (originAllowed)
// names that origin in Access-Control-Allow-Origin, so the page may read
// it; any other origin gets no such header, so a browser keeps the answer
// from the page. What the request may do is still decided by its token.
func (s *Server) crossOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Origin")
		if origin := r.Header.Get("Origin"); origin != "" && originAllowed(r, s.cfg.AllowedOrigins) {
			w.Header().Set("Access-Control-Allow-Origin", origin)
			w.Header().Set("Access-Control-Expose-Headers", "Retry-After")
		}
		next.ServeHTTP(w, r)
	})
}

// snapshotPreflight answers a browser's CORS preflight for the snapshot:
// an allowed origin may GET it with an Authorization header; any other is
// refused forbidden_origin.
func (s *Server) snapshotPreflight(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	if origin == "" || !originAllowed(r, s.cfg.AllowedOrigins) {
		httpError(w, http.StatusForbidden, syncproto.Errorf(syncproto.CodeForbiddenOrigin, "origin %q is not allowed", origin))
		return
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Methods", http.MethodGet)
	h.Set("Access-Control-Allow-Headers", "Authorization")
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
}

// offersSubprotocol reports whether r offers syncproto.v1.
func offersSubprotocol(r *http.Request) bool {
	for _, p := range offeredSubprotocols(r) {
		if p == syncproto.Subprotocol {
			return true
		}
	}
	return false
}

// bearerToken is the token r presents: the Authorization header's, else
// the one carried by a BearerSubprotocolPrefix entry, else "".
func bearerToken(r *http.Request) string {
	if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return strings.TrimSpace(token)
	}
	for _, p := range offeredSubprotocols(r) {
		if token, ok := strings.CutPrefix(p, BearerSubprotocolPrefix); ok {
			return token
		}
	}
	return ""
}

func offeredSubprotocols(r *http.Request) []string {
	var out []string
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			out = append(out, strings.TrimSpace(p))
		}
	}
	return out
}

// authError is the refusal for an authentication or session-recheck
// failure: token_expired for an expired JWT, else unauthorized saying why
// when the authenticator said (a JWT's failed check, a revocation).
func authError(err error) *syncproto.Error {
	if errors.Is(err, auth.ErrTokenExpired) {
		return syncproto.Errorf(syncproto.CodeTokenExpired, "%s; get a fresh token and reconnect", strings.TrimPrefix(err.Error(), "auth: "))
	}
	if err == nil || err == auth.ErrUnauthorized {
		return syncproto.Errorf(syncproto.CodeUnauthorized, "a valid bearer token is required")
	}
	return syncproto.Errorf(syncproto.CodeUnauthorized, "%s", strings.TrimPrefix(err.Error(), "auth: unauthorized: "))
}

// principal is the session's principal, safe from any goroutine.
func (ss *session) principal() auth.Principal {
	ss.pMu.Lock()
	defer ss.pMu.Unlock()
	return ss.p
}

// bindClientID applies PROTOCOL.md section 1.1 to hello's client id: a
// principal bound to a client id must name it; one with a device
// namespace (a JWT without a client id claim) may name any valid id in
// it, which the session then acts as. Only the reader calls it.
func (ss *session) bindClientID(id string) *syncproto.Error {
	if ss.p.ClientID != "" {
		if id != ss.p.ClientID {
			return syncproto.Errorf(syncproto.CodeWrongClientID, "this token acts as client %q, not %q", ss.p.ClientID, id)
		}
		return nil
	}
	if !syncproto.InDeviceNamespace(id, ss.p.ClientIDPrefix) {
		return syncproto.Errorf(syncproto.CodeWrongClientID, "user %q may act only as client ids starting %q (PROTOCOL.md section 1.1), not %q", ss.p.User, ss.p.ClientIDPrefix, id)
	}
	ss.pMu.Lock()
	ss.p.ClientID = id
	ss.pMu.Unlock()
	return nil
}
