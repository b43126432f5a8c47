package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/adminapi"
)

// Path is the prefix the console is served under on the admin listener.
const Path = "/console/"

// The console's defaults (the zero Config fields).
const (
	// DefaultIdleTimeout ends a console session after this long without
	// a request.
	DefaultIdleTimeout = 30 * time.Minute
	// DefaultMaxSessionAge ends a console session this long after its
	// login, whatever its activity.
	DefaultMaxSessionAge = 12 * time.Hour
	// DefaultMaxSessions bounds the console sessions held at once; a login
	// beyond it ends the oldest.
	DefaultMaxSessions = 64
	// DefaultSampleInterval is how often the live figures are sampled.
	DefaultSampleInterval = 2 * time.Second
	// DefaultHistory is how far back the live figures reach.
	DefaultHistory = 10 * time.Minute
)

// The console's fixed limits.
const (
	// PageSize is the rows of one page of devices, conflicts and (unless
	// ?limit= asks otherwise, up to adminapi.MaxOplogPage) the oplog.
	PageSize = 100
	// KeyScanEntries bounds the oplog entries one request for a key's
	// history reads; the page says where the next request continues.
	KeyScanEntries = 10 * adminapi.MaxOplogPage
	// KeyConflictRows bounds the conflict rows a key's history reads.
	KeyConflictRows = 2 * adminapi.MaxConflicts
	// NodeSilentAfter: a cluster node whose last report (nodes report every
	// 2 s) is older than this is shown down, whatever the report said.
	NodeSilentAfter = 10 * time.Second
	// MaxFormBytes bounds the body of a form post.
	MaxFormBytes = 16 << 10
	// maxAnswerBytes bounds an admin API answer the console reads.
	maxAnswerBytes = 32 << 20
)

// ContentSecurityPolicy is sent with every console answer.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Config configures a Console. API and Figures are required; every other
// zero field means its default.
type Config struct {
	// API is the admin API (adminapi's paths); the console asks it
	// in-process with the operator's token.
	API http.Handler
	// Figures reads the server's running totals, the answer of
	// adminapi.PathFigures, for the sampler (which has no token of its
	// own).
	Figures func(context.Context) (adminapi.Figures, error)
	// Registerer receives the console's metrics (nil: none).
	Registerer prometheus.Registerer
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Logger logs logins and refusals (nil: discard).
	Logger *slog.Logger

	IdleTimeout    time.Duration // 0: DefaultIdleTimeout
	MaxSessionAge  time.Duration // 0: DefaultMaxSessionAge
	MaxSessions    int           // 0: DefaultMaxSessions
	SampleInterval time.Duration // 0: DefaultSampleInterval
	History        time.Duration // 0: DefaultHistory
}

func (c *Config) setDefaults() error {
	if c.API == nil || c.Figures == nil {
		return errors.New("console: Config.API and Config.Figures are required")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&c.IdleTimeout, DefaultIdleTimeout}, {&c.MaxSessionAge, DefaultMaxSessionAge}, {&c.SampleInterval, DefaultSampleInterval}, {&c.History, DefaultHistory}} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < 0 {
			return fmt.Errorf("console: negative duration %s", *d.v)
		}
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.MaxSessions < 0 {
		return fmt.Errorf("console: MaxSessions %d: want a positive number", c.MaxSessions)
	}
	return nil
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Console serves the console's pages. It is safe for concurrent use;
// Close stops its sampler.
type Console struct {
	cfg      Config
	mux      *http.ServeMux
	sessions *sessionBook
	sampler  *sampler
	metrics  *metrics
	pages    *pages
}

// New makes the console and starts its sampler.
func New(cfg Config) (*Console, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	pg, err := parsePages()
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	c := &Console{cfg: cfg, mux: http.NewServeMux(), metrics: m, pages: pg}
	c.sessions = newSessionBook(cfg, m)
	c.routes()
	c.sampler = startSampler(cfg)
	return c, nil
}

// Close stops the sampler and waits for it.
func (c *Console) Close() { c.sampler.close() }

// ServeHTTP serves the console with its security headers.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin") // not no-referrer: under it a browser posts forms with Origin: null
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	c.mux.ServeHTTP(w, r)
}

func (c *Console) routes() {
	static, _ := fs.Sub(staticFS, "static")
	c.mux.Handle("GET "+Path+"static/", http.StripPrefix(Path+"static/", http.FileServerFS(static)))
	c.mux.HandleFunc("GET "+Path+"login", c.loginForm)
	c.mux.HandleFunc("POST "+Path+"login", c.login)
	c.mux.Handle("POST "+Path+"logout", c.action(c.logout))
	c.mux.Handle("GET "+Path+"{$}", c.page(c.overview))
	c.mux.Handle("GET "+Path+"live.json", c.api(c.live))
	c.mux.Handle("GET "+Path+"cluster", c.page(c.cluster))
	c.mux.Handle("GET "+Path+"tenants", c.page(c.tenants))
	c.mux.Handle("GET "+Path+"devices", c.page(c.devices))
	c.mux.Handle("POST "+Path+"devices/disconnect", c.action(c.disconnect))
	c.mux.Handle("GET "+Path+"data", c.page(c.data))
	c.mux.Handle("GET "+Path+"key", c.page(c.keyHistory))
	c.mux.Handle("GET "+Path+"conflicts", c.page(c.conflicts))
	c.mux.Handle("GET "+Path+"op", c.page(c.op))
	c.mux.Handle("GET "+Path+"tokens", c.page(c.tokens))
	c.mux.Handle("POST "+Path+"tokens/issue", c.action(c.issueToken))
	c.mux.Handle("GET "+Path+"tokens/revoke", c.page(c.confirmRevoke))
	c.mux.Handle("POST "+Path+"tokens/revoke", c.action(c.revokeToken))
	c.mux.HandleFunc(Path, func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
}
