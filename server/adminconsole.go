package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server/console"
)

// readiness is what /readyz checks: "" when syncd can take traffic, else
// why not.
func (s *Server) readiness(ctx context.Context) string {
	if s.draining.Load() {
		return "draining"
	}
	if err := s.store.DB.PingContext(ctx); err != nil {
		return "database unavailable"
	}
	if s.cfg.Cluster != nil {
		if err := s.cfg.Cluster.Ready(); err != nil {
			return "cluster: " + err.Error()
		}
	}
	return ""
}

// figures reads the running totals of PathFigures from the server's own
// instruments.
func (s *Server) figures(ctx context.Context) (adminapi.Figures, error) {
	f := adminapi.Figures{At: s.now().UTC(), Mutations: map[string]uint64{}, Alerts: []adminapi.Alert{}, TenantMutations: s.devices.pushedTotals()}
	f.NotReady = s.readiness(ctx)
	f.Ready = f.NotReady == ""
	var m dto.Metric
	if err := s.metrics.pushes.Write(&m); err != nil {
		return f, err
	}
	f.Pushes = uint64(m.GetCounter().GetValue())
	ch := make(chan prometheus.Metric, 16)
	go func() {
		s.metrics.mutations.Collect(ch)
		close(ch)
	}()
	for c := range ch {
		var cm dto.Metric
		if err := c.Write(&cm); err != nil {
			continue // drain the channel whatever happens, so Collect ends
		}
		for _, l := range cm.GetLabel() {
			if l.GetName() == "status" {
				f.Mutations[l.GetValue()] = uint64(cm.GetCounter().GetValue())
			}
		}
	}
	m.Reset()
	if err := s.metrics.applySeconds.Write(&m); err != nil {
		return f, err
	}
	h := m.GetHistogram()
	f.Ack = adminapi.Histogram{Count: h.GetSampleCount(), Sum: h.GetSampleSum(), Buckets: make([]adminapi.Bucket, 0, len(h.GetBucket()))}
	for _, b := range h.GetBucket() {
		f.Ack.Buckets = append(f.Ack.Buckets, adminapi.Bucket{UpperBound: b.GetUpperBound(), Count: b.GetCumulativeCount()})
	}
	if s.draining.Load() {
		f.Alerts = append(f.Alerts, adminapi.Alert{Name: "draining", Detail: "the server stopped accepting sessions to shut down"})
	} else if !f.Ready {
		f.Alerts = append(f.Alerts, adminapi.Alert{Name: "not_ready", Detail: f.NotReady})
	}
	for _, b := range s.resolver.Breakers() {
		switch b.State {
		case replication.BreakerOpen:
			f.Alerts = append(f.Alerts, adminapi.Alert{Name: "hook_breaker_open", Detail: fmt.Sprintf("the conflict hook of model %s is cut off: its writes are refused hook_unavailable (retryable)", b.Model)})
		case replication.BreakerHalfOpen:
			f.Alerts = append(f.Alerts, adminapi.Alert{Name: "hook_breaker_half_open", Detail: fmt.Sprintf("the conflict hook of model %s is being probed after failures", b.Model)})
		}
	}
	if c := s.cfg.Cluster; c != nil {
		nodes, err := c.Nodes(ctx)
		if err != nil {
			return f, err
		}
		for _, n := range nodes {
			if !n.Ready {
				f.Alerts = append(f.Alerts, adminapi.Alert{Name: "cluster_node_not_ready", Detail: fmt.Sprintf("node %s does not serve: %s", n.Node, n.Problem)})
			}
		}
	}
	return f, nil
}

func (s *Server) adminFigures(r *http.Request) (any, int, error) {
	f, err := s.figures(r.Context())
	return f, 0, err
}

// adminDisconnect drains every session of one device: the sessions answer
// what they were sent, close 1001 (going away) and the device reconnects,
// as after a restart. It loses nothing.
func (s *Server) adminDisconnect(r *http.Request) (any, int, error) {
	q := r.URL.Query()
	tenant, clientID := q.Get(adminapi.ParamTenant), q.Get(adminapi.ParamClientID)
	if tenant == "" || clientID == "" {
		return nil, http.StatusBadRequest, errors.New("tenant and client_id are required: a device is named by both")
	}
	ans := adminapi.Disconnected{Tenant: tenant, ClientID: clientID}
	for _, ss := range s.sessionList() {
		if p := ss.principal(); p.Tenant == tenant && p.ClientID == clientID {
			ss.log.Info("disconnected by an operator")
			ss.drain()
			ans.Sessions++
		}
	}
	if ans.Sessions == 0 {
		return ans, http.StatusNotFound, nil
	}
	s.metrics.operatorDisconnects.Add(float64(ans.Sessions))
	return ans, 0, nil
}

// consoleHandler is the operator console over api, the admin API it reads;
// the server makes it once and stops it in Close.
func (s *Server) consoleHandler(api http.Handler) http.Handler {
	s.consoleOnce.Do(func() {
		c, err := console.New(console.Config{API: api, Figures: s.figures, Registerer: s.registry, Now: s.now, Logger: s.log})
		if err != nil {
			s.log.Error("console disabled", "err", err)
			return
		}
		s.console = c
	})
	if s.console == nil {
		return http.NotFoundHandler()
	}
	return s.console
}

// closeConsole stops the console's sampler; no console starts after it.
func (s *Server) closeConsole() {
	s.consoleOnce.Do(func() {})
	if s.console != nil {
		s.console.Close()
	}
}

// adminTenants answers one page of the tenants this node knows of: from
// its sessions, the oplog's per-tenant counts and floors, its snapshot
// gate, its quota book, its pushes and its committer's per-tenant counts.
// A page holds the first ParamLimit names after ParamAfter of the union of
// those sources: the oplog is read for that many names at most, and the
// other sources are in memory.
func (s *Server) adminTenants(r *http.Request) (any, int, error) {
	ctx := r.Context()
	q := r.URL.Query()
	limit, err := limitParam(q, adminapi.MaxTenants)
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	after := q.Get(adminapi.ParamAfter)
	b, err := s.store.Log.Bounds(ctx, replication.Scope{AllTenants: true})
	if err != nil {
		return nil, 0, err
	}
	floors, err := s.store.Log.Floors(ctx, 0)
	if err != nil {
		return nil, 0, err
	}
	// One more than the page, to know whether another follows.
	counts, err := s.store.Log.TenantEntries(ctx, after, limit+1)
	if err != nil {
		return nil, 0, err
	}
	by := map[string]*adminapi.Tenant{}
	of := func(name string) *adminapi.Tenant {
		t := by[name]
		if t == nil {
			t = &adminapi.Tenant{Tenant: name, OplogFloor: floors.All}
			by[name] = t
		}
		return t
	}
	for _, c := range counts {
		t := of(c.Tenant)
		t.OplogEntries, t.OplogFloor = c.Entries, max(floors.All, c.Floor)
	}
	for _, ss := range s.sessionList() {
		t := of(ss.principal().Tenant)
		t.Sessions++
		t.PendingPushes += ss.pending.Load()
		if lag, ok := ss.lag(b.Head); ok {
			t.MaxLagEntries = max(t.MaxLagEntries, lag)
		}
	}
	s.snapshots.mu.Lock()
	for name, n := range s.snapshots.byTenant {
		of(name).Snapshots = n
	}
	s.snapshots.mu.Unlock()
	for name, n := range s.quotas.quotaRefusals() {
		of(name).QuotaRefusals = n
	}
	for name, n := range s.devices.pushedTotals() {
		of(name).MutationsPushed = n
	}
	families, err := s.registry.Gather()
	if err != nil {
		return nil, 0, err
	}
	for _, f := range families {
		if f.GetName() != "syncd_commit_served_mutations_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tenant" && !strings.HasPrefix(l.GetValue(), "~") {
					of(l.GetValue()).MutationsServed = uint64(m.GetCounter().GetValue())
				}
			}
		}
	}
	page := adminapi.TenantsPage{Tenants: make([]adminapi.Tenant, 0, min(len(by), limit))}
	for name, t := range by {
		if name > after && name != "" {
			page.Tenants = append(page.Tenants, *t)
		}
	}
	slices.SortFunc(page.Tenants, func(a, b adminapi.Tenant) int { return strings.Compare(a.Tenant, b.Tenant) })
	if len(page.Tenants) > limit {
		page.Tenants, page.Truncated = page.Tenants[:limit], true
		page.Next = page.Tenants[limit-1].Tenant
	}
	return page, 0, nil
}
