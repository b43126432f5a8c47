package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/adminapi"
)

// errUnauthorized: the admin API refused the token (absent, not an admin
// token, revoked).
var errUnauthorized = errors.New("the admin API refused the token")

// apiError is an admin API answer other than 2xx and 401, or a request
// the console refuses before asking (Status 400).
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string { return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status) }

// recorder is the response writer of an in-process admin API request.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	over   bool
}

func (rec *recorder) Header() http.Header { return rec.header }
func (rec *recorder) WriteHeader(status int) {
	if rec.status == 0 {
		rec.status = status
	}
}
func (rec *recorder) Write(p []byte) (int, error) {
	rec.WriteHeader(http.StatusOK)
	if rec.body.Len()+len(p) > maxAnswerBytes {
		rec.over = true
		return 0, errors.New("admin API answer over the console's bound")
	}
	return rec.body.Write(p)
}

// call asks the admin API for path?q as id, in-process, and decodes its
// JSON answer into out. okStatus lists answers besides 200 whose body is
// still the answer (404 for a ledger op not held). It returns the status.
func (c *Console) call(r *http.Request, id identity, method, path string, q url.Values, out any, okStatus ...int) (int, error) {
	return c.callWith(r, id, method, path, q, nil, out, okStatus...)
}

// callWith is call with a JSON request body (nil: none).
func (c *Console) callWith(r *http.Request, id identity, method, path string, q url.Values, body any, out any, okStatus ...int) (int, error) {
	u := path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var reqBody io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		reqBody = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(r.Context(), method, u, reqBody)
	if err != nil {
		return 0, err
	}
	req.RemoteAddr, req.Host = r.RemoteAddr, r.Host
	req.Header.Set("Authorization", "Bearer "+id.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := &recorder{header: http.Header{}}
	c.cfg.API.ServeHTTP(rec, req)
	if rec.over {
		return rec.status, &apiError{Status: rec.status, Message: "answer too large"}
	}
	switch st := rec.status; {
	case st == http.StatusUnauthorized:
		if id.sess != nil {
			c.sessions.end(id.sess.id)
		}
		return st, errUnauthorized
	case st == http.StatusOK || slices.Contains(okStatus, st):
		return st, json.Unmarshal(rec.body.Bytes(), out)
	default:
		var e adminapi.Error
		if json.Unmarshal(rec.body.Bytes(), &e) != nil || e.Error == "" {
			e.Error = http.StatusText(st)
		}
		return st, &apiError{Status: st, Message: e.Error}
	}
}

// status asks the admin API for the node's status.
func (c *Console) status(r *http.Request, id identity) (adminapi.Status, error) {
	var st adminapi.Status
	_, err := c.call(r, id, http.MethodGet, adminapi.PathStatus, nil, &st)
	return st, err
}

// page serves a GET page: without an admin token it sends the browser to
// the login form; a token the API refuses ends the session the same way.
func (c *Console) page(h func(http.ResponseWriter, *http.Request, identity) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := c.identify(r)
		if !ok {
			if r.Header.Get("Authorization") != "" {
				c.refuse(w, r, http.StatusUnauthorized, "unauthenticated", "an admin token is required")
				return
			}
			http.Redirect(w, r, Path+"login", http.StatusSeeOther)
			return
		}
		if err := h(w, r, id); err != nil {
			c.fail(w, r, id, err)
		}
	})
}

// api serves a GET JSON answer of the console (live figures): 401
// without an admin token.
func (c *Console) api(h func(*http.Request, identity) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := c.identify(r)
		if !ok {
			c.refuse(w, r, http.StatusUnauthorized, "unauthenticated", "an admin token is required")
			return
		}
		body, err := h(r, id)
		if errors.Is(err, errUnauthorized) {
			c.refuse(w, r, http.StatusUnauthorized, "unauthenticated", "the admin token was refused")
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(body)
	})
}

// action serves a state-changing POST: an admin token, a same-origin
// request and, on a session cookie, the session's CSRF token; it refuses
// anything else before h runs.
func (c *Console) action(h func(http.ResponseWriter, *http.Request, identity)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, MaxFormBytes)
		id, ok := c.identify(r)
		switch {
		case !ok:
			c.refuse(w, r, http.StatusUnauthorized, "unauthenticated", "an admin token is required")
		case !sameOrigin(r):
			c.refuse(w, r, http.StatusForbidden, "cross_origin", "state-changing requests must come from the console's own pages")
		case !csrfOK(r, id):
			c.refuse(w, r, http.StatusForbidden, "csrf", "missing or wrong CSRF token: reload the page and try again")
		default:
			h(w, r, id)
		}
	})
}

// fail answers a page whose admin API request failed.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, id identity, err error) {
	if errors.Is(err, errUnauthorized) {
		if id.sess == nil {
			c.refuse(w, r, http.StatusUnauthorized, "unauthenticated", "the admin token was refused")
			return
		}
		http.Redirect(w, r, Path+"login?why=refused", http.StatusSeeOther)
		return
	}
	status := http.StatusBadGateway
	var ae *apiError
	if errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 {
		status = ae.Status
	}
	c.render(w, r, status, "error", view{Title: "Error", Flash: err.Error()}, id)
}

// metrics are the console's Prometheus instruments.
type metrics struct {
	sessions prometheus.Gauge
	logins   *prometheus.CounterVec // result: ok|refused
	refusals *prometheus.CounterVec // reason: unauthenticated|cross_origin|csrf
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "syncd_console_sessions", Help: "Console sessions open (logged in, not expired).",
		}),
		logins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_console_logins_total", Help: "Console logins, by result (ok, refused).",
		}, []string{"result"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_console_refusals_total", Help: "Console requests refused, by reason (unauthenticated, cross_origin, csrf).",
		}, []string{"reason"}),
	}
	for _, r := range []string{"ok", "refused"} {
		m.logins.WithLabelValues(r)
	}
	for _, r := range []string{"unauthenticated", "cross_origin", "csrf"} {
		m.refusals.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.sessions, m.logins, m.refusals} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
