package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// cookieName is the console session's cookie.
const cookieName = "syncd_console"

// session is one console login: the admin token it was opened with (kept
// in memory only, to ask the admin API), its CSRF token and its times.
type session struct {
	id, token, csrf string
	created, seen   time.Time
	flash           string // a one-shot message for the next page (guarded by the book's mutex)
}

// sessionBook holds the console sessions, bounded by Config.MaxSessions.
type sessionBook struct {
	cfg     Config
	metrics *metrics
	mu      sync.Mutex
	byID    map[string]*session
}

func newSessionBook(cfg Config, m *metrics) *sessionBook {
	return &sessionBook{cfg: cfg, metrics: m, byID: map[string]*session{}}
}

// open starts a session for token, ending the oldest when the book is full.
func (b *sessionBook) open(token string) *session {
	now := b.cfg.Now()
	s := &session{id: randomHex(), token: token, csrf: randomHex(), created: now, seen: now}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pruneLocked(now)
	for len(b.byID) >= b.cfg.MaxSessions {
		var oldest *session
		for _, o := range b.byID {
			if oldest == nil || o.created.Before(oldest.created) {
				oldest = o
			}
		}
		delete(b.byID, oldest.id)
	}
	b.byID[s.id] = s
	b.metrics.sessions.Set(float64(len(b.byID)))
	return s
}

// get returns the live session id names and marks it seen.
func (b *sessionBook) get(id string) (*session, bool) {
	now := b.cfg.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pruneLocked(now)
	s, ok := b.byID[id]
	if ok {
		s.seen = now
	}
	return s, ok
}

// end ends the session id names (a no-op when it is not held).
func (b *sessionBook) end(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.byID, id)
	b.metrics.sessions.Set(float64(len(b.byID)))
}

// setFlash leaves msg for the session's next page.
func (b *sessionBook) setFlash(s *session, msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s.flash = msg
}

// takeFlash returns and clears the session's message.
func (b *sessionBook) takeFlash(s *session) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	msg := s.flash
	s.flash = ""
	return msg
}

func (b *sessionBook) pruneLocked(now time.Time) {
	for id, s := range b.byID {
		if now.Sub(s.seen) >= b.cfg.IdleTimeout || now.Sub(s.created) >= b.cfg.MaxSessionAge {
			delete(b.byID, id)
		}
	}
	b.metrics.sessions.Set(float64(len(b.byID)))
}

func randomHex() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// identity is who asks: an admin token from the bearer header (sess nil)
// or from a console session.
type identity struct {
	token string
	sess  *session
}

// identify finds the request's admin token; ok is false when it has none.
// A bearer header wins over the cookie.
func (c *Console) identify(r *http.Request) (identity, bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		token, ok := strings.CutPrefix(h, "Bearer ")
		return identity{token: token}, ok && token != ""
	}
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return identity{}, false
	}
	s, ok := c.sessions.get(ck.Value)
	if !ok {
		return identity{}, false
	}
	return identity{token: s.token, sess: s}, true
}

// sameOrigin reports whether a state-changing request comes from the
// console's own pages, by the headers browsers add (a client that sends
// neither, like curl with the bearer header, is not a browser page).
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	return true
}

// csrfOK reports whether r carries id's CSRF token (or needs none: the
// bearer header).
func csrfOK(r *http.Request, id identity) bool {
	if id.sess == nil {
		return true
	}
	got := r.Header.Get("X-CSRF-Token")
	if got == "" {
		got = r.PostFormValue("csrf")
	}
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(id.sess.csrf)) == 1
}

// loginReasons are the messages the login form shows for its ?why=
// codes; the text never comes from the URL, so a link cannot put words on
// the console's page.
var loginReasons = map[string]string{
	"refused": "the session ended: its admin token was refused (revoked?)",
}

// loginForm shows the login form.
func (c *Console) loginForm(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "login", view{Title: "Log in", Flash: loginReasons[r.URL.Query().Get("why")]}, nil)
}

// login checks the posted admin token against the admin API and opens a
// session for it.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, MaxFormBytes)
	if !sameOrigin(r) {
		c.refuse(w, r, http.StatusForbidden, "cross_origin", "the login form must be posted from the console itself")
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	if token == "" {
		c.metrics.logins.WithLabelValues("refused").Inc()
		c.render(w, r, http.StatusUnauthorized, "login", view{Title: "Log in", Flash: "enter an admin token"}, nil)
		return
	}
	if _, err := c.status(r, identity{token: token}); err != nil {
		c.metrics.logins.WithLabelValues("refused").Inc()
		c.cfg.Logger.Info("console login refused", "remote", r.RemoteAddr, "err", err)
		c.render(w, r, http.StatusUnauthorized, "login", view{Title: "Log in", Flash: "that is not an admin token of this server"}, nil)
		return
	}
	s := c.sessions.open(token)
	c.metrics.logins.WithLabelValues("ok").Inc()
	c.cfg.Logger.Info("console login", "remote", r.RemoteAddr)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: s.id, Path: Path, HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: int(c.cfg.MaxSessionAge.Seconds())})
	http.Redirect(w, r, Path, http.StatusSeeOther)
}

// logout ends the session.
func (c *Console) logout(w http.ResponseWriter, r *http.Request, id identity) {
	if id.sess != nil {
		c.sessions.end(id.sess.id)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Path, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, Path+"login", http.StatusSeeOther)
}

// refuse answers a request the console will not serve, and counts it.
func (c *Console) refuse(w http.ResponseWriter, r *http.Request, status int, reason, msg string) {
	c.metrics.refusals.WithLabelValues(reason).Inc()
	c.cfg.Logger.Info("console request refused", "path", r.URL.Path, "remote", r.RemoteAddr, "reason", reason)
	http.Error(w, msg, status)
}
