package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/internal/fakeclock"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// ioTimeout bounds every network step of a test and every command run.
const ioTimeout = 20 * time.Second

// t0 is the fixed "now" of golden tests.
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// --- running syncctl --------------------------------------------------

// result is what one syncctl run printed and how it ended.
type result struct {
	stdout, stderr string
	err            error
	code           int
}

// cli runs syncctl in-process with a controlled environment and clock.
type cli struct {
	t   testing.TB
	env map[string]string
	now func() time.Time
}

func newCLI(t testing.TB, env map[string]string) *cli {
	if env == nil {
		env = map[string]string{}
	}
	return &cli{t: t, env: env, now: func() time.Time { return t0 }}
}

func (c *cli) app(stdout, stderr io.Writer) *app {
	return &app{stdout: stdout, stderr: stderr, getenv: func(k string) string { return c.env[k] }, now: c.now,
		isTerminal: func(io.Writer) bool { return false }}
}

// run runs one command to its end.
func (c *cli) run(args ...string) result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := c.app(&stdout, &stderr).run(ctx, args)
	return result{stdout: stdout.String(), stderr: stderr.String(), err: err, code: ExitCode(err)}
}

// ok runs a command that must succeed and returns its stdout.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	r := c.run(args...)
	require.NoError(c.t, r.err, "syncctl %s\nstderr: %s", strings.Join(args, " "), r.stderr)
	return r.stdout
}

// background runs a long command (--follow, watch) until the returned
// stop is called; stop cancels it and returns its error.
func (c *cli) background(args ...string) (stdout, stderr *syncdtest.Buffer, stop func() error) {
	c.t.Helper()
	stdout, stderr = &syncdtest.Buffer{}, &syncdtest.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.app(stdout, stderr).run(ctx, args) }()
	stopped := false
	var err error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case err = <-done:
			case <-time.After(ioTimeout):
				c.t.Fatalf("syncctl %s did not stop after cancellation", strings.Join(args, " "))
			}
		}
		return err
	}
	c.t.Cleanup(func() { stop() })
	return stdout, stderr, stop
}

// --- golden files -----------------------------------------------------

// requireGolden compares got with testdata/NAME.golden (rewritten with
// -update).
func requireGolden(t testing.TB, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "golden file missing: run go test ./cmd/syncctl -run %s -update", t.Name())
	require.Equal(t, string(want), got, "output differs from %s (rerun with -update after checking the change)", path)
}

// --- JSON schemas -----------------------------------------------------

// decodeStrict decodes one JSON document into v, refusing unknown fields,
// so the --json output and its documented Go type cannot drift.
func decodeStrict(t testing.TB, data string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(data))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(v), "output: %s", data)
	require.False(t, dec.More(), "one JSON document expected: %s", data)
}

// object decodes one JSON object.
func object(t testing.TB, data string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(data), &m), "output: %s", data)
	return m
}

// objects decodes a JSON array of objects.
func objects(t testing.TB, data string) []map[string]any {
	t.Helper()
	var m []map[string]any
	require.NoError(t, json.Unmarshal([]byte(data), &m), "output: %s", data)
	return m
}

// requireKeys checks that obj has exactly the keys want.
func requireKeys(t testing.TB, obj map[string]any, want ...string) {
	t.Helper()
	got := make([]string, 0, len(obj))
	for k := range obj {
		got = append(got, k)
	}
	sort.Strings(got)
	sort.Strings(want)
	require.Equal(t, want, got)
}

// --- a live syncd ------------------------------------------------------

// Test identities: tenant acme, client dev-a (reads everything, writes the
// notes and docs models: a write to any other model is rejected).
const (
	tenant   = "acme"
	clientID = "dev-a"
)

// testServer is a real syncd on loopback ports with its own SQLite file and
// token file. The docs model is optimistic; the others are LWW.
type testServer struct {
	srv       *server.Server
	url       string // public listener
	adminURL  string
	tokenPath string
	admin     string // an admin token
	member    string // dev-a's token
}

// serverOptions shape a test server.
type serverOptions struct {
	// clock, when set, is the server's clock (golden tests fix it at t0).
	clock *fakeclock.Clock
	// retention runs the janitor every few milliseconds with a one-hour
	// ledger, after dev-a wrote notes/aged (op 12, seq 1) an hour before
	// clock's time: the janitor evicts that decision, so tenant acme's
	// ledger floor is its op time, clock's time minus an hour.
	retention bool
	// oplogMaxEntries, when set, is the oplog's count bound per tenant
	// (no age bound), applied by the janitor every few milliseconds.
	oplogMaxEntries int64
	// scopes, when set, are the server's scope declarations.
	scopes *replication.Scopes
}

func startServer(t testing.TB, o serverOptions) *testServer {
	t.Helper()
	dir := t.TempDir()
	ts := &testServer{tokenPath: filepath.Join(dir, "tokens.json")}
	var err error
	ts.admin, err = auth.Issue(ts.tokenPath, auth.Principal{Admin: true}, t0)
	require.NoError(t, err)
	ts.member, err = auth.Issue(ts.tokenPath, auth.Principal{Tenant: tenant, ClientID: clientID, Read: []string{auth.Wildcard}, Write: []string{"notes", "docs"}}, t0)
	require.NoError(t, err)
	authn, err := auth.NewAuthenticator(ts.tokenPath, nil)
	require.NoError(t, err)
	cfg := server.Config{
		DataPath:          filepath.Join(dir, "syncd.db"),
		Authenticator:     authn,
		Policies:          replication.Config{"docs": syncproto.PolicyOptimistic},
		RetentionInterval: -1,
		Scopes:            o.scopes,
	}
	if o.clock != nil {
		cfg.Now = o.clock.Now
	}
	if o.retention {
		cfg.RetentionInterval = 20 * time.Millisecond
		cfg.Retention.LedgerMaxAge = time.Hour
	}
	if o.oplogMaxEntries != 0 {
		cfg.RetentionInterval = 20 * time.Millisecond
		cfg.Retention.Oplog = replication.Retention{MaxEntries: o.oplogMaxEntries, MaxAge: -1}
	}
	srv := syncdtest.Start(t, cfg)
	ts.srv, ts.url, ts.adminURL = srv.Server, srv.URL, srv.AdminURL
	if o.retention {
		require.NotNil(t, o.clock, "retention needs a clock to age a decision")
		now := o.clock.Now()
		o.clock.Set(now.Add(-time.Hour))
		s := ts.dial(t, 0)
		res := s.push(write(12, syncproto.OpPut, "notes", "aged", `{"v":12}`, now.Add(-time.Hour), nil))
		s.close()
		require.Equal(t, syncproto.StatusApplied, res[0].Status)
		o.clock.Set(now)
	}
	return ts
}

// adminEnv is the environment of admin commands against ts.
func (ts *testServer) adminEnv() map[string]string {
	return map[string]string{"SYNCCTL_SERVER": ts.adminURL, "SYNCCTL_TOKEN": ts.admin}
}

// waitForStatus polls syncctl status until ok holds, for what the
// server does asynchronously (the retention janitor, a session ending).
func (ts *testServer) waitForStatus(t testing.TB, what string, ok func(statusView) bool) {
	t.Helper()
	c := newCLI(t, ts.adminEnv())
	require.Eventually(t, func() bool {
		var st statusView
		r := c.run("status", "--json")
		return r.err == nil && json.Unmarshal([]byte(r.stdout), &st) == nil && ok(st)
	}, ioTimeout, 10*time.Millisecond, "the server's status never showed %s", what)
}

// --- a raw protocol session, to set up server state as a device would --

// session is one websocket connection that has said hello.
type session struct {
	t    testing.TB
	conn *websocket.Conn
	n    int
}

// dial opens a session for dev-a with the given cursor.
func (ts *testServer) dial(t testing.TB, cursor uint64) *session {
	t.Helper()
	return ts.dialAs(t, ts.member, clientID, cursor)
}

// dialAs opens a session with token, as client id, at cursor.
func (ts *testServer) dialAs(t testing.TB, token, id string, cursor uint64) *session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.url, "http")+syncproto.SyncPath, &websocket.DialOptions{
		Subprotocols: []string{syncproto.Subprotocol},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + token}},
	})
	require.NoError(t, err)
	s := &session{t: t, conn: conn}
	t.Cleanup(s.close)
	_, ok := s.request(&syncproto.Hello{ClientID: id, Cursor: cursor, HLC: syncproto.Timestamp{Wall: t0.UnixMilli(), Origin: id}}).(*syncproto.Welcome)
	require.True(t, ok, "hello must be welcomed")
	return s
}

// request sends msg with a fresh id and returns the answer.
func (s *session) request(msg syncproto.Message) syncproto.Message {
	s.t.Helper()
	s.n++
	id := fmt.Sprintf("r%d", s.n)
	switch m := msg.(type) {
	case *syncproto.Hello:
		m.ID = id
	case *syncproto.Push:
		m.ID = id
	case *syncproto.Subscribe:
		m.ID = id
	}
	frame, err := syncproto.Encode(msg)
	require.NoError(s.t, err)
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	require.NoError(s.t, s.conn.Write(ctx, websocket.MessageText, frame))
	_, answer, err := s.conn.Read(ctx)
	require.NoError(s.t, err)
	got, err := syncproto.Decode(answer)
	require.NoError(s.t, err)
	require.Equal(s.t, id, got.RequestID())
	return got
}

// push pushes mutations and returns their results.
func (s *session) push(muts ...syncproto.Mutation) []syncproto.Result {
	s.t.Helper()
	res, ok := s.request(&syncproto.Push{Mutations: muts}).(*syncproto.PushResult)
	require.True(s.t, ok, "push must be answered with push_result")
	require.Len(s.t, res.Results, len(muts))
	return res.Results
}

func (s *session) close() { s.conn.Close(websocket.StatusNormalClosure, "") }

// opID is the n-th fixed op id of the tests.
func opID(n int) string { return fmt.Sprintf("01973000-0000-7000-8000-%012d", n) }

// write is a mutation of dev-a made at the given time; base, when not
// nil, is its base version.
func write(n int, op syncproto.Op, model, key, value string, at time.Time, base *uint64) syncproto.Mutation {
	m := syncproto.Mutation{OpID: opID(n), Model: model, Key: key, Op: op, HLC: syncproto.Timestamp{Wall: at.UnixMilli(), Origin: clientID}, BaseVersion: base}
	if op == syncproto.OpPut {
		m.Value = json.RawMessage(value)
	}
	return m
}

func version(v uint64) *uint64 { return &v }

// enqueue adds a mutation to a device queue as the client library does
// (its JSON, keyed by its op id) and returns its item id.
func enqueue(t testing.TB, q offlinequeue.Queue, m syncproto.Mutation) offlinequeue.ID {
	t.Helper()
	payload, err := json.Marshal(m)
	require.NoError(t, err)
	id, err := q.Enqueue(context.Background(), payload, m.OpID)
	require.NoError(t, err)
	return id
}

// snapshotDir maps every file under dir to its bytes, so a test can check
// that a command changed nothing.
func snapshotDir(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !d.Type().IsRegular() { // a link or a FIFO: its type, never its content
			out[path] = d.Type().String()
			return nil
		}
		b, err := os.ReadFile(path)
		out[path] = string(b)
		return err
	}))
	return out
}
