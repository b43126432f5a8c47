package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/internal/buildinfo"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/syncproto"
)

// AdminHandler serves the admin API: JSON over HTTP, every request
// authorised by an admin token. Serve it on its own listener, bound to
// loopback unless an operator decides otherwise.
//
//	GET /healthz
//	GET /v1/admin/status                      node, uptime, connections, oplog range, ledger size
//	GET /v1/admin/clients                     connected sessions with cursor and pending pushes
//	GET /v1/admin/oplog?from=SEQ&limit=N&tenant=T&model=M
//	GET /v1/admin/conflicts?tenant=T&model=M&before=ID&limit=N
//	GET /v1/admin/ledger/{op_id}?tenant=T     what was decided for an op, and when
//	GET /debug/pprof/...                      Go's profiles (net/http/pprof)
//
// Every path but /healthz needs an admin token, /debug/pprof included.
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.Handle("GET /v1/admin/status", s.admin(s.adminStatus))
	mux.Handle("GET /v1/admin/clients", s.admin(s.adminClients))
	mux.Handle("GET /v1/admin/oplog", s.admin(s.adminOplog))
	mux.Handle("GET /v1/admin/conflicts", s.admin(s.adminConflicts))
	mux.Handle("GET /v1/admin/ledger/{op_id}", s.admin(s.adminLedger))
	mux.Handle("/debug/pprof/", s.adminOnly(http.HandlerFunc(pprof.Index)))
	mux.Handle("/debug/pprof/cmdline", s.adminOnly(http.HandlerFunc(pprof.Cmdline)))
	mux.Handle("/debug/pprof/profile", s.adminOnly(http.HandlerFunc(pprof.Profile)))
	mux.Handle("/debug/pprof/symbol", s.adminOnly(http.HandlerFunc(pprof.Symbol)))
	mux.Handle("/debug/pprof/trace", s.adminOnly(http.HandlerFunc(pprof.Trace)))
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

// adminError is the body of every admin error answer.
type adminError struct {
	Error string `json:"error"`
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
			body = adminError{Error: err.Error()}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(max(status, http.StatusOK))
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(body)
	})
}

// Status is the answer of /v1/admin/status.
type Status struct {
	NodeID string `json:"node_id"`
	// Build is the answering syncd's build (syncd --version) and
	// DatabaseID the database it serves (welcome.database_id).
	Build         string    `json:"build"`
	DatabaseID    string    `json:"database_id"`
	StartedAt     time.Time `json:"started_at"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	Connections   int       `json:"connections"`
	Draining      bool      `json:"draining"`
	OplogHead     uint64    `json:"oplog_head"`
	OplogOldest   uint64    `json:"oplog_oldest"`
	// OplogFloor is the highest of the tenants' oplog floors: a reader of
	// every tenant (the admin oplog) may start at it or after; a device
	// is checked against its own tenant's floor, which is at most this.
	OplogFloor    uint64 `json:"oplog_floor"`
	LedgerEntries int    `json:"ledger_entries"`
	// LedgerFloor is the highest of the tenants' ledger floors: no resend
	// stamped after it is answered "expired", whatever its tenant. Zero
	// while retention never evicted a decision.
	LedgerFloor time.Time `json:"ledger_floor,omitzero"`
	// MaxClientLagEntries is the largest head-minus-cursor among live
	// subscribers: how far the slowest connected client is behind.
	MaxClientLagEntries uint64 `json:"max_client_lag_entries"`
	// Cluster is set on a cluster node: every node as it last reported.
	Cluster *ClusterStatus `json:"cluster,omitempty"`
}

// ClusterStatus is the cluster as one node sees it.
type ClusterStatus struct {
	ID string `json:"id"`
	// LeaseHolder is the node holding the singleton-job lease, as the nodes
	// report it ("" when none reports it).
	LeaseHolder string           `json:"lease_holder"`
	Nodes       []cluster.Status `json:"nodes"`
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
	st := Status{
		NodeID: s.cfg.NodeID, Build: buildinfo.Read().String(), DatabaseID: s.store.ID, StartedAt: s.started, UptimeSeconds: s.now().Sub(s.started).Seconds(),
		Connections: len(sessions), Draining: s.draining.Load(), OplogHead: b.Head, OplogOldest: b.Oldest, OplogFloor: b.Floor,
		LedgerEntries: ls.Entries, LedgerFloor: ls.MaxFloor,
	}
	for _, ss := range sessions {
		if c := ss.cursor.Load(); b.Head > c {
			st.MaxClientLagEntries = max(st.MaxClientLagEntries, b.Head-c)
		}
	}
	if c := s.cfg.Cluster; c != nil {
		nodes, err := c.Nodes(r.Context())
		if err != nil {
			return nil, 0, err
		}
		self := c.Status()
		cs := &ClusterStatus{ID: c.ID(), Nodes: []cluster.Status{self}}
		for _, n := range nodes {
			if n.Node != self.Node {
				cs.Nodes = append(cs.Nodes, n)
			}
		}
		slices.SortFunc(cs.Nodes, func(a, b cluster.Status) int { return strings.Compare(a.Node, b.Node) })
		for _, n := range cs.Nodes {
			if n.LeaseHeld {
				cs.LeaseHolder = n.Node
			}
		}
		st.Cluster = cs
	}
	return st, 0, nil
}

// Client is one connected session in /v1/admin/clients.
type Client struct {
	ClientID      string    `json:"client_id"`
	Tenant        string    `json:"tenant"`
	TokenID       string    `json:"token_id"`
	Remote        string    `json:"remote"`
	ConnectedAt   time.Time `json:"connected_at"`
	Cursor        uint64    `json:"cursor"`
	PendingPushes int64     `json:"pending_pushes"`
}

func (s *Server) adminClients(*http.Request) (any, int, error) {
	out := []Client{}
	for _, ss := range s.sessionList() {
		p := ss.principal()
		out = append(out, Client{
			ClientID: p.ClientID, Tenant: p.Tenant, TokenID: p.TokenID, Remote: ss.remote,
			ConnectedAt: ss.since, Cursor: ss.cursor.Load(), PendingPushes: ss.pending.Load(),
		})
	}
	return out, 0, nil
}

// OplogPage is the answer of /v1/admin/oplog.
type OplogPage struct {
	Entries []OplogEntry `json:"entries"`
	Next    uint64       `json:"next"`
	Head    uint64       `json:"head"`
}

// OplogEntry is one oplog entry as the admin API shows it.
type OplogEntry struct {
	syncproto.Change
	Tenant    string    `json:"tenant"`
	ClientID  string    `json:"client_id"`
	AppliedAt time.Time `json:"applied_at"`
}

func (s *Server) adminOplog(r *http.Request) (any, int, error) {
	q := r.URL.Query()
	from, err := uintParam(q.Get("from"))
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	limit, err := uintParam(q.Get("limit"))
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	page, err := s.store.Log.Read(r.Context(), replication.ReadRequest{After: from, Scope: adminScope(r), Limit: int(min(limit, syncproto.MaxPullLimit))})
	if err != nil {
		var ce *replication.CursorError
		if errors.As(err, &ce) {
			return nil, http.StatusConflict, err
		}
		return nil, 0, err
	}
	out := OplogPage{Entries: make([]OplogEntry, len(page.Entries)), Next: page.Next, Head: page.Head}
	for i, e := range page.Entries {
		out.Entries[i] = OplogEntry{
			Change: syncproto.Change{Seq: e.Seq, OpID: e.OpID, Model: e.Model, Key: e.Key, Op: syncproto.Op(e.Op), Value: e.Value, Version: e.Version, HLC: e.HLC, Deleted: e.Deleted},
			Tenant: e.Tenant, ClientID: e.ClientID, AppliedAt: e.AppliedAt,
		}
	}
	return out, 0, nil
}

func (s *Server) adminConflicts(r *http.Request) (any, int, error) {
	before, err := uintParam(r.URL.Query().Get("before"))
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	limit, err := uintParam(r.URL.Query().Get("limit"))
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	rows, err := s.store.Conflicts.List(r.Context(), replication.ConflictFilter{Scope: adminScope(r), BeforeID: int64(before), Limit: int(min(limit, 1000))})
	if err != nil {
		return nil, 0, err
	}
	out := make([]Conflict, len(rows))
	for i, c := range rows {
		out[i] = Conflict{
			ID: c.ID, Tenant: c.Tenant, Model: c.Model, Key: c.Key, Policy: string(c.Policy), Reason: c.Reason,
			Loser: conflictSide(c.Loser), Winner: conflictSide(c.Winner), DecidedAt: c.DecidedAt,
		}
	}
	return out, 0, nil
}

// Conflict is one conflict-log row in /v1/admin/conflicts, newest first.
type Conflict struct {
	ID     int64  `json:"id"`
	Tenant string `json:"tenant"`
	Model  string `json:"model"`
	Key    string `json:"key"`
	Policy string `json:"policy"`
	Reason string `json:"reason"`
	// Loser is the write that was not applied as sent; Winner the state
	// that stands (version 0: the key did not exist).
	Loser     ConflictSide `json:"loser"`
	Winner    ConflictSide `json:"winner"`
	DecidedAt time.Time    `json:"decided_at"`
}

// ConflictSide is one party to a conflict.
type ConflictSide struct {
	OpID    string              `json:"op_id,omitempty"`
	Version uint64              `json:"version"`
	Value   json.RawMessage     `json:"value,omitempty"`
	HLC     syncproto.Timestamp `json:"hlc,omitzero"`
	Deleted bool                `json:"deleted"`
}

func conflictSide(s replication.Side) ConflictSide {
	return ConflictSide{OpID: s.OpID, Version: s.Version, Value: s.Value, HLC: s.HLC, Deleted: s.Deleted}
}

// LedgerAnswer is the answer of /v1/admin/ledger/{op_id}.
type LedgerAnswer struct {
	Tenant    string            `json:"tenant"`
	OpID      string            `json:"op_id"`
	Found     bool              `json:"found"`
	OpTime    time.Time         `json:"op_time,omitzero"`
	DecidedAt time.Time         `json:"decided_at,omitzero"`
	Result    *syncproto.Result `json:"result,omitempty"`
	// Floor is the tenant's ledger floor: an op of the tenant that is not
	// held and is at or before it would be answered "expired" if resent.
	Floor time.Time `json:"floor,omitzero"`
}

func (s *Server) adminLedger(r *http.Request) (any, int, error) {
	tenant, opID := r.URL.Query().Get("tenant"), r.PathValue("op_id")
	if tenant == "" {
		return nil, http.StatusBadRequest, errors.New("tenant is required: op ids are recorded per tenant")
	}
	d, found, err := s.store.Ledger.Get(r.Context(), tenant, opID)
	if err != nil {
		return nil, 0, err
	}
	ans := LedgerAnswer{Tenant: tenant, OpID: opID, Found: found}
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
	return ans, 0, nil
}

// adminScope selects one tenant when ?tenant= is given, every tenant
// otherwise, and one model when ?model= is given.
func adminScope(r *http.Request) replication.Scope {
	q := r.URL.Query()
	sc := replication.Scope{Tenant: q.Get("tenant"), AllTenants: q.Get("tenant") == "", AllModels: true}
	if m := q.Get("model"); m != "" {
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
