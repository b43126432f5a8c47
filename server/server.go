package server

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Config configures a Server. The zero value of every field except DataPath
// means its default.
type Config struct {
	// DataPath is the SQLite database file; it and its directory are
	// created if missing. Required.
	DataPath string
	// Synchronous is the durability level; "" means SyncFull.
	Synchronous Synchronous
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// Registry receives the server's metrics and is served at /metrics;
	// nil means a fresh registry with the Go and process collectors.
	Registry *prometheus.Registry
}

// Server is syncd's HTTP service over one SQLite database. Create it with
// New, serve Handler on a listener, and call Shutdown then Close.
type Server struct {
	cfg      Config
	log      *slog.Logger
	db       *sql.DB
	registry *prometheus.Registry
	draining atomic.Bool
}

// New opens the database and prepares the service.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.DataPath == "" {
		return nil, errors.New("server: Config.DataPath is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	db, err := openDB(ctx, cfg.DataPath, cfg.Synchronous)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	return &Server{cfg: cfg, log: log, db: db, registry: reg}, nil
}

// Handler serves the public endpoints: /healthz, /readyz and /metrics.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry}))
	return mux
}

// healthz answers 200 while the process is alive: it checks nothing else,
// so an orchestrator restarts syncd only when it is truly stuck.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ok\n")
}

// readyz answers 200 when syncd can take traffic: the database answers and
// the server is not draining; 503 otherwise, with the reason.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.draining.Load() {
		http.Error(w, "draining", http.StatusServiceUnavailable)
		return
	}
	if err := s.db.PingContext(r.Context()); err != nil {
		http.Error(w, "database unavailable", http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, "ready\n")
}

// Shutdown marks the server as draining, so /readyz fails and load
// balancers stop sending traffic. It is bounded by ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	return ctx.Err()
}

// Close releases the database. Call it after Shutdown.
func (s *Server) Close() error {
	return s.db.Close()
}
