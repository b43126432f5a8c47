package server

import (
	"encoding/json"
	"net/http"
	"time"
)

// DefaultStartupTimeout is the boot budget cmd/syncd gives itself
// (--startup-timeout): a boot that is not serving by then exits non-zero,
// so an orchestrator retries it.
const DefaultStartupTimeout = 60 * time.Second

// MarkServing records that the boot is over: the server's listeners
// accept connections. GET /startupz answers 503 until it is called and
// 200 after. The embedder calls it once its listeners are serving;
// cmd/syncd and internal/syncdtest do.
func (s *Server) MarkServing() { s.serving.Store(true) }

// startupz answers 200 once MarkServing was called, 503 before: the
// startup probe. Unlike /readyz it never fails again once passed (a drain
// fails /readyz, not /startupz).
func (s *Server) startupz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	status, code := "serving", http.StatusOK
	if !s.serving.Load() {
		status, code = "starting", http.StatusServiceUnavailable
	}
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"status": status})
}
