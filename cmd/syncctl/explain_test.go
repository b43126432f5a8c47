package main

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/internal/fakeclock"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// TestExplainAgainstLiveServer builds a device queue holding one item of
// each state, with every server-side fact made by real pushes to a live
// syncd, and checks explain's verdict for each.
func TestExplainAgainstLiveServer(t *testing.T) {
	ts := startServer(t, serverOptions{clock: fakeclock.New(t0), retention: true})
	seed(t, ts) // ops 1..6, see seed
	ts.waitForStatus(t, "a ledger floor", func(st statusView) bool { return !st.LedgerFloor.IsZero() })

	rejectedOnce := write(9, syncproto.OpPut, "secret", "s", `{"v":9}`, t0.Add(-2*time.Second), nil)
	rejectedDead := write(10, syncproto.OpPut, "secret", "t", `{"v":10}`, t0.Add(-2*time.Second), nil)
	expiredDead := write(11, syncproto.OpPut, "notes", "older", `{"v":11}`, t0.Add(-3*time.Hour), nil)
	s := ts.dial(t, 0)
	res := s.push(rejectedOnce, rejectedDead, expiredDead)
	s.close()
	require.Equal(t, syncproto.StatusRejected, res[0].Status)
	require.Equal(t, syncproto.CodeForbiddenModel, res[1].Code)
	require.Equal(t, syncproto.StatusExpired, res[2].Status)

	// The device's queue, as the client library would have left it.
	path := filepath.Join(t.TempDir(), "device.ndjson")
	q, err := offlinequeue.OpenFile(path, offlinequeue.FileOptions{})
	require.NoError(t, err)
	ctx := context.Background()
	enqueue(t, q, write(1, syncproto.OpPut, "notes", "a", `{"title":"first"}`, t0.Add(-10*time.Second), nil))
	enqueue(t, q, write(4, syncproto.OpPut, "docs", "d", `{"rev":2}`, t0.Add(-7*time.Second), version(0)))
	enqueue(t, q, write(5, syncproto.OpPut, "notes", "a", `{"title":"late"}`, t0.Add(-20*time.Second), nil))
	enqueue(t, q, write(7, syncproto.OpPut, "notes", "c", `{"v":7}`, t0.Add(-3*time.Second), nil))
	enqueue(t, q, write(8, syncproto.OpPut, "notes", "old", `{"v":8}`, t0.Add(-2*time.Hour), nil))
	id := enqueue(t, q, rejectedOnce)
	require.NoError(t, q.SetAttempts(ctx, id, 2))
	_, err = q.Enqueue(ctx, []byte("not a write"), "")
	require.NoError(t, err)
	id = enqueue(t, q, rejectedDead)
	require.NoError(t, q.SetAttempts(ctx, id, 5))
	require.NoError(t, q.MoveToDeadLetters(ctx, id, string(res[1].Code)+": "+res[1].Message))
	id = enqueue(t, q, expiredDead)
	require.NoError(t, q.MoveToDeadLetters(ctx, id, string(res[2].Status)+": "+res[2].Message))
	id = enqueue(t, q, write(3, syncproto.OpPut, "docs", "d", `{"rev":1}`, t0.Add(-8*time.Second), version(0)))
	require.NoError(t, q.MoveToDeadLetters(ctx, id, "internal: lost in a crash"))
	require.NoError(t, q.Close())
	before := snapshotDir(t, filepath.Dir(path))

	env := ts.adminEnv()
	c := newCLI(t, env)
	requireGolden(t, "explain", c.ok("explain", "--path", path, "--tenant", tenant))

	var got []explanation
	decodeStrict(t, c.ok("explain", "--path", path, "--tenant", tenant, "--json"), &got)
	want := []struct {
		op      string
		state   itemState
		version uint64
		code    syncproto.Code
	}{
		{opID(1), stateAppliedUnacked, 1, ""},
		{opID(4), stateConflict, 1, ""},
		{opID(5), stateSupersededUnacked, 1, ""},
		{opID(7), stateNeverSent, 0, ""},
		{opID(8), stateExpired, 0, ""},
		{opID(9), stateRejected, 0, ""},
		{"", stateUnreadable, 0, ""},
		{opID(10), stateDeadRejected, 0, syncproto.CodeForbiddenModel},
		{opID(11), stateDeadExpired, 0, ""},
		{opID(3), stateDeadDecided, 1, ""},
	}
	require.Len(t, got, len(want))
	for i, w := range want {
		require.Equal(t, w.op, got[i].OpID, "item %d", i)
		require.Equal(t, w.state, got[i].State, "item %d (%s): %s", i, w.op, got[i].Why)
		require.Equal(t, w.version, got[i].Version, "item %d", i)
		require.Equal(t, w.code, got[i].Code, "item %d", i)
	}

	// The --json schema: every object has exactly these keys (ledger only
	// when the server was asked, code and version only when known).
	raw := objects(t, c.ok("explain", "--path", path, "--tenant", tenant, "--json"))
	requireKeys(t, raw[0], "id", "queue", "op_id", "write", "attempts", "state", "version", "why", "ledger")
	requireKeys(t, raw[3], "id", "queue", "op_id", "write", "attempts", "state", "why", "ledger")
	requireKeys(t, raw[6], "id", "queue", "attempts", "state", "why")
	requireKeys(t, raw[7], "id", "queue", "op_id", "write", "attempts", "state", "code", "why", "ledger")
	requireKeys(t, raw[0]["ledger"].(map[string]any), "tenant", "op_id", "found", "op_time", "decided_at", "result", "floor", "client_id")

	require.Equal(t, before, snapshotDir(t, filepath.Dir(path)), "explain changes nothing")

	// --limit cuts the listing and says so.
	r := c.run("explain", "--path", path, "--tenant", tenant, "--limit", "2")
	require.NoError(t, r.err)
	require.Equal(t, "more items were left out: raise --limit (0 for all)\n", r.stderr)
}

// TestExplainVerdicts covers explain's decision table without a server.
func TestExplainVerdicts(t *testing.T) {
	m := write(1, syncproto.OpPut, "notes", "a", `{}`, t0, nil)
	floor := t0.Add(-time.Hour)
	missing := &adminapi.LedgerAnswer{Found: false, Floor: floor}
	found := func(r syncproto.Result) *adminapi.LedgerAnswer {
		return &adminapi.LedgerAnswer{Found: true, Result: &r, Floor: floor}
	}
	winner := &syncproto.Winner{Version: 7, Value: json.RawMessage(`1`), HLC: m.HLC}
	old := write(2, syncproto.OpPut, "notes", "a", `{}`, floor, nil)
	for name, tc := range map[string]struct {
		w    queuedWrite
		ans  *adminapi.LedgerAnswer
		want itemState
	}{
		"never sent":           {queuedWrite{Write: &m}, missing, stateNeverSent},
		"never sent, no floor": {queuedWrite{Write: &m}, &adminapi.LedgerAnswer{}, stateNeverSent},
		"refused twice":        {queuedWrite{Write: &m, Attempts: 2}, missing, stateRejected},
		"at the floor":         {queuedWrite{Write: &old}, missing, stateExpired},
		"applied":              {queuedWrite{Write: &m}, found(syncproto.Result{Status: syncproto.StatusApplied, Version: 3, Seq: 9}), stateAppliedUnacked},
		"superseded":           {queuedWrite{Write: &m}, found(syncproto.Result{Status: syncproto.StatusSuperseded, Winner: winner}), stateSupersededUnacked},
		"conflict":             {queuedWrite{Write: &m}, found(syncproto.Result{Status: syncproto.StatusConflict, Winner: winner}), stateConflict},
		"dead, refused":        {queuedWrite{Write: &m, Dead: true, Reason: "invalid_key: bad"}, missing, stateDeadRejected},
		"dead, expired":        {queuedWrite{Write: &m, Dead: true, Reason: "expired: too old"}, missing, stateDeadExpired},
		"dead, free text":      {queuedWrite{Write: &m, Dead: true, Reason: "Operator said no"}, missing, stateDeadOther},
		"dead, but decided":    {queuedWrite{Write: &m, Dead: true, Reason: "internal: x"}, found(syncproto.Result{Status: syncproto.StatusApplied, Version: 1, Seq: 1}), stateDeadDecided},
		"unreadable":           {queuedWrite{Err: "not json"}, nil, stateUnreadable},
	} {
		got := explain(tc.w, tc.ans)
		require.Equal(t, tc.want, got.State, "%s: %s", name, got.Why)
		require.NotEmpty(t, got.Why, name)
	}
	conflict := explain(queuedWrite{Write: &m}, found(syncproto.Result{Status: syncproto.StatusConflict, Winner: winner}))
	require.Equal(t, uint64(7), conflict.Version)
	require.Contains(t, conflict.Why, "conflict with version 7")
	dead := explain(queuedWrite{Write: &m, Dead: true, Attempts: 5, Reason: "invalid_key: bad"}, missing)
	require.Equal(t, syncproto.CodeInvalidKey, dead.Code)
	require.Contains(t, dead.Why, "rejected with code invalid_key after 5 attempts: bad")
}

// TestExplainReadsTheTenantAndSaysTheTokenWasRefused: a real client whose
// replica shares its SQLite queue file syncs once (its replica records the
// tenant from welcome), then its token is revoked and it writes again.
// explain needs no --tenant, and says first, and on the stuck write, that
// the device cannot replay because its token was refused; it names the
// device's user.
func TestExplainReadsTheTenantAndSaysTheTokenWasRefused(t *testing.T) {
	ts := startServer(t, serverOptions{})
	token, err := auth.Issue(ts.tokenPath, auth.Principal{Tenant: tenant, User: "bob", ClientID: "dev-b", Read: []string{auth.Wildcard}, Write: []string{"notes"}}, t0)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "device.db")
	q, err := offlinequeue.OpenSQLite(path, offlinequeue.SQLiteOptions{})
	require.NoError(t, err)
	dev, err := client.Open(t.Context(), client.Config{ServerURLs: []string{ts.url}, Token: token, ClientID: "dev-b", Queue: q, ProbeInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	defer dev.Close()
	ctx, cancel := context.WithTimeout(t.Context(), syncdtest.Timeout)
	defer cancel()
	op, err := dev.Put(ctx, "notes", "first", json.RawMessage(`1`))
	require.NoError(t, err)
	_, err = dev.Await(ctx, op)
	require.NoError(t, err)

	require.NoError(t, auth.Revoke(ts.tokenPath, auth.TokenIDOf(token)))
	require.Eventually(t, func() bool {
		st, err := dev.Status(ctx)
		return err == nil && errors.Is(st.LastError, client.ErrUnauthorized)
	}, ioTimeout, 10*time.Millisecond, "the device learns its token was revoked")
	stuck, err := dev.Put(ctx, "notes", "second", json.RawMessage(`2`))
	require.NoError(t, err)
	require.NoError(t, dev.Close())

	c := newCLI(t, ts.adminEnv())
	out := c.ok("explain", path)
	require.Contains(t, out, "device of user bob in tenant "+tenant+"\n")
	require.Regexp(t, `(?m)^STUCK: the server refused the device's token at \S+ \(unauthorized: .*\); no write replays until give the device a valid token`, out)
	require.Contains(t, out, string(stateTokenRefused))
	var got []explanation
	decodeStrict(t, c.ok("explain", path, "--json"), &got)
	require.Len(t, got, 1)
	require.Equal(t, stuck, got[0].OpID)
	require.Equal(t, stateTokenRefused, got[0].State)
	require.Contains(t, got[0].Blocked, "refused the device's token")

	// An NDJSON queue records no tenant: explain asks for --tenant.
	nd := filepath.Join(t.TempDir(), "device.ndjson")
	fq, err := offlinequeue.OpenFile(nd, offlinequeue.FileOptions{})
	require.NoError(t, err)
	require.NoError(t, fq.Close())
	r := c.run("explain", nd)
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.err.Error(), "pass --tenant")
	r = c.run("explain", nd, "--replica", filepath.Join(t.TempDir(), "missing.db"))
	require.Equal(t, exitBadFile, r.code, "%v", r.err)
}
