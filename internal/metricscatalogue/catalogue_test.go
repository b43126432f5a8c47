package metricscatalogue_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// waitFor bounds every wait of the scenario.
const waitFor = 20 * time.Second

// entry is one row of the catalogue.
type entry struct {
	name, typ, unit string
	// labels maps each label to its documented values; nil when the
	// catalogue describes the values in prose instead of listing them.
	labels map[string][]string
}

var (
	catalogueRow = regexp.MustCompile("^\\| `(syncd_[a-z0-9_]+)` \\|")
	labelSpec    = regexp.MustCompile("^`([a-z_]+)`(?:: (.+))?$")
	valueList    = regexp.MustCompile("^`[^`]+`(?:, `[^`]+`)*$")
	backticked   = regexp.MustCompile("`([^`]+)`")
)

// readCatalogue parses the metric tables of docs/metrics.md: rows whose
// first cell is a backticked syncd_ name.
func readCatalogue(t *testing.T) map[string]entry {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "docs", "metrics.md"))
	require.NoError(t, err)
	defer f.Close()
	out := map[string]entry{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !catalogueRow.MatchString(line) {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		require.Len(t, cells, 5, "a catalogue row is name | type | unit | labels | meaning: %s", line)
		e := entry{name: strings.Trim(cells[0], "`"), typ: cells[1], unit: cells[2], labels: map[string][]string{}}
		require.NotContains(t, out, e.name, "listed twice")
		require.NotEmpty(t, strings.TrimSpace(cells[4]), "%s has no meaning", e.name)
		if cells[3] != "none" {
			for spec := range strings.SplitSeq(cells[3], "; ") {
				m := labelSpec.FindStringSubmatch(spec)
				require.NotNil(t, m, "%s: label spec %q is not `label`: values", e.name, spec)
				var values []string
				if valueList.MatchString(m[2]) {
					for _, v := range backticked.FindAllStringSubmatch(m[2], -1) {
						values = append(values, v[1])
					}
				}
				e.labels[m[1]] = values
			}
		}
		out[e.name] = e
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, out, "no catalogue rows found")
	return out
}

func debugLogger(w *syncdtest.Buffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// valueMarker is in every value the scenario writes; no log may hold it.
const valueMarker = "marker-7f3a-value"

// scenario is a real syncd and a real client after the pushes the catalogue
// needs: an applied write, an optimistic conflict, a dead letter, a refused
// token and a protocol error.
type scenario struct {
	publicURL, adminURL string
	clusterNodeURL      string // a cluster node, for the syncd_cluster_* metrics
	jwtNodeURL          string // a server verifying JWTs, for the syncd_jwt_* and syncd_jwks_* metrics
	clientRegistry      *prometheus.Registry
	serverLogs          *syncdtest.Buffer
	clientLogs          *syncdtest.Buffer
	tokens              []string // every token used, good and bad
}

func runScenario(t *testing.T) *scenario {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	sc := &scenario{serverLogs: &syncdtest.Buffer{}, clientLogs: &syncdtest.Buffer{}, clientRegistry: prometheus.NewRegistry()}

	srv := syncdtest.Start(t, server.Config{
		Policies: replication.Config{"docs": syncproto.PolicyOptimistic, "tallies": syncproto.PolicyHook},
		Hook: func(context.Context, replication.Record, bool, replication.Proposal) (replication.HookResult, error) {
			return replication.Accept(), nil
		},
		RetentionInterval: -1,
		Logger:            debugLogger(sc.serverLogs),
		EventLogInterval:  20 * time.Millisecond,
	})
	issue := func(p auth.Principal) string {
		tok := srv.Issue(t, p)
		sc.tokens = append(sc.tokens, tok)
		return tok
	}
	admin := srv.AdminToken
	sc.tokens = append(sc.tokens, admin)
	member := issue(auth.Principal{Tenant: "acme", ClientID: "phone-1", Read: []string{auth.Wildcard}, Write: []string{"notes", "docs"}})
	prober := issue(auth.Principal{Tenant: "acme", ClientID: "probe-1", Read: []string{auth.Wildcard}})
	wrong := "sdk_000000000000_" + strings.Repeat("x", 43)
	sc.tokens = append(sc.tokens, wrong)
	sc.publicURL, sc.adminURL = srv.URL, srv.AdminURL
	sc.clusterNodeURL = syncdtest.StartCluster(t, 1, server.Config{RetentionInterval: -1})[0].URL
	sc.jwtNodeURL = startJWTNode(t, sc)

	qm, err := offlinequeue.NewMetrics(sc.clientRegistry)
	require.NoError(t, err)
	q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{Options: offlinequeue.Options{Metrics: qm}})
	require.NoError(t, err)
	c, err := client.Open(ctx, client.Config{
		ServerURLs: []string{srv.URL}, Token: member, ClientID: "phone-1", Queue: q,
		ReplicaPath: filepath.Join(dir, "replica.db"), MaxAttempts: 1,
		Registerer: sc.clientRegistry, Logger: debugLogger(sc.clientLogs),
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })

	value := func(n int) json.RawMessage {
		return json.RawMessage(`{"text":"` + valueMarker + `","n":` + string(rune('0'+n)) + `}`)
	}
	await := func(opID string, err error) client.Outcome {
		t.Helper()
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(ctx, waitFor)
		defer cancel()
		o, err := c.Await(ctx, opID)
		require.NoError(t, err)
		// Let the replay pass end before the next write: a write made
		// while a pass runs can be decided before its overlay row is
		// written, and then Await never returns (a client race reported
		// with a reproducing test; not what this test is about).
		require.NoError(t, c.Sync(ctx))
		return o
	}
	require.Equal(t, client.StatusApplied, await(c.Put(ctx, "notes", "n1", value(1))).Status)
	require.Equal(t, client.StatusApplied, await(c.PutIfVersion(ctx, "docs", "d1", value(2), 0)).Status)
	require.Equal(t, client.StatusConflict, await(c.PutIfVersion(ctx, "docs", "d1", value(3), 0)).Status)
	dead := await(c.Put(ctx, "secret", "s1", value(4)))
	require.Equal(t, client.StatusDeadLettered, dead.Status)
	require.Contains(t, dead.Reason, string(syncproto.CodeForbiddenModel))

	// A refused token, on the snapshot endpoint.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+syncproto.SnapshotPath, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+wrong)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// A snapshot downloaded, so the snapshot turns' metrics have series.
	req, err = http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+syncproto.SnapshotPath, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+prober)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// A protocol error: a request of an unknown type after hello.
	wsctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	ws, _, err := websocket.Dial(wsctx, "ws"+strings.TrimPrefix(srv.URL, "http")+syncproto.SyncPath, &websocket.DialOptions{
		Subprotocols: []string{syncproto.Subprotocol},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + prober}},
	})
	require.NoError(t, err)
	hello, err := syncproto.Encode(&syncproto.Hello{ID: "h", ClientID: "probe-1", HLC: syncproto.Timestamp{Wall: time.Now().UnixMilli(), Origin: "probe-1"}})
	require.NoError(t, err)
	for _, frame := range [][]byte{hello, []byte(`{"type":"nonsense","id":"n"}`)} {
		require.NoError(t, ws.Write(wsctx, websocket.MessageText, frame))
		_, answer, err := ws.Read(wsctx)
		require.NoError(t, err)
		if bytes.Contains(frame, []byte("nonsense")) {
			require.Contains(t, string(answer), string(syncproto.CodeUnknownType))
		}
	}
	ws.Close(websocket.StatusNormalClosure, "")

	// An admin call, so the admin token passes through the server too.
	req, err = http.NewRequestWithContext(ctx, http.MethodGet, srv.AdminURL+"/v1/admin/status", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return sc
}

// parse reads a text-format scrape.
func parse(t *testing.T, body []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	require.NoError(t, err)
	return fams
}

// scrape returns every metric family the server and the client export.
func (sc *scenario) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(sc.publicURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	var body bytes.Buffer
	_, err = body.ReadFrom(resp.Body)
	require.NoError(t, err)
	all := parse(t, body.Bytes())

	// The cluster metrics, from a cluster node (its other metrics are the
	// single server's, checked above).
	resp, err = http.Get(sc.clusterNodeURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body.Reset()
	_, err = body.ReadFrom(resp.Body)
	require.NoError(t, err)
	for name, f := range parse(t, body.Bytes()) {
		if strings.HasPrefix(name, "syncd_cluster_") {
			all[name] = f
		}
	}

	// The JWT metrics, from the server verifying JWTs.
	resp, err = http.Get(sc.jwtNodeURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body.Reset()
	_, err = body.ReadFrom(resp.Body)
	require.NoError(t, err)
	for name, f := range parse(t, body.Bytes()) {
		if strings.HasPrefix(name, "syncd_jwt_") || strings.HasPrefix(name, "syncd_jwks_") {
			all[name] = f
		}
	}

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(sc.clientRegistry, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for name, f := range parse(t, rec.Body.Bytes()) {
		require.NotContains(t, all, name, "the server and the client both export %s", name)
		all[name] = f
	}
	return all
}

func typeName(t dto.MetricType) string {
	switch t {
	case dto.MetricType_COUNTER:
		return "counter"
	case dto.MetricType_GAUGE:
		return "gauge"
	case dto.MetricType_HISTOGRAM:
		return "histogram"
	case dto.MetricType_SUMMARY:
		return "summary"
	}
	return t.String()
}

func TestCatalogueMatchesWhatIsExported(t *testing.T) {
	catalogue := readCatalogue(t)
	sc := runScenario(t)
	// Every labelled series the scenario causes exists by now: the server
	// counts a push's results before answering it, and the client counts a
	// replay pass when it ends, which the pass answering the next awaited
	// write waited for (passes never overlap).
	exported := sc.scrape(t)

	for name, e := range catalogue {
		f, ok := exported[name]
		require.True(t, ok, "%s is catalogued but not exported after the scenario", name)
		require.Equal(t, e.typ, typeName(f.GetType()), "%s: type", name)

		want := make([]string, 0, len(e.labels))
		for l := range e.labels {
			want = append(want, l)
		}
		sort.Strings(want)
		require.NotEmpty(t, f.GetMetric(), name)
		for _, m := range f.GetMetric() {
			got := []string{}
			for _, lp := range m.GetLabel() {
				got = append(got, lp.GetName())
				if values := e.labels[lp.GetName()]; values != nil {
					require.Contains(t, values, lp.GetValue(), "%s{%s} takes a value the catalogue does not list", name, lp.GetName())
				}
			}
			sort.Strings(got)
			require.Equal(t, want, got, "%s: labels", name)
		}

		// Naming conventions, so the unit column and the name agree.
		require.Equal(t, e.typ == "counter", strings.HasSuffix(name, "_total"), "%s: counters, and only counters, end in _total", name)
		require.Equal(t, e.unit == "seconds", strings.HasSuffix(strings.TrimSuffix(name, "_total"), "_seconds"), "%s: unit seconds iff named _seconds", name)
		require.Equal(t, e.unit == "bytes", strings.HasSuffix(strings.TrimSuffix(name, "_total"), "_bytes"), "%s: unit bytes iff named _bytes", name)
	}
	for name := range exported {
		if strings.HasPrefix(name, "syncd_") {
			_, listed := catalogue[name]
			require.True(t, listed, "%s is exported but docs/metrics.md does not list it", name)
		}
	}

	// The scenario's events are visible in the counters an operator
	// alerts on.
	require.Positive(t, counter(exported, "syncd_conflicts_total", "policy", "optimistic"))
	require.Positive(t, counter(exported, "syncd_mutations_total", "status", "rejected"))
	require.Positive(t, counter(exported, "syncd_connections_total", "result", "unauthorized"))
	require.Positive(t, counter(exported, "syncd_protocol_errors_total", "code", "unknown_type"))
	require.Positive(t, counter(exported, "syncd_client_dead_letters_total", "", ""))
}

// counter returns the value of a counter series (label "" for none).
func counter(fams map[string]*dto.MetricFamily, name, label, value string) float64 {
	for _, m := range fams[name].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label && lp.GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
		if label == "" {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestLogsHoldNoTokensOrValues scans the scenario's logs, at debug level,
// for every token it used (good and bad) and the values it wrote, and checks
// that the events operators need are logged.
func TestLogsHoldNoTokensOrValues(t *testing.T) {
	sc := runScenario(t)
	// The protocol-error session's end is logged once the server has
	// noticed it.
	require.Eventually(t, func() bool { return strings.Contains(sc.serverLogs.String(), `"msg":"client disconnected"`) },
		waitFor, 10*time.Millisecond, "syncd never logged a disconnect")
	// Refusals and authentication failures are logged as counts, once per
	// interval (server.Config.EventLogInterval).
	for _, msg := range []string{"authentication failed", "request refused"} {
		require.Eventually(t, func() bool { return strings.Contains(sc.serverLogs.String(), `"msg":"`+msg+`"`) },
			waitFor, 10*time.Millisecond, "syncd never logged %q", msg)
	}
	for name, logs := range map[string]*syncdtest.Buffer{"syncd": sc.serverLogs, "client": sc.clientLogs} {
		text := logs.String()
		require.NotEmpty(t, text, name)
		for _, tok := range sc.tokens {
			_, secret, _ := strings.Cut(strings.TrimPrefix(tok, "sdk_"), "_")
			if !strings.HasPrefix(tok, "sdk_") { // a JWT: its signature
				secret = tok[strings.LastIndex(tok, ".")+1:]
			}
			require.NotContains(t, text, tok, "%s logged a token", name)
			require.NotContains(t, text, secret, "%s logged a token's secret", name)
		}
		require.NotContains(t, text, valueMarker, "%s logged a written value", name)
	}

	events := map[string][]map[string]any{}
	for line := range strings.SplitSeq(strings.TrimSpace(sc.serverLogs.String()), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), "syncd logs JSON lines: %s", line)
		msg, _ := rec["msg"].(string)
		events[msg] = append(events[msg], rec)
	}
	for _, want := range []struct {
		msg  string
		keys []string
	}{
		{"client connected", []string{"client_id", "tenant", "remote"}},
		{"client disconnected", []string{"client_id", "tenant", "remote"}},
		{"authentication failed", []string{"code", "count", "last_remote"}},
		{"request refused", []string{"code", "count", "last_remote"}},
	} {
		require.NotEmpty(t, events[want.msg], "syncd never logged %q", want.msg)
		for _, k := range want.keys {
			require.Contains(t, events[want.msg][0], k, "%q without %s", want.msg, k)
		}
	}
}

// startJWTNode starts a server verifying JWTs from a JWKS file and
// downloads a snapshot with one, so its JWT metrics have series.
func startJWTNode(t *testing.T, sc *scenario) string {
	t.Helper()
	key, err := auth.GenerateSigningKey("EdDSA")
	require.NoError(t, err)
	jwks, err := auth.JWKS(key)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "jwks.json")
	require.NoError(t, os.WriteFile(path, jwks, 0o600))
	reg := prometheus.NewRegistry()
	a, err := auth.New(auth.Config{JWT: &auth.JWTConfig{JWKSFile: path, Issuer: "iss", Audience: "aud"}, Registerer: reg})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	srv := syncdtest.Start(t, server.Config{Authenticator: a, Registry: reg, RetentionInterval: -1})
	now := time.Now()
	tok, err := key.Sign(map[string]any{"iss": "iss", "aud": "aud", "sub": "alice", "tenant": "acme", "read": "*",
		"iat": now.Unix(), "exp": now.Add(time.Minute).Unix()})
	require.NoError(t, err)
	sc.tokens = append(sc.tokens, tok)
	req, err := http.NewRequest(http.MethodGet, srv.URL+syncproto.SnapshotPath, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return srv.URL
}
