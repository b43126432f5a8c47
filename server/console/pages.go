package console

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncproto"
)

// readable is a JSON value as people read it: the server stores values
// with <, > and & escaped as \u003c..., which the console turns back into
// the characters (html/template escapes them for the page). Objects show
// their members sorted by name.
func readable(b []byte) string {
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return string(b)
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return string(b)
	}
	return strings.TrimSuffix(out.String(), "\n")
}

// view is what every page's template gets.
type view struct {
	Title string
	Nav   string // the active tab
	CSRF  string // the session's CSRF token ("" on the bearer header)
	Flash string
	Data  any
}

// pages holds the parsed templates, one set per page over the layout.
type pages struct {
	byName map[string]*template.Template
}

var funcs = template.FuncMap{
	"since": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"duration": func(secs float64) string { return (time.Duration(secs) * time.Second).String() },
	"lag":      func(head, cursor uint64) uint64 { return sub(head, cursor) },
	"raw":      readable,
	"size":     func(b []byte) string { return fmt.Sprintf("%d bytes", len(b)) },
	"q":        query,
	"join":     func(v []string) string { return strings.Join(v, ",") },
}

// query is the query string of key, value pairs, values escaped; an empty
// string and a zero number are left out (their parameter's default).
func query(kv ...any) template.URL {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		val := kv[i+1]
		if val == "" || val == 0 || val == int64(0) || val == uint64(0) {
			continue
		}
		v.Set(fmt.Sprint(kv[i]), fmt.Sprint(val))
	}
	return template.URL(v.Encode())
}

func parsePages() (*pages, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	p := &pages{byName: map[string]*template.Template{}}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", name, err)
		}
		p.byName[name] = t
	}
	return p, nil
}

// render writes the page name with v, whole or not at all.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, v view, id any) {
	if idt, ok := id.(identity); ok && idt.sess != nil {
		v.CSRF = idt.sess.csrf
	}
	if v.Nav == "" {
		v.Nav = name
	}
	var b bytes.Buffer
	if err := c.pages.byName[name].ExecuteTemplate(&b, "layout", v); err != nil {
		c.cfg.Logger.Error("console: rendering a page", "page", name, "err", err)
		http.Error(w, "the console failed to render this page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// overview: the node, its readiness, alerts and the live figures.
func (c *Console) overview(w http.ResponseWriter, r *http.Request, id identity) error {
	st, err := c.status(r, id)
	if err != nil {
		return err
	}
	var f adminapi.Figures
	if _, err := c.call(r, id, http.MethodGet, adminapi.PathFigures, nil, &f); err != nil {
		return err
	}
	c.render(w, r, http.StatusOK, "overview", view{Title: "Overview", Data: struct {
		Status  adminapi.Status
		Figures adminapi.Figures
	}{st, f}}, id)
	return nil
}

// Live is the answer of the console's live.json: what the overview
// refreshes.
type Live struct {
	Status  adminapi.Status  `json:"status"`
	Figures adminapi.Figures `json:"figures"`
	Samples []Sample         `json:"samples"`
}

func (c *Console) live(r *http.Request, id identity) (any, error) {
	st, err := c.status(r, id)
	if err != nil {
		return nil, err
	}
	var f adminapi.Figures
	if _, err := c.call(r, id, http.MethodGet, adminapi.PathFigures, nil, &f); err != nil {
		return nil, err
	}
	return Live{Status: st, Figures: f, Samples: c.sampler.history()}, nil
}

// nodeRow is one cluster node as the cluster page shows it: its last
// report, and whether that report is too old to trust.
type nodeRow struct {
	adminapi.Node
	Silent bool   // no report for NodeSilentAfter: down, or cut off
	Age    string // how old the report is
}

func (c *Console) cluster(w http.ResponseWriter, r *http.Request, id identity) error {
	st, err := c.status(r, id)
	if err != nil {
		return err
	}
	var rows []nodeRow
	var infra adminapi.ClusterInfra
	if st.Cluster != nil {
		now := c.cfg.Now()
		for _, n := range st.Cluster.Nodes {
			age := max(0, now.Sub(n.At))
			rows = append(rows, nodeRow{Node: n, Silent: age > NodeSilentAfter, Age: age.Round(time.Second).String()})
		}
		if _, err := c.call(r, id, http.MethodGet, adminapi.PathCluster, nil, &infra); err != nil {
			return err
		}
	}
	c.render(w, r, http.StatusOK, "cluster", view{Title: "Cluster", Data: struct {
		Status adminapi.Status
		Nodes  []nodeRow
		Infra  adminapi.ClusterInfra
	}{st, rows, infra}}, id)
	return nil
}

// tenantRow is one tenant as the tenants page shows it: the admin API's
// figures and its mutation rate over the sampler's window.
type tenantRow struct {
	adminapi.Tenant
	Rate string
}

// tenants: one page of the tenants (PageSize, after ?after=, paged by the
// admin API), each with its mutation rate over the sampler's window.
func (c *Console) tenants(w http.ResponseWriter, r *http.Request, id identity) error {
	after, q := afterPage(r)
	var tp adminapi.TenantsPage
	if _, err := c.call(r, id, http.MethodGet, adminapi.PathTenants, q, &tp); err != nil {
		return err
	}
	rates, window := c.sampler.tenantRates()
	rows := make([]tenantRow, len(tp.Tenants))
	for i, t := range tp.Tenants {
		rows[i] = tenantRow{Tenant: t, Rate: "…"}
		if window > 0 {
			rows[i].Rate = strconv.FormatFloat(rates[t.Tenant], 'f', 1, 64) + "/s"
		}
	}
	c.render(w, r, http.StatusOK, "tenants", view{Title: "Tenants", Data: struct {
		Rows   []tenantRow
		After  string
		Next   string
		Window string
	}{rows, after, tp.Next, window.Round(time.Second).String()}}, id)
	return nil
}

// sessionsOf asks for the status and the sessions, sorted by tenant and
// client id.
func (c *Console) sessionsOf(r *http.Request, id identity) (adminapi.Status, []adminapi.Session, error) {
	st, err := c.status(r, id)
	if err != nil {
		return st, nil, err
	}
	var sessions []adminapi.Session
	if _, err := c.call(r, id, http.MethodGet, adminapi.PathSessions, nil, &sessions); err != nil {
		return st, nil, err
	}
	slices.SortFunc(sessions, func(a, b adminapi.Session) int {
		return cmp.Or(strings.Compare(a.Tenant, b.Tenant), strings.Compare(a.ClientID, b.ClientID), a.ConnectedAt.Compare(b.ConnectedAt))
	})
	return st, sessions, nil
}

// pageBounds is the slice of n rows that ?page= (from 0) shows.
func pageBounds(r *http.Request, n int) (start, end int) { return pageBoundsOf(r, "page", n) }

// pageBoundsOf is the slice of n rows that the page parameter param
// (from 0) shows.
func pageBoundsOf(r *http.Request, param string, n int) (start, end int) {
	p, _ := strconv.Atoi(r.URL.Query().Get(param))
	start = min(max(0, p)*PageSize, n)
	return start, min(start+PageSize, n)
}

// prevPage is the previous ?page= (-1: none); nextPage the next (-1: none).
func prevPage(r *http.Request) int { return prevPageOf(r, "page") }

// prevPageOf is the previous value of the page parameter param (-1: none).
func prevPageOf(r *http.Request, param string) int {
	p, _ := strconv.Atoi(r.URL.Query().Get(param))
	if p <= 0 {
		return -1
	}
	return p - 1
}

func nextPage(r *http.Request, end, n int) int {
	if end >= n {
		return -1
	}
	return end / PageSize
}

func (c *Console) devices(w http.ResponseWriter, r *http.Request, id identity) error {
	st, sessions, err := c.sessionsOf(r, id)
	if err != nil {
		return err
	}
	var recent []adminapi.RecentDevice
	if _, err := c.call(r, id, http.MethodGet, adminapi.PathRecentDevices, nil, &recent); err != nil {
		return err
	}
	start, end := pageBounds(r, len(sessions))
	rstart, rend := pageBoundsOf(r, "rpage", len(recent))
	c.render(w, r, http.StatusOK, "devices", view{Title: "Devices", Flash: c.flashOf(r, id), Data: struct {
		Head         uint64
		Total        int
		Rows         []adminapi.Session
		Prev, Next   int
		Recent       []adminapi.RecentDevice
		RecentTotal  int
		RPrev, RNext int
	}{st.OplogHead, len(sessions), sessions[start:end], prevPage(r), nextPage(r, end, len(sessions)),
		recent[rstart:rend], len(recent), prevPageOf(r, "rpage"), nextPage(r, rend, len(recent))}}, id)
	return nil
}

// disconnect ends one device's sessions through the admin API.
func (c *Console) disconnect(w http.ResponseWriter, r *http.Request, id identity) {
	q := url.Values{adminapi.ParamTenant: {r.PostFormValue("tenant")}, adminapi.ParamClientID: {r.PostFormValue("client_id")}}
	var ans adminapi.Disconnected
	status, err := c.call(r, id, http.MethodPost, adminapi.PathDisconnect, q, &ans, http.StatusNotFound)
	if err != nil {
		c.fail(w, r, id, err)
		return
	}
	done := fmt.Sprintf("disconnected %s/%s: %d session(s) told to end", ans.Tenant, ans.ClientID, ans.Sessions)
	if status == http.StatusNotFound {
		done = fmt.Sprintf("%s/%s has no session on this node", ans.Tenant, ans.ClientID)
	}
	c.cfg.Logger.Info("console: device disconnected", "tenant", ans.Tenant, "client_id", ans.ClientID, "sessions", ans.Sessions, "remote", r.RemoteAddr)
	c.afterAction(w, r, id, "devices", done)
}

// filter is the tenant, model and value switch a data page was asked for.
type filter struct {
	Tenant, Model string
	Values        bool
}

func filterOf(r *http.Request) (filter, url.Values) {
	q := r.URL.Query()
	f := filter{Tenant: q.Get("tenant"), Model: q.Get("model"), Values: q.Get("values") == "1"}
	api := url.Values{}
	if f.Tenant != "" {
		api.Set(adminapi.ParamTenant, f.Tenant)
	}
	if f.Model != "" {
		api.Set(adminapi.ParamModel, f.Model)
	}
	return f, api
}

// uintQuery reads a non-negative integer parameter (absent: 0).
func uintQuery(r *http.Request, name string) (uint64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, &apiError{Status: http.StatusBadRequest, Message: fmt.Sprintf("%s: want a non-negative integer, got %q", name, v)}
	}
	return n, nil
}

// data: one page of the oplog, filtered by tenant and model.
func (c *Console) data(w http.ResponseWriter, r *http.Request, id identity) error {
	f, q := filterOf(r)
	from, err := uintQuery(r, "from")
	if err != nil {
		return err
	}
	limit, err := uintQuery(r, "limit")
	if err != nil {
		return err
	}
	if limit == 0 {
		limit = PageSize
	}
	limit = min(limit, adminapi.MaxOplogPage)
	q.Set(adminapi.ParamFrom, strconv.FormatUint(from, 10))
	q.Set(adminapi.ParamLimit, strconv.FormatUint(limit, 10))
	var page adminapi.OplogPage
	if _, err := c.call(r, id, http.MethodGet, adminapi.PathOplog, q, &page); err != nil {
		return err
	}
	newest := uint64(0)
	if page.Head > limit {
		newest = page.Head - limit
	}
	c.render(w, r, http.StatusOK, "data", view{Title: "Oplog", Nav: "data", Data: struct {
		Filter              filter
		Page                adminapi.OplogPage
		From, Limit, Newest uint64
		More                bool
	}{f, page, from, limit, newest, page.Next < page.Head && len(page.Entries) > 0}}, id)
	return nil
}

// keyEntry is one oplog entry of a key with what the ledger decided for
// its op.
type keyEntry struct {
	adminapi.OplogEntry
	Decision *adminapi.LedgerAnswer
}

// keyHistory: one key's oplog entries (at most PageSize of them, scanning
// at most KeyScanEntries entries of its tenant and model per request), its
// conflicts and the ledger's decisions for its ops.
func (c *Console) keyHistory(w http.ResponseWriter, r *http.Request, id identity) error {
	f, q := filterOf(r)
	key := r.URL.Query().Get("key")
	if f.Tenant == "" || f.Model == "" || key == "" {
		return &apiError{Status: http.StatusBadRequest, Message: "a key's history needs its tenant, model and key"}
	}
	from, err := uintQuery(r, "from")
	if err != nil {
		return err
	}
	var entries []keyEntry
	scanned, next, head := 0, from, uint64(0)
scan:
	for scanned < KeyScanEntries {
		q.Set(adminapi.ParamFrom, strconv.FormatUint(next, 10))
		q.Set(adminapi.ParamLimit, strconv.Itoa(adminapi.MaxOplogPage))
		var page adminapi.OplogPage
		if _, err := c.call(r, id, http.MethodGet, adminapi.PathOplog, q, &page); err != nil {
			return err
		}
		head = page.Head
		for _, e := range page.Entries {
			scanned++
			next = e.Seq
			if e.Key == key {
				entries = append(entries, keyEntry{OplogEntry: e})
				if len(entries) == PageSize {
					break scan
				}
			}
		}
		next = max(next, page.Next)
		if len(page.Entries) == 0 || next >= page.Head {
			break
		}
	}
	for i := range entries {
		var ans adminapi.LedgerAnswer
		lq := url.Values{adminapi.ParamTenant: {f.Tenant}}
		if _, err := c.call(r, id, http.MethodGet, adminapi.LedgerPath(entries[i].OpID), lq, &ans, http.StatusNotFound); err != nil {
			return err
		}
		entries[i].Decision = &ans
	}
	var conflicts []adminapi.Conflict
	cq := url.Values{adminapi.ParamTenant: {f.Tenant}, adminapi.ParamModel: {f.Model}, adminapi.ParamLimit: {strconv.Itoa(adminapi.MaxConflicts)}}
	for read := 0; read < KeyConflictRows; {
		var rows []adminapi.Conflict
		if _, err := c.call(r, id, http.MethodGet, adminapi.PathConflicts, cq, &rows); err != nil {
			return err
		}
		for _, row := range rows {
			if row.Key == key {
				conflicts = append(conflicts, row)
			}
		}
		read += len(rows)
		if len(rows) < adminapi.MaxConflicts {
			break
		}
		cq.Set(adminapi.ParamBefore, strconv.FormatInt(rows[len(rows)-1].ID, 10))
	}
	c.render(w, r, http.StatusOK, "key", view{Title: "Key history", Nav: "data", Data: struct {
		Filter     filter
		Key        string
		From, Next uint64
		Head       uint64
		Scanned    int
		More       bool
		Entries    []keyEntry
		Conflicts  []adminapi.Conflict
	}{f, key, from, next, head, scanned, next < head, entries, conflicts}}, id)
	return nil
}

// conflicts: the conflict log, newest first.
func (c *Console) conflicts(w http.ResponseWriter, r *http.Request, id identity) error {
	f, q := filterOf(r)
	before, err := uintQuery(r, "before")
	if err != nil {
		return err
	}
	q.Set(adminapi.ParamBefore, strconv.FormatUint(before, 10))
	q.Set(adminapi.ParamLimit, strconv.Itoa(PageSize))
	var rows []adminapi.Conflict
	if _, err := c.call(r, id, http.MethodGet, adminapi.PathConflicts, q, &rows); err != nil {
		return err
	}
	var older int64
	if len(rows) == PageSize {
		older = rows[len(rows)-1].ID
	}
	c.render(w, r, http.StatusOK, "conflicts", view{Title: "Conflicts", Nav: "data", Data: struct {
		Filter filter
		Rows   []adminapi.Conflict
		Older  int64
	}{f, rows, older}}, id)
	return nil
}

// opAnswer is the op lookup page: the ledger's answer and what it means.
type opAnswer struct {
	Tenant, OpID string
	Asked        bool
	Ledger       adminapi.LedgerAnswer
	Why          string
}

// op: what the server decided for one op id of a tenant, in the words
// `syncctl explain` uses for the server's side.
func (c *Console) op(w http.ResponseWriter, r *http.Request, id identity) error {
	q := r.URL.Query()
	a := opAnswer{Tenant: strings.TrimSpace(q.Get("tenant")), OpID: strings.TrimSpace(q.Get("op_id"))}
	if a.Tenant != "" && a.OpID != "" {
		a.Asked = true
		if err := syncproto.ValidateOpID(a.OpID); err != nil {
			return &apiError{Status: http.StatusBadRequest, Message: err.Error()}
		}
		if _, err := c.call(r, id, http.MethodGet, adminapi.LedgerPath(a.OpID), url.Values{adminapi.ParamTenant: {a.Tenant}}, &a.Ledger, http.StatusNotFound); err != nil {
			return err
		}
		a.Why = decision(a.Ledger)
	}
	c.render(w, r, http.StatusOK, "op", view{Title: "Op lookup", Nav: "data", Data: a}, id)
	return nil
}

// decision says what the ledger's answer means for the op's device.
func decision(a adminapi.LedgerAnswer) string {
	res := a.Result
	switch {
	case !a.Found && !a.Floor.IsZero():
		return fmt.Sprintf("not held: never decided, or evicted by retention. An op written at or before the ledger floor %s is answered expired if resent (never applied again); a later one would be decided when it arrives.", a.Floor.UTC().Format(time.RFC3339))
	case !a.Found:
		return "not held: the server never decided this op (never sent, or lost before the server decided); the device's next replay sends it."
	case res == nil:
		return "decided, with no recorded result"
	case res.Status == syncproto.StatusApplied:
		return fmt.Sprintf("applied as version %d (seq %d); a resend is answered duplicate.", res.Version, res.Seq)
	case res.Status == syncproto.StatusSuperseded && res.Winner != nil:
		return fmt.Sprintf("superseded by version %d (last writer wins); a resend is answered duplicate.", res.Winner.Version)
	case res.Status == syncproto.StatusConflict && res.Winner != nil:
		return fmt.Sprintf("conflict with version %d: its base version was stale; the device's conflict handler rebases or drops it.", res.Winner.Version)
	default:
		return fmt.Sprintf("decided %s %s", res.Status, res.Message)
	}
}
