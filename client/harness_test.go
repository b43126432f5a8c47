package client_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/soak/faultproxy"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// The end-to-end tests run a real syncd on a loopback port (SQLite file in
// t.TempDir(), real websockets) and reach it through a faultproxy that each
// test drives step by step: clients are configured with the proxy's address,
// never the server's, so every byte of probing, syncing and snapshotting
// crosses the faults. The admin API, the snapshot reads and the metrics the
// tests check with are served beside, not through, the proxy.

// Bounds of every wait in these tests. A broken client fails a test within
// waitFor; it never hangs it.
const (
	waitFor  = 30 * time.Second
	pollTick = 10 * time.Millisecond
	tenant   = "acme"
)

// syncd is a real server on a loopback port for client tests
// (syncdtest), with the test tenant's shorthands.
type syncd struct {
	*syncdtest.Server
}

// startSyncd starts syncd with cfg (DataPath, Authenticator and Registry
// filled in when empty) and stops it when the test ends.
func startSyncd(t testing.TB, cfg server.Config) *syncd {
	t.Helper()
	return &syncd{syncdtest.Start(t, cfg)}
}

// token issues a token for clientID in the test tenant that may read and
// write every model.
func (s *syncd) token(t testing.TB, clientID string) string {
	t.Helper()
	return s.Member(t, tenant, clientID)
}

// proxy starts a fault proxy in front of the server's public listener; it
// stands for one device's network path.
func (s *syncd) proxy(t testing.TB) *faultproxy.Proxy {
	t.Helper()
	u, err := url.Parse(s.URL)
	require.NoError(t, err)
	p, err := faultproxy.New(u.Host, faultproxy.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

// oplog reads the test tenant's whole oplog through the admin API.
func (s *syncd) oplog(t testing.TB) []adminapi.OplogEntry {
	t.Helper()
	return s.Oplog(t, "&"+url.Values{adminapi.ParamTenant: {tenant}}.Encode())
}

// oplogCounts counts the test tenant's oplog entries by op id.
func (s *syncd) oplogCounts(t testing.TB) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for _, e := range s.oplog(t) {
		counts[e.OpID]++
	}
	return counts
}

// requireAppliedOnce checks that the oplog holds each of ops exactly once
// and no op id twice.
func (s *syncd) requireAppliedOnce(t testing.TB, ops []string) {
	t.Helper()
	counts := s.oplogCounts(t)
	for op, n := range counts {
		require.Equal(t, 1, n, "op %s applied %d times", op, n)
	}
	for _, op := range ops {
		require.Equal(t, 1, counts[op], "op %s in the oplog %d times", op, counts[op])
	}
}

// conflicts reads the test tenant's conflict log for model (newest first).
func (s *syncd) conflicts(t testing.TB, model string) []adminapi.Conflict {
	t.Helper()
	var rows []adminapi.Conflict
	q := url.Values{adminapi.ParamTenant: {tenant}, adminapi.ParamModel: {model}, adminapi.ParamLimit: {strconv.Itoa(adminapi.MaxConflicts)}}
	s.Admin(t, adminapi.PathConflicts+"?"+q.Encode(), &rows)
	return rows
}

// serverRecords reads model's live records as the server holds them, from
// the snapshot endpoint (read with token, beside the proxy), keyed by key.
func (s *syncd) serverRecords(t testing.TB, token, model string) map[string]syncproto.SnapshotRecord {
	t.Helper()
	_, recs := s.Snapshot(t, token)
	out := map[string]syncproto.SnapshotRecord{}
	for _, rec := range recs {
		if rec.Model == model {
			out[rec.Key] = rec
		}
	}
	return out
}

// metric sums the values of the samples of the named counter or gauge in
// reg whose labels include labels ("name=value" pairs).
func metric(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for _, l := range labels {
		name, value, _ := strings.Cut(l, "=")
		found := false
		for _, lp := range m.GetLabel() {
			found = found || (lp.GetName() == name && lp.GetValue() == value)
		}
		if !found {
			return false
		}
	}
	return true
}

// device is one app install: a client over its own queue and replica in
// dir, reaching the server through its own proxy (its network path).
type device struct {
	*client.Client
	id       string
	token    string
	queue    offlinequeue.Queue // owned by the client; tests only read it
	registry *prometheus.Registry
	net      *faultproxy.Proxy
}

// deviceOptions shape openDevice; the zero value is a SQLite queue and the
// fast test intervals.
type deviceOptions struct {
	token     string             // "" issues one that may read and write everything
	fileQueue bool               // NDJSON file queue instead of SQLite
	queue     offlinequeue.Queue // an already opened queue (in dir) instead
	tweak     func(*client.Config)
}

// openDevice opens a client for clientID over a queue and replica in dir,
// its ServerURLs set to the proxy p. It is closed when the test ends.
func openDevice(t testing.TB, s *syncd, p *faultproxy.Proxy, dir, clientID string, o deviceOptions) *device {
	t.Helper()
	d := &device{id: clientID, token: o.token, registry: prometheus.NewRegistry(), net: p}
	if d.token == "" {
		d.token = s.token(t, clientID)
	}
	var err error
	switch {
	case o.queue != nil:
		d.queue = o.queue
	case o.fileQueue:
		d.queue, err = offlinequeue.OpenFile(filepath.Join(dir, "queue.ndjson"), offlinequeue.FileOptions{})
	default:
		d.queue, err = offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
	}
	require.NoError(t, err)
	cfg := client.Config{
		ServerURLs: []string{"http://" + p.Addr()}, Token: d.token, ClientID: clientID,
		Queue: d.queue, ReplicaPath: filepath.Join(dir, "replica.db"),
		ProbeInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond, MaxRetryInterval: 200 * time.Millisecond,
		Registerer: d.registry, Logger: failureLog(t, clientID),
	}
	if o.tweak != nil {
		o.tweak(&cfg)
	}
	d.Client, err = client.Open(context.Background(), cfg)
	if err != nil {
		d.queue.Close()
	}
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, d.Close()) })
	return d
}

// offline takes the device's network down: new connections are reset and
// live ones cut, as when a server or a path is gone.
func (d *device) offline() {
	d.net.SetMode(faultproxy.Refuse)
	d.net.ResetAll()
}

// online brings the device's network back.
func (d *device) online() { d.net.SetMode(faultproxy.Pass) }

func (d *device) status(t testing.TB) client.Status {
	t.Helper()
	st, err := d.Status(context.Background())
	require.NoError(t, err)
	return st
}

// waitStatus polls Status until cond holds, for at most waitFor.
func (d *device) waitStatus(t testing.TB, what string, cond func(client.Status) bool) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st, err := d.Status(context.Background())
		require.NoError(c, err)
		assert.True(c, cond(st), "%s: %s (status %+v)", d.id, what, st)
	}, waitFor, pollTick)
}

// waitSynced waits until the device is connected with nothing pending.
func (d *device) waitSynced(t testing.TB) {
	t.Helper()
	d.waitStatus(t, "connected with an empty queue", func(st client.Status) bool { return st.Connected && st.Pending == 0 })
}

// waitOffline waits until the device's monitor reports the network gone and
// no connection is bound.
func (d *device) waitOffline(t testing.TB) {
	t.Helper()
	// Online is false too before the monitor's first verdict, while the
	// state is still connecting: wait for the verdict itself.
	d.waitStatus(t, "offline", func(st client.Status) bool {
		return !st.Online && !st.Connected && st.State == client.StateOffline
	})
}

// put writes model/key and returns the op id.
func (d *device) put(t testing.TB, model, key string, value string) string {
	t.Helper()
	op, err := d.Put(context.Background(), model, key, json.RawMessage(value))
	require.NoError(t, err)
	return op
}

// await waits (at most waitFor) for the outcome of op.
func (d *device) await(t testing.TB, op string) client.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	o, err := d.Await(ctx, op)
	if err != nil {
		// Say where the write is: decided or not, queued or not.
		decided, found, lerr := d.Lookup(context.Background(), op)
		st, serr := d.Status(context.Background())
		require.NoError(t, err, "%s: await %s (lookup: %v %+v %v; status: %+v %v)", d.id, op, found, decided, lerr, st, serr)
	}
	return o
}

// requireApplied awaits every op and checks it was applied.
func (d *device) requireApplied(t testing.TB, ops []string) {
	t.Helper()
	for _, op := range ops {
		o := d.await(t, op)
		require.Equal(t, client.StatusApplied, o.Status, "%s: outcome of %s: %+v", d.id, op, o)
		require.NotZero(t, o.Version)
		require.NotZero(t, o.Seq)
	}
}

// queued returns the device's pending queue items, in order.
func (d *device) queued(t testing.TB) []offlinequeue.Item {
	t.Helper()
	var all []offlinequeue.Item
	var after offlinequeue.ID
	for {
		items, err := d.queue.Peek(context.Background(), after, 1000)
		require.NoError(t, err)
		if len(items) == 0 {
			return all
		}
		all = append(all, items...)
		after = items[len(items)-1].ID
	}
}

// queuedMutation decodes a queue item's payload.
func queuedMutation(t testing.TB, it offlinequeue.Item) syncproto.Mutation {
	t.Helper()
	var m syncproto.Mutation
	require.NoError(t, json.Unmarshal(it.Payload, &m))
	return m
}

// list reads all of model from the device's replica.
func (d *device) list(t testing.TB, model string) []client.Record {
	t.Helper()
	recs, err := d.List(context.Background(), model, client.ListOptions{})
	require.NoError(t, err)
	return recs
}

// requireMatchesServer checks that the device's replica lists model exactly
// as the server holds it: same keys, values and versions, nothing pending.
func (d *device) requireMatchesServer(t testing.TB, s *syncd, model string) {
	t.Helper()
	want := s.serverRecords(t, d.token, model)
	got := d.list(t, model)
	require.Len(t, got, len(want), "%s: records of %s", d.id, model)
	for _, rec := range got {
		w, ok := want[rec.Key]
		require.True(t, ok, "%s: %s/%s is not on the server", d.id, model, rec.Key)
		require.False(t, rec.Pending, "%s: %s/%s still pending", d.id, model, rec.Key)
		require.Equal(t, w.Version, rec.Version, "%s: version of %s/%s", d.id, model, rec.Key)
		require.JSONEq(t, string(w.Value), string(rec.Value), "%s: value of %s/%s", d.id, model, rec.Key)
	}
}

// convergesWithServer reports whether the device's replica lists model as
// the server holds it (for polling).
func (d *device) convergesWithServer(t testing.TB, s *syncd, model string) bool {
	t.Helper()
	want := s.serverRecords(t, d.token, model)
	got, err := d.List(context.Background(), model, client.ListOptions{})
	if err != nil || len(got) != len(want) {
		return false
	}
	for _, rec := range got {
		w, ok := want[rec.Key]
		if !ok || rec.Pending || w.Version != rec.Version || !jsonEqual(w.Value, rec.Value) {
			return false
		}
	}
	return true
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// failureLog returns a logger whose records are kept and printed only if
// the test fails, so a failing end-to-end test shows what its client did.
func failureLog(t testing.TB, name string) *slog.Logger {
	t.Helper()
	buf := &syncdtest.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
