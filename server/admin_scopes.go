package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// The partial-sync admin endpoints (adminapi.PathScopes and
// PathScopesExplain): what an operator asks of scopes. They read the
// records (scope values and membership rows, by the records_scope and
// records_member indexes), the oplog (a key's history, at most
// adminapi.MaxExplainScan seqs back), the requested sets recorded at each
// device's last subscribe with scopes (replicated: the same on every
// node) and the sessions connected to this node. The token grants of a
// device not connected here are not known here.

// scopesRoutes adds the partial-sync endpoints to mux.
func (s *Server) scopesRoutes(mux *http.ServeMux) {
	mux.Handle("GET "+adminapi.PathScopes, s.admin(s.adminScopes))
	mux.Handle("GET "+adminapi.PathScopesExplain, s.admin(s.adminScopesExplain))
}

// badParam answers an admin request's parameter error (400).
func badParam(format string, args ...any) (any, int, error) {
	return nil, http.StatusBadRequest, fmt.Errorf(format, args...)
}

// scopeDecls returns the declarations as the admin API lists them.
func scopeDecls(decl *replication.Scopes) []adminapi.ScopeDecl {
	out := []adminapi.ScopeDecl{}
	for _, name := range decl.Names() {
		d := decl.Named(name)
		out = append(out, adminapi.ScopeDecl{Name: name, Models: d.Fields, Membership: d.Membership})
	}
	return out
}

// device is one session of a tenant connected here and what it holds.
type device struct {
	p      auth.Principal
	token  syncproto.ScopeSet
	grants syncproto.ScopeSet // token and membership
}

// devicesOf returns tenant's sessions connected here with their grants,
// reading each user's membership grants once.
func (s *Server) devicesOf(ctx context.Context, tenant string) ([]device, error) {
	decl := s.declared()
	byUser := map[string]syncproto.ScopeSet{}
	var out []device
	for _, ss := range s.sessionList() {
		p := ss.principal()
		if p.Tenant != tenant {
			continue
		}
		d := device{p: p, token: declaredTokenGrants(decl, p), grants: syncproto.ScopeSet{}}
		held, ok := byUser[p.User]
		if !ok && p.User != "" {
			var err error
			if held, err = s.store.Records.Grants(ctx, tenant, p.User, decl); err != nil {
				return nil, err
			}
			byUser[p.User] = held
		}
		for name, values := range held {
			d.grants[name] = slices.Clone(values)
		}
		for name, values := range d.token {
			if slices.Contains(values, syncproto.AllValues) {
				d.grants[name] = []string{syncproto.AllValues}
			} else if !d.grants.All(name) {
				d.grants[name] = append(d.grants[name], values...)
			}
		}
		d.grants.Normalize()
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b device) int { return strings.Compare(a.p.ClientID, b.p.ClientID) })
	return out, nil
}

func (dv device) api() adminapi.Device {
	return adminapi.Device{ClientID: dv.p.ClientID, User: dv.p.User, TokenGrants: dv.token}
}

func (s *Server) adminScopes(r *http.Request) (any, int, error) {
	ctx, q, decl := r.Context(), r.URL.Query(), s.declared()
	page := adminapi.ScopesPage{Scopes: scopeDecls(decl), Tenant: q.Get(adminapi.ParamTenant)}
	scope, value, user, after := q.Get(adminapi.ParamScope), q.Get(adminapi.ParamValue), q.Get(adminapi.ParamUser), q.Get(adminapi.ParamAfter)
	if page.Tenant == "" {
		if scope != "" || value != "" || user != "" || after != "" {
			return badParam("tenant is required with scope, value, user or after: scope values and grants are per tenant")
		}
		return page, 0, nil
	}
	if user != "" && syncproto.ValidateUser(user) != nil {
		return badParam("user %q: want 1 to %d bytes of UTF-8 without control characters", user, syncproto.MaxUserBytes)
	}
	if scope != "" && decl.Named(scope) == nil {
		return badParam("scope %q is not declared (declared: %s)", scope, strings.Join(decl.Names(), ", "))
	}
	if value != "" && scope == "" {
		if names := decl.Names(); len(names) == 1 {
			scope = names[0]
		} else {
			return badParam("value needs scope: %d scopes are declared", len(names))
		}
	}
	limit, err := uintParam(q.Get(adminapi.ParamLimit))
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	if limit == 0 || limit > adminapi.MaxScopeValuesPage {
		limit = adminapi.MaxScopeValuesPage
	}
	afterScope, afterValue, _ := strings.Cut(after, ":")
	devices, err := s.devicesOf(ctx, page.Tenant)
	if err != nil {
		return nil, 0, err
	}
	names := decl.Names()
	if scope != "" {
		names = []string{scope}
	}
	for _, name := range names {
		if name < afterScope || uint64(len(page.Values)) >= limit {
			continue
		}
		from := ""
		if name == afterScope {
			from = afterValue
		}
		values, err := s.scopeValues(ctx, page.Tenant, decl.Named(name), from, value, int(limit)-len(page.Values))
		if err != nil {
			return nil, 0, err
		}
		if value != "" && len(values) == 0 {
			values = []adminapi.ScopeValue{{Scope: name, Value: value}}
		}
		requesting, err := s.store.RequestedCounts(ctx, page.Tenant, name, valuesOf(values))
		if err != nil {
			return nil, 0, err
		}
		for i := range values {
			v := &values[i]
			v.Requesting = requesting[v.Value]
			for _, dv := range devices {
				if dv.grants.Has(v.Scope, v.Value) {
					v.Devices++
					if value != "" && len(v.DeviceList) < adminapi.MaxScopeValueMembers {
						v.DeviceList = append(v.DeviceList, dv.api())
					}
				}
			}
			if value != "" {
				if v.MemberRows, err = s.memberRows(ctx, page.Tenant, decl.Named(name), "", v.Value, adminapi.MaxScopeValueMembers); err != nil {
					return nil, 0, err
				}
			}
		}
		page.Values = append(page.Values, values...)
	}
	if value == "" && uint64(len(page.Values)) == limit {
		last := page.Values[len(page.Values)-1]
		page.Next = last.Scope + ":" + last.Value
	}
	if user != "" {
		if page.User, err = s.userGrants(ctx, page.Tenant, user, devices); err != nil {
			return nil, 0, err
		}
	}
	return page, 0, nil
}

// valuesOf returns the values of vs, in order.
func valuesOf(vs []adminapi.ScopeValue) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Value
	}
	return out
}

// scopeValues reads up to limit values of scope d in tenant after from
// (only value, when set) with live records, and counts their rows and
// members.
func (s *Server) scopeValues(ctx context.Context, tenant string, d *replication.ScopeDecl, from, value string, limit int) ([]adminapi.ScopeValue, error) {
	models := slices.Sorted(func(yield func(string) bool) {
		for m := range d.Fields {
			if !yield(m) {
				return
			}
		}
	})
	args := []any{tenant}
	cond := "scope_value > ?"
	if value != "" {
		cond, from = "scope_value = ?", value
	}
	args = append(args, from)
	for _, m := range models {
		args = append(args, m)
	}
	args = append(args, limit)
	rows, err := s.store.DB.QueryContext(ctx, `SELECT scope_value, count(*), count(DISTINCT member) FROM records
		WHERE tenant = ? AND scope_value IS NOT NULL AND `+cond+` AND deleted = 0
		AND model IN (?`+strings.Repeat(",?", len(models)-1)+`)
		GROUP BY scope_value ORDER BY scope_value LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("scope values of %s: %w", d.Name, err)
	}
	defer rows.Close()
	var out []adminapi.ScopeValue
	for rows.Next() {
		v := adminapi.ScopeValue{Scope: d.Name}
		if err := rows.Scan(&v.Value, &v.Rows, &v.Members); err != nil {
			return nil, fmt.Errorf("scope values of %s: %w", d.Name, err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// memberRows reads up to limit live membership rows of scope d in tenant,
// of user and/or of value ("" for any), by value, user and key.
func (s *Server) memberRows(ctx context.Context, tenant string, d *replication.ScopeDecl, user, value string, limit int) ([]adminapi.MemberRow, error) {
	if d.Membership == nil {
		return nil, nil
	}
	query := `SELECT scope_value, member, model, key, seq FROM records
		WHERE tenant = ? AND model = ? AND member IS NOT NULL AND deleted = 0`
	args := []any{tenant, d.Membership.Model}
	if user != "" {
		query += ` AND member = ?`
		args = append(args, user)
	}
	if value != "" {
		query += ` AND scope_value = ?`
		args = append(args, value)
	}
	query += ` ORDER BY scope_value, member, key LIMIT ?`
	args = append(args, limit)
	rows, err := s.store.DB.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("membership rows of %s: %w", d.Name, err)
	}
	defer rows.Close()
	out := []adminapi.MemberRow{}
	for rows.Next() {
		var m adminapi.MemberRow
		if err := rows.Scan(&m.Value, &m.User, &m.Model, &m.Key, &m.Seq); err != nil {
			return nil, fmt.Errorf("membership rows of %s: %w", d.Name, err)
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// userGrants answers ParamUser: the user's membership rows of every scope
// (at most MaxScopeValueMembers), what they grant, and the user's devices
// connected here.
func (s *Server) userGrants(ctx context.Context, tenant, user string, devices []device) (*adminapi.UserGrants, error) {
	decl := s.declared()
	ug := &adminapi.UserGrants{User: user, Membership: []adminapi.MemberRow{}, Devices: []adminapi.Device{}}
	held, err := s.store.Records.Grants(ctx, tenant, user, decl)
	if err != nil {
		return nil, err
	}
	ug.Grants = held
	for _, name := range decl.Names() {
		left := adminapi.MaxScopeValueMembers - len(ug.Membership)
		rows, err := s.memberRows(ctx, tenant, decl.Named(name), user, "", left+1)
		if err != nil {
			return nil, err
		}
		if len(rows) > left {
			rows, ug.Truncated = rows[:left], true
		}
		ug.Membership = append(ug.Membership, rows...)
	}
	for _, dv := range devices {
		if dv.p.User == user {
			ug.Devices = append(ug.Devices, dv.api())
		}
	}
	return ug, nil
}

// parseWant reads ParamWant's SCOPE:VALUE items as a request (nil when
// none is given), each scope declared and each value valid or "*".
func parseWant(decl *replication.Scopes, items []string) (syncproto.ScopeSet, error) {
	if len(items) == 0 {
		return nil, nil
	}
	want := syncproto.ScopeSet{}
	for _, item := range items {
		name, value, ok := strings.Cut(item, ":")
		switch {
		case !ok:
			return nil, fmt.Errorf("want %q: want SCOPE:VALUE", item)
		case decl.Named(name) == nil:
			return nil, fmt.Errorf("want %q: scope %q is not declared", item, name)
		case value != syncproto.AllValues && syncproto.ValidateScopeValue(value) != nil:
			return nil, fmt.Errorf("want %q: not a scope value (1 to %d bytes of UTF-8 without control characters)", item, syncproto.MaxScopeValueBytes)
		}
		want[name] = append(want[name], value)
	}
	for name, values := range want {
		if slices.Contains(values, syncproto.AllValues) {
			want[name] = []string{syncproto.AllValues}
		}
	}
	want.Normalize()
	if n := want.Count(); n > syncproto.DefaultMaxScopeValues {
		return nil, fmt.Errorf("want names %d values, more than %d", n, syncproto.DefaultMaxScopeValues)
	}
	return want, nil
}

func (s *Server) adminScopesExplain(r *http.Request) (any, int, error) {
	ctx, q, decl := r.Context(), r.URL.Query(), s.declared()
	ans := adminapi.KeyExplanation{Tenant: q.Get(adminapi.ParamTenant), ClientID: q.Get(adminapi.ParamClientID),
		Model: q.Get(adminapi.ParamModel), Key: q.Get(adminapi.ParamKey), Events: []adminapi.KeyEvent{}}
	if ans.Tenant == "" || ans.ClientID == "" || ans.Model == "" || ans.Key == "" {
		return badParam("tenant, client_id, model and key are required")
	}
	want, err := parseWant(decl, q[adminapi.ParamWant])
	if err != nil {
		return nil, http.StatusBadRequest, err
	}
	recorded, found, err := s.store.RequestedSet(ctx, ans.Tenant, ans.ClientID)
	if err != nil {
		return nil, 0, err
	}
	switch {
	case want != nil:
		ans.Requested, ans.RequestedFrom = want, adminapi.RequestedWant
	case found:
		at := recorded.At
		ans.Requested, ans.RequestedFrom, ans.RequestedAt = recorded.Scopes, adminapi.RequestedRecorded, &at
	}
	for _, ss := range s.sessionList() {
		if p := ss.principal(); p.Tenant == ans.Tenant && p.ClientID == ans.ClientID {
			ans.Connected, ans.User, ans.TokenGrants = true, p.User, declaredTokenGrants(decl, p)
			break
		}
	}
	if ans.User == "" && found {
		ans.User = recorded.User
	}
	if ans.User == "" {
		ans.User = adminapi.UserOfClientID(ans.ClientID)
	}
	if u := q.Get(adminapi.ParamUser); u != "" {
		if syncproto.ValidateUser(u) != nil {
			return badParam("user %q: want 1 to %d bytes of UTF-8 without control characters", u, syncproto.MaxUserBytes)
		}
		ans.User = u
	}
	d := decl.Of(ans.Model)
	if d == nil {
		ans.Verdict = adminapi.KeyUnscoped
		ans.Why = fmt.Sprintf("model %s is covered by no scope: every device of tenant %s whose token may read %s holds %s, whatever its scopes", ans.Model, ans.Tenant, ans.Model, ans.Key)
		return ans, 0, nil
	}
	ans.Scope = d.Name
	rec, found, err := s.store.Records.Current(ctx, ans.Tenant, ans.Model, ans.Key)
	if err != nil {
		return nil, 0, err
	}
	if !found {
		ans.Verdict = adminapi.KeyNotFound
		ans.Why = fmt.Sprintf("tenant %s has no record %s/%s", ans.Tenant, ans.Model, ans.Key)
		return ans, 0, nil
	}
	ans.ScopeValue, ans.Version, ans.Seq, ans.Deleted = rec.ScopeValue, rec.Version, rec.Seq, rec.Deleted
	var rows []adminapi.MemberRow
	if ans.User != "" {
		if rows, err = s.memberRows(ctx, ans.Tenant, d, ans.User, "", adminapi.MaxScopeValueMembers); err != nil {
			return nil, 0, err
		}
	}
	for _, m := range rows {
		if !slices.Contains(ans.MemberGrants, m.Value) {
			ans.MemberGrants = append(ans.MemberGrants, m.Value)
		}
	}
	if err := s.keyHistory(ctx, d, &ans); err != nil {
		return nil, 0, err
	}
	explainKey(&ans, rows)
	return ans, 0, nil
}
