package syncdtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// Timeout bounds every network step of the helpers (a request, a start, a
// graceful stop).
const Timeout = 20 * time.Second

// StartTimeout bounds one start of a server: a cluster node may join its
// cluster and download and restore a snapshot first, which under the race
// detector on a loaded machine takes longer than one network step.
const StartTimeout = time.Minute

// Server is a real syncd on loopback listeners.
type Server struct {
	*server.Server
	// URL is the public listener (http://127.0.0.1:port): sync websocket,
	// snapshot, /healthz, /readyz, /metrics. AdminURL is the admin API.
	URL      string
	AdminURL string
	// AdminToken is an admin token in TokenPath, the server's token file.
	AdminToken string
	TokenPath  string
	// DataPath is the SQLite file.
	DataPath string
	// Registry is the server's metrics registry.
	Registry *prometheus.Registry
	// CommandKey is, on a cluster node, the cluster's command key
	// (cluster.Options.CommandKey), for tests that publish commands as a
	// node would (see NATS).
	CommandKey []byte

	cfg       server.Config
	addr      string // the public listener's fixed address; "" for a fresh port
	listeners []*http.Server
	stopOnce  sync.Once
	// join, on a cluster node, makes a new membership for each start.
	join func(testing.TB, server.Config) *cluster.Cluster
	// nats, on a cluster node, is its embedded NATS server, whose
	// credentials derive from secret.
	nats   *natsserver.Server
	secret cluster.Secret
}

// Start starts syncd with cfg and stops it when t ends. Empty DataPath,
// Authenticator and Registry are filled in: a database and a token file
// (holding an admin token) in a fresh temporary directory, and a fresh
// registry.
func Start(t testing.TB, cfg server.Config) *Server {
	t.Helper()
	return StartAt(t, "", cfg)
}

// StartAt is Start with the public listener on addr (host:port on
// loopback), for a test whose device was configured, and ran offline,
// before its server existed. Restart keeps addr. An empty addr is a fresh
// port.
func StartAt(t testing.TB, addr string, cfg server.Config) *Server {
	t.Helper()
	dir := t.TempDir()
	s := &Server{TokenPath: filepath.Join(dir, "tokens.json"), addr: addr}
	if cfg.DataPath == "" {
		cfg.DataPath = filepath.Join(dir, "syncd.db")
	}
	if cfg.Authenticator == nil {
		s.AdminToken = issue(t, s.TokenPath, auth.Principal{Admin: true})
		a, err := auth.NewAuthenticator(s.TokenPath, nil)
		require.NoError(t, err)
		cfg.Authenticator = a
	}
	s.start(t, cfg)
	return s
}

// start opens the server over cfg and serves it on fresh listeners.
func (s *Server) start(t testing.TB, cfg server.Config) {
	t.Helper()
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if s.join != nil {
		cfg.Cluster = s.join(t, cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	srv, err := server.New(ctx, cfg)
	require.NoError(t, err)
	s.Server, s.cfg, s.DataPath, s.Registry = srv, cfg, cfg.DataPath, cfg.Registry
	s.stopOnce = sync.Once{}
	s.listeners = nil
	s.URL = s.serve(t, s.addr, srv.Handler(), srv.LimitListener)
	s.AdminURL = s.serve(t, "", srv.AdminHandler(), nil)
	srv.MarkServing()
	t.Cleanup(func() { s.Stop(t) })
}

// serve serves h on addr (a fresh loopback port when "") until the
// server stops, through wrap when it is not nil, with the timeouts syncd
// uses.
func (s *Server) serve(t testing.TB, addr string, h http.Handler, wrap func(net.Listener) net.Listener) string {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	if wrap != nil {
		ln = wrap(ln)
	}
	hs := s.Server.HTTPServer(h)
	go hs.Serve(ln)
	s.listeners = append(s.listeners, hs)
	return "http://" + ln.Addr().String()
}

// Stop shuts the server down gracefully (drain, then close) and stops its
// listeners; later calls do nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), Timeout)
		defer cancel()
		require.NoError(t, s.Shutdown(ctx))
		require.NoError(t, s.Close())
		for _, hs := range s.listeners {
			hs.Close()
		}
	})
}

// Restart stops the server and starts it again over the same database,
// token file and configuration, on new ports (URL and AdminURL change, but
// for StartAt's address),
// with a new metrics registry. A cluster node rejoins its cluster through
// the same NATS server.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.RestartWith(t, func(*server.Config) {})
}

// RestartWith is Restart with change applied to the configuration first,
// as an operator restarts syncd with other flags.
func (s *Server) RestartWith(t testing.TB, change func(*server.Config)) {
	t.Helper()
	s.Stop(t)
	cfg := s.cfg
	cfg.Registry = nil // a new server registers its metrics anew
	change(&cfg)
	s.start(t, cfg)
}

// SyncURL is the websocket endpoint (ws://.../v1/sync).
func (s *Server) SyncURL() string {
	return "ws" + strings.TrimPrefix(s.URL, "http") + syncproto.SyncPath
}

// Issue adds a token for p to the server's token file and returns it.
func (s *Server) Issue(t testing.TB, p auth.Principal) string {
	t.Helper()
	return issue(t, s.TokenPath, p)
}

func issue(t testing.TB, path string, p auth.Principal) string {
	t.Helper()
	tok, err := auth.Issue(path, p, time.Now())
	require.NoError(t, err)
	return tok
}

// Member issues a token for clientID in tenant that may read and write
// every model.
func (s *Server) Member(t testing.TB, tenant, clientID string) string {
	t.Helper()
	return s.Issue(t, auth.Principal{Tenant: tenant, ClientID: clientID, Read: []string{auth.Wildcard}, Write: []string{auth.Wildcard}})
}

// Get GETs url with token ("" for none) and returns the response, whose
// body the caller closes.
func Get(t testing.TB, url, token string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp
}

// GetJSON GETs url with token, decodes a 2xx JSON body into out (when not
// nil) and returns the status.
func GetJSON(t testing.TB, url, token string, out any) int {
	t.Helper()
	resp := Get(t, url, token)
	defer resp.Body.Close()
	if out != nil && resp.StatusCode/100 == 2 {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
	}
	return resp.StatusCode
}

// Admin GETs an admin API path with the admin token, requires 200 and
// decodes the body into out.
func (s *Server) Admin(t testing.TB, path string, out any) {
	t.Helper()
	resp := Get(t, s.AdminURL+path, s.AdminToken)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s: %s", path, body)
	require.NoError(t, json.Unmarshal(body, out), "GET %s", path)
}

// Status reads /v1/admin/status.
func (s *Server) Status(t testing.TB) adminapi.Status {
	t.Helper()
	var st adminapi.Status
	s.Admin(t, adminapi.PathStatus, &st)
	return st
}

// Oplog reads the whole oplog through the admin API, page by page; query
// adds filters ("&tenant=acme").
func (s *Server) Oplog(t testing.TB, query string) []adminapi.OplogEntry {
	t.Helper()
	var all []adminapi.OplogEntry
	for from, pages := uint64(0), 0; ; pages++ {
		require.Less(t, pages, 10_000, "oplog paging does not end")
		var page adminapi.OplogPage
		s.Admin(t, fmt.Sprintf("%s?limit=%d&from=%d%s", adminapi.PathOplog, adminapi.MaxOplogPage, from, query), &page)
		all = append(all, page.Entries...)
		if len(page.Entries) == 0 || page.Next >= page.Head {
			return all
		}
		from = page.Next
	}
}

// Decided reads the ledger's answer for opID in tenant and reports
// whether the ledger holds a decision for it.
func (s *Server) Decided(t testing.TB, tenant, opID string) (adminapi.LedgerAnswer, bool) {
	t.Helper()
	var ans adminapi.LedgerAnswer
	q := url.Values{adminapi.ParamTenant: {tenant}}
	code := GetJSON(t, s.AdminURL+adminapi.LedgerPath(opID)+"?"+q.Encode(), s.AdminToken, &ans)
	require.Contains(t, []int{http.StatusOK, http.StatusNotFound}, code)
	return ans, code == http.StatusOK
}

// Snapshot fetches /v1/snapshot with token and returns its head and
// records. While the server answers 503 server_busy (a token reads one
// snapshot at a time: a device may be reading its own with the same
// token) it asks again, within Timeout.
func (s *Server) Snapshot(t testing.TB, token string) (uint64, []syncproto.SnapshotRecord) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	resp := Get(t, s.URL+syncproto.SnapshotPath, token)
	for resp.StatusCode == http.StatusServiceUnavailable && time.Now().Before(deadline) {
		resp.Body.Close()
		time.Sleep(10 * time.Millisecond)
		resp = Get(t, s.URL+syncproto.SnapshotPath, token)
	}
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, syncproto.SnapshotContentType, resp.Header.Get("Content-Type"))
	r, err := syncproto.NewSnapshotReader(resp.Body)
	require.NoError(t, err)
	var recs []syncproto.SnapshotRecord
	for range 1_000_000 {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return r.Head(), recs
		}
		require.NoError(t, err)
		recs = append(recs, rec)
	}
	t.Fatalf("snapshot longer than 1000000 records")
	return 0, nil
}

// Metric returns the value of the sample named exactly series (name and
// labels as /metrics writes them, `name{label="v"}`), or "" when absent.
func (s *Server) Metric(t testing.TB, series string) string {
	t.Helper()
	resp := Get(t, s.URL+"/metrics", "")
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return v
		}
	}
	require.NoError(t, sc.Err())
	return ""
}

// MetricValue is Metric as a number; 0 when absent.
func (s *Server) MetricValue(t testing.TB, series string) float64 {
	t.Helper()
	v := s.Metric(t, series)
	if v == "" {
		return 0
	}
	f, err := strconv.ParseFloat(v, 64)
	require.NoError(t, err)
	return f
}
