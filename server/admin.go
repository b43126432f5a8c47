package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"strings"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/internal/buildinfo"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/server/console"
	"github.com/syncd-dev/syncd/syncproto"
)

// AdminHandler serves the admin API (package adminapi holds its paths and
// answers): JSON over HTTP, every request authorised by an admin token. Serve it on its own listener, bound to
// loopback unless an operator decides otherwise.
//
//	GET /healthz
//	GET /v1/admin/status                      node, uptime, connections, oplog range, ledger size
//	GET /v1/admin/clients                     connected sessions with cursor and pending pushes
//	GET /v1/admin/oplog?from=SEQ&limit=N&tenant=T&model=M
//	GET /v1/admin/conflicts?tenant=T&model=M&before=ID&limit=N
//	GET /v1/admin/ledger/{op_id}?tenant=T     what was decided for an op, and when
//	GET|POST|DELETE /v1/admin/deny            the JWT deny list: list, deny a jti or user, remove an entry
//	GET /v1/admin/figures                     running totals (pushes, mutations, ack latency), readiness, alerts
//	GET /v1/admin/tenants                     tenants: sessions, lag, oplog floor, snapshots, mutations served
//	POST /v1/admin/clients/disconnect?tenant=T&client_id=C   drain one device's sessions
//	GET /v1/admin/scopes?tenant=T&scope=S&value=V&user=U&after=A&limit=N   declared scopes, values with grants and devices, a user's grants
//	GET /v1/admin/scopes/explain?tenant=T&client_id=C&model=M&key=K&want=S:V   whether a key is on a device's scopes, and why
//	GET /v1/admin/clients/recent              devices disconnected lately: last push, last error
//	GET /v1/admin/cluster                     a cluster node's NATS servers, the stream's leader and replicas
//	GET|POST|DELETE /v1/admin/tokens          the token file: list (paged), issue (shown once), revoke
//	GET /console/...                          the operator console (package console)
//	GET /debug/pprof/...                      Go's profiles (net/http/pprof)
//	GET /startupz                             503 until the boot is over (MarkServing), then 200
//	GET /debug/snapshot                       sessions, pools, breakers, lease, queues (DebugSnapshot, at most 1 MB)
//
// Every path but /healthz and /startupz needs an admin token, /debug/pprof
// included; the console takes it in a login form (or the same bearer
// header) and reads every page from the admin API above.
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(console.Path, s.consoleHandler(mux))
	mux.Handle("GET "+adminapi.PathFigures, s.admin(s.adminFigures))
	mux.Handle("GET "+adminapi.PathTenants, s.admin(s.adminTenants))
	mux.Handle("POST "+adminapi.PathDisconnect, s.admin(s.adminDisconnect))
	mux.Handle("GET "+adminapi.PathRecentDevices, s.admin(s.adminRecentDevices))
	mux.Handle("GET "+adminapi.PathCluster, s.admin(s.adminCluster))
	mux.Handle("GET "+adminapi.PathTokens, s.admin(s.adminTokens))
	mux.Handle("POST "+adminapi.PathTokens, s.admin(s.adminIssueToken))
	mux.Handle("DELETE "+adminapi.PathTokens, s.admin(s.adminRevokeToken))
	mux.HandleFunc("GET "+adminapi.PathHealth, s.healthz)
	mux.HandleFunc("GET /startupz", s.startupz)
	mux.Handle("GET /debug/snapshot", s.adminOnly(http.HandlerFunc(s.debugSnapshot)))
	mux.Handle("GET "+adminapi.PathStatus, s.admin(s.adminStatus))
	mux.Handle("GET "+adminapi.PathSessions, s.admin(s.adminClients))
	mux.Handle("GET "+adminapi.PathOplog, s.admin(s.adminOplog))
	mux.Handle("GET "+adminapi.PathConflicts, s.admin(s.adminConflicts))
	mux.Handle("GET "+adminapi.PathLedgerPrefix+"{op_id}", s.admin(s.adminLedger))
	mux.Handle("GET "+adminapi.PathDeny, s.admin(s.adminDenyList))
	mux.Handle("POST "+adminapi.PathDeny, s.admin(s.adminDeny))
	mux.Handle("DELETE "+adminapi.PathDeny, s.admin(s.adminAllow))
	mux.Handle(adminapi.PathProfiles, s.adminOnly(http.HandlerFunc(pprof.Index)))
	mux.Handle("/debug/pprof/cmdline", s.adminOnly(http.HandlerFunc(pprof.Cmdline)))
	mux.Handle("/debug/pprof/profile", s.adminOnly(http.HandlerFunc(pprof.Profile)))
	mux.Handle("/debug/pprof/symbol", s.adminOnly(http.HandlerFunc(pprof.Symbol)))
	mux.Handle("/debug/pprof/trace", s.adminOnly(http.HandlerFunc(pprof.Trace)))
	s.scopesRoutes(mux)
	return mux
}

// adminOnly serves h to admin tokens only.
func (s *Server) adminOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := s.principal(w, r, true); ok {
			h.ServeHTTP(w, r)
		}
	})
}

// admin authorises an admin handler and writes its result or error as JSON.
func (s *Server) admin(h func(*http.Request) (any, int, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := s.principal(w, r, true); !ok {
			return
		}
		body, status, err := h(r)
		if err != nil {
			if status == 0 {
				status = http.StatusInternalServerError
				s.log.Error("admin request failed", "path", r.URL.Path, "err", err)
			}
			body = adminapi.Error{Error: err.Error()}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(max(status, http.StatusOK))
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(body)
	})
}

func (s *Server) adminStatus(r *http.Request) (any, int, error) {
	b, err := s.store.Log.Bounds(r.Context(), replication.Scope{AllTenants: true})
	if err != nil {
		return nil, 0, err
	}
	ls, err := s.store.Ledger.Stats(r.Context())
	if err != nil {
		return nil, 0, err
	}
	sessions := s.sessionList()
	st := adminapi.Status{
		NodeID: s.cfg.NodeID, Build: buildinfo.Read().String(), DatabaseID: s.databaseID, SchemaVersion: s.store.SchemaVersion, StartedAt: s.started, UptimeSeconds: s.now().Sub(s.started).Seconds(),
		Connections: len(sessions), Draining: s.draining.Load(), OplogHead: b.Head, OplogOldest: b.Oldest, OplogFloor: b.Floor,
		LedgerEntries: ls.Entries, LedgerFloor: ls.MaxFloor,
	}
	for _, ss := range sessions {
		if lag, ok := ss.lag(b.Head); ok {
			st.MaxClientLagEntries = max(st.MaxClientLagEntries, lag)
		}
	}
	if c := s.cfg.Cluster; c != nil {
		nodes, err := c.Nodes(r.Context())
		if err != nil {
			return nil, 0, err
		}
		self := c.Status()
		cs := &adminapi.ClusterStatus{ID: c.ID(), Nodes: []adminapi.Node{adminNode(self)}}
		for _, n := range nodes {
			if n.Node != self.Node {
				cs.Nodes = append(cs.Nodes, adminNode(n))
			}
		}
		slices.SortFunc(cs.Nodes, func(a, b adminapi.Node) int { return strings.Compare(a.Node, b.Node) })
		for _, n := range cs.Nodes {
			if n.LeaseHeld {
				cs.LeaseHolder, cs.LeaseToken = n.Node, n.LeaseToken
			}
		}
		st.Cluster = cs
	}
	return st, 0, nil
}

func (s *Server) adminClients(*http.Request) (any, int, error) {
	out := []adminapi.Session{}
	for _, ss := range s.sessionList() {
		p := ss.principal()
		a := s.devices.activity(p.Tenant, p.ClientID)
		out = append(out, adminapi.Session{
			ClientID: p.ClientID, Tenant: p.Tenant, User: p.User, TokenID: p.TokenID, Remote: ss.remote,
			ConnectedAt: ss.since, Cursor: ss.cursor.Load(), Subscribed: ss.feeding.Load(), PendingPushes: ss.pending.Load(),
			LastPushAt: a.lastPush, LastPushOps: a.lastPushOps, LastError: string(a.lastError), LastErrorAt: a.lastErrorAt,
		})
	}
	return out, 0, nil
}

func (s *Server) adminOplog(r *http.Request) (any, int, error) {
	q := r.URL.Query()
	from, err := uintParam(q.Get(adminapi.ParamFrom))
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	limit, err := uintParam(q.Get(adminapi.ParamLimit))
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	page, err := s.store.Log.Read(r.Context(), replication.ReadRequest{After: from, Scope: adminScope(r), Limit: int(min(limit, adminapi.MaxOplogPage))})
	if err != nil {
		var ce *replication.CursorError
		if errors.As(err, &ce) {
			return nil, http.StatusConflict, err
		}
		return nil, 0, err
	}
	out := adminapi.OplogPage{Entries: make([]adminapi.OplogEntry, len(page.Entries)), Next: page.Next, Head: page.Head}
	for i, e := range page.Entries {
		out.Entries[i] = adminapi.OplogEntry{
			Change: e.Change,
			Tenant: e.Tenant, ClientID: e.ClientID, User: adminapi.UserOfClientID(e.ClientID), AppliedAt: e.AppliedAt,
		}
	}
	return out, 0, nil
}

func (s *Server) adminConflicts(r *http.Request) (any, int, error) {
	before, err := uintParam(r.URL.Query().Get(adminapi.ParamBefore))
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	limit, err := uintParam(r.URL.Query().Get(adminapi.ParamLimit))
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	rows, err := s.store.Conflicts.List(r.Context(), replication.ConflictFilter{Scope: adminScope(r), BeforeID: int64(before), Limit: int(min(limit, adminapi.MaxConflicts))})
	if err != nil {
		return nil, 0, err
	}
	out := make([]adminapi.Conflict, len(rows))
	for i, c := range rows {
		out[i] = adminapi.Conflict{
			ID: c.ID, Tenant: c.Tenant, Model: c.Model, Key: c.Key, Policy: c.Policy, Reason: c.Reason,
			Loser: conflictSide(c.Loser), Winner: conflictSide(c.Winner), DecidedAt: c.DecidedAt,
		}
	}
	return out, 0, nil
}

// adminNode is a cluster node's report as the admin API shows it.
func adminNode(n cluster.Status) adminapi.Node {
	return adminapi.Node{Node: n.Node, AppliedSeq: n.AppliedSeq, Digest: n.Digest, StreamHead: n.StreamHead, Lag: n.Lag,
		LeaseHeld: n.LeaseHeld, Ready: n.Ready, Problem: n.Problem, At: n.At, Agreement: n.Agreement,
		Format: n.Format, ClusterVersion: n.ClusterVersion,
		LeaseToken: n.LeaseToken, LastDigestCheck: adminCheck(n.LastDigestCheck), LastRecordsCheck: adminCheck(n.LastRecordsCheck)}
}

func conflictSide(s replication.Side) adminapi.ConflictSide {
	// A write's HLC origin is its device's client id (the committer
	// refuses any other), so the conflict log names the device without a
	// column of its own.
	return adminapi.ConflictSide{OpID: s.OpID, ClientID: s.HLC.Origin, User: adminapi.UserOfClientID(s.HLC.Origin),
		Version: s.Version, Value: s.Value, HLC: s.HLC, Deleted: s.Deleted}
}

func (s *Server) adminLedger(r *http.Request) (any, int, error) {
	tenant, opID := r.URL.Query().Get(adminapi.ParamTenant), r.PathValue("op_id")
	if tenant == "" {
		return nil, http.StatusBadRequest, errors.New("tenant is required: op ids are recorded per tenant")
	}
	d, found, err := s.store.Ledger.Get(r.Context(), tenant, opID)
	if err != nil {
		return nil, 0, err
	}
	ans := adminapi.LedgerAnswer{Tenant: tenant, OpID: opID, Found: found}
	if floor, err := s.store.Ledger.Floor(r.Context(), tenant); err == nil {
		ans.Floor = floor
	}
	if !found {
		return ans, http.StatusNotFound, nil
	}
	ans.OpTime, ans.DecidedAt = d.OpTime, d.DecidedAt
	var res syncproto.Result
	if err := json.Unmarshal(d.Result, &res); err != nil {
		return nil, 0, err
	}
	ans.Result = &res
	// The ledger keeps no client id: the oplog entry the op made, while
	// retained, names the device and so its user.
	if res.Seq > 0 {
		page, err := s.store.Log.Read(r.Context(), replication.ReadRequest{After: res.Seq - 1, Scope: replication.Scope{Tenant: tenant, AllModels: true}, Limit: 1, MaxBytes: 1})
		if err == nil && len(page.Entries) == 1 && page.Entries[0].Seq == res.Seq && page.Entries[0].OpID == opID {
			ans.ClientID = page.Entries[0].ClientID
			ans.User = adminapi.UserOfClientID(ans.ClientID)
		}
	}
	return ans, 0, nil
}

// adminScope selects one tenant when ?tenant= is given, every tenant
// otherwise, and one model when ?model= is given.
func adminScope(r *http.Request) replication.Scope {
	q := r.URL.Query()
	sc := replication.Scope{Tenant: q.Get(adminapi.ParamTenant), AllTenants: q.Get(adminapi.ParamTenant) == "", AllModels: true}
	if m := q.Get(adminapi.ParamModel); m != "" {
		sc.Models, sc.AllModels = []string{m}, false
	}
	return sc
}

func uintParam(v string) (uint64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, errors.New("want a non-negative integer, got " + strconv.Quote(v))
	}
	return n, nil
}
