package client

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// pushAs writes muts to s as clientID over a real session and requires
// them applied.
func pushAs(t *testing.T, s *syncdtest.Server, token, clientID string, muts ...syncproto.Mutation) {
	t.Helper()
	ctx := t.Context()
	conn, _, err := websocket.Dial(ctx, s.URL+syncproto.SyncPath, &websocket.DialOptions{
		Subprotocols: []string{syncproto.Subprotocol}, HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	require.NoError(t, err)
	defer conn.CloseNow()
	conn.SetReadLimit(syncproto.MaxFrameBytes)
	clock := syncproto.NewClock(clientID, nil)
	exchange := func(msg syncproto.Message) syncproto.Message {
		frame, err := syncproto.Encode(msg)
		require.NoError(t, err)
		require.NoError(t, conn.Write(ctx, websocket.MessageText, frame))
		for {
			_, frame, err = conn.Read(ctx)
			require.NoError(t, err)
			got, err := syncproto.Decode(frame)
			require.NoError(t, err)
			switch got.(type) {
			case *syncproto.Welcome, *syncproto.PushResult, *syncproto.Error:
				return got
			}
		}
	}
	_, ok := exchange(&syncproto.Hello{ID: "h", ClientID: clientID, HLC: clock.Now()}).(*syncproto.Welcome)
	require.True(t, ok, "hello must be welcomed")
	for i := range muts {
		muts[i].OpID, muts[i].HLC = uuid.Must(uuid.NewV7()).String(), clock.Now()
	}
	res, ok := exchange(&syncproto.Push{ID: "p", Mutations: muts}).(*syncproto.PushResult)
	require.True(t, ok, "push must be answered with push_result")
	for _, r := range res.Results {
		require.Equal(t, syncproto.StatusApplied, r.Status, "%+v", r)
	}
}

// headerProxy serves syncd's snapshots with their header line rewritten
// by rewrite (a fault: the header lies), the rest as sent.
func headerProxy(t *testing.T, s *syncdtest.Server, rewrite func(header map[string]any)) *httptest.Server {
	t.Helper()
	p := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, s.URL+r.URL.RequestURI(), nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header.Set("Authorization", r.Header.Get("Authorization"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body := bufio.NewReader(resp.Body)
		line, err := body.ReadBytes('\n')
		var header map[string]any
		if err != nil || json.Unmarshal(line, &header) != nil {
			http.Error(w, "no header", http.StatusBadGateway)
			return
		}
		rewrite(header)
		out, _ := json.Marshal(header)
		w.Write(append(out, '\n'))
		io.Copy(w, body)
	}))
	t.Cleanup(p.Close)
	return p
}

// The snapshot header's scopes (PROTOCOL.md 19.6) decide what a device
// holds complete after a resync; a header that disagrees with the request
// or with its own rows is refused with a typed error, keeps nothing, and
// the next download (the retry) is loaded.
func TestScopedSnapshotIsCheckedAgainstItsHeader(t *testing.T) {
	decl := &replication.Scopes{}
	require.NoError(t, decl.Set("project=tasks.project_id"))
	s := syncdtest.Start(t, server.Config{Scopes: decl})
	owner := s.Issue(t, auth.Principal{Tenant: "acme", ClientID: "owner", Read: []string{"*"}, Write: []string{"*"}, Scopes: map[string][]string{"project": {"*"}}})
	phone := s.Issue(t, auth.Principal{Tenant: "acme", ClientID: "phone", Read: []string{"*"}, Scopes: map[string][]string{"project": {"p1", "p2", "p4"}}})
	task := func(key, project string) syncproto.Mutation {
		return syncproto.Mutation{Model: "tasks", Key: key, Op: syncproto.OpPut, Value: []byte(fmt.Sprintf(`{"project_id":%q}`, project))}
	}
	pushAs(t, s, owner, "owner", task("t1", "p1"), task("t2", "p2"), task("t3", "p3"),
		syncproto.Mutation{Model: "notes", Key: "n1", Op: syncproto.OpPut, Value: []byte(`"plain"`)})

	info := map[string]syncproto.ScopeInfo{"project": {Models: map[string]string{"tasks": "project_id"}}}
	// device opens a fresh replica and a client that resyncs it.
	device := func(t *testing.T, want syncproto.ScopeSet) *Client {
		q, err := offlinequeue.OpenSQLite(filepath.Join(t.TempDir(), "queue.db"), offlinequeue.SQLiteOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { q.Close() })
		r, err := openReplica(t.Context(), q, "", offlinequeue.SyncFull, time.Now)
		require.NoError(t, err)
		t.Cleanup(func() { r.close() })
		r.fields.Store(newScopeFields(info, want))
		cfg := Config{Token: phone, HTTPClient: http.DefaultClient, MaxSnapshotBytes: 1 << 20, SnapshotTimeout: time.Minute}
		return &Client{cfg: cfg, replica: r, tokens: newTokens(cfg)}
	}
	load := func(t *testing.T, c *Client, baseURL string, want syncproto.ScopeSet) (uint64, syncproto.ScopeSet, string, error) {
		return c.fetchSnapshot(t.Context(), baseURL, snapshotScopes{want: want, cov: coveredBy(info)})
	}
	keys := func(t *testing.T, r *replica) []string {
		rows, err := r.db.QueryContext(t.Context(), `SELECT model || '/' || key FROM records ORDER BY model, key`)
		require.NoError(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var k string
			require.NoError(t, rows.Scan(&k))
			out = append(out, k)
		}
		return out
	}

	t.Run("a header that agrees is what the device holds", func(t *testing.T) {
		want := syncproto.ScopeSet{"project": {"p1", "p2", "p3", "p4"}}
		c := device(t, want)
		head, have, _, err := load(t, c, s.URL, want)
		require.NoError(t, err)
		require.Equal(t, uint64(4), head)
		require.Equal(t, syncproto.ScopeSet{"project": {"p1", "p2", "p4"}}, have, "p3 is not granted; p4 is granted and empty, so complete")
		require.Equal(t, []string{"notes/n1", "tasks/t1", "tasks/t2"}, keys(t, c.replica))
	})

	want := syncproto.ScopeSet{"project": {"p1", "p2"}}
	for _, tc := range []struct {
		name           string
		rewrite        func(h map[string]any)
		scope, value   string
		problemContain string
	}{
		{"a header naming no scopes", func(h map[string]any) { delete(h, "scopes") }, "", "", "names none"},
		{"a value held partially", func(h map[string]any) { h["scopes"] = map[string]any{"project": []string{"p1"}} }, "project", "p2", "does not say it holds it complete"},
		{"a value not asked for", func(h map[string]any) { h["scopes"] = map[string]any{"project": []string{"p1", "p2", "p9"}} }, "project", "p9", "did not ask for"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := headerProxy(t, s, tc.rewrite)
			c := device(t, want)
			_, _, reason, err := load(t, c, proxy.URL, want)
			require.ErrorIs(t, err, ErrSnapshotScopes)
			var se *SnapshotScopesError
			require.True(t, errors.As(err, &se), "err: %v", err)
			require.Equal(t, tc.scope, se.Scope)
			require.Equal(t, tc.value, se.Value)
			require.Contains(t, se.Problem, tc.problemContain)
			require.Equal(t, abandonedScopes, reason)
			require.Empty(t, keys(t, c.replica), "nothing of the refused snapshot is kept")
			cursor, err := c.replica.cursor(t.Context())
			require.NoError(t, err)
			require.Zero(t, cursor)
		})
	}

	t.Run("the retry loads the next download", func(t *testing.T) {
		var lie atomic.Bool
		lie.Store(true)
		proxy := headerProxy(t, s, func(h map[string]any) {
			if lie.Load() {
				h["scopes"] = map[string]any{"project": []string{"p2"}}
			}
		})
		c := device(t, want)
		_, _, _, err := load(t, c, proxy.URL, want)
		require.ErrorIs(t, err, ErrSnapshotScopes)
		lie.Store(false)
		_, have, _, err := load(t, c, proxy.URL, want)
		require.NoError(t, err)
		require.Equal(t, want, have)
		require.Equal(t, []string{"notes/n1", "tasks/t1", "tasks/t2"}, keys(t, c.replica))
	})
}

// A scope requested "*" that the header does not name is one the server
// follows whole (its token grants every value, PROTOCOL.md 19.3): the
// values of its rows are complete. Named in the header, its rows must be
// of the values named.
func TestSnapshotScopesCompleteUnderEveryValue(t *testing.T) {
	all := syncproto.ScopeSet{"project": {"*"}}
	rows := syncproto.ScopeSet{"project": {"p1", "p7"}}
	have, err := snapshotScopes{want: all, held: syncproto.ScopeSet{}}.complete(rows)
	require.NoError(t, err)
	require.Equal(t, rows, have)

	have, err = snapshotScopes{want: all, held: syncproto.ScopeSet{"project": {"p1", "p2", "p7"}}}.complete(rows)
	require.NoError(t, err)
	require.Equal(t, syncproto.ScopeSet{"project": {"p1", "p2", "p7"}}, have, "a granted value without rows is complete")

	_, err = snapshotScopes{want: all, held: syncproto.ScopeSet{"project": {"p1"}}}.complete(rows)
	require.ErrorIs(t, err, ErrSnapshotScopes)

	have, err = snapshotScopes{}.complete(rows)
	require.NoError(t, err)
	require.Equal(t, rows, have, "a device without scopes is not checked")
	require.NoError(t, snapshotScopes{}.checkHeader())
}
