package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/internal/fakeclock"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

func TestSmallClientPutGetWatch(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := newCLI(t, map[string]string{"SYNCCTL_SYNC_URL": ts.url, "SYNCCTL_CLIENT_TOKEN": ts.member, "SYNCCTL_CLIENT_ID": clientID})

	watched, watchErr, stopWatch := c.background("watch", "--model", "notes")
	watchedJSON, watchJSONErr, stopWatchJSON := c.background("watch", "--json")
	for _, w := range []*syncdtest.Buffer{watchErr, watchJSONErr} {
		require.Eventually(t, func() bool { return strings.Contains(w.String(), "watching") }, ioTimeout, 10*time.Millisecond, "watch never started: %s", w)
	}

	out := c.ok("put", "notes", "a", `{ "title": "hello" }`)
	require.Regexp(t, `(?m)^outcome  applied as version 1 \(seq 1\)$`, out)
	var applied outcomeView
	decodeStrict(t, c.ok("put", "docs", "d", `{"rev":1}`, "--if-version", "0", "--json"), &applied)
	require.Equal(t, outcomeView{OpID: applied.OpID, Model: "docs", Key: "d", Status: client.StatusApplied, Version: 1, Seq: 2}, applied)
	require.NoError(t, syncproto.ValidateOpID(applied.OpID))
	requireKeys(t, object(t, c.ok("put", "notes", "b", `2`, "--json")), "op_id", "model", "key", "status", "version", "seq")

	r := c.run("put", "docs", "d", `{"rev":2}`, "--if-version", "0")
	require.Equal(t, exitNotApplied, r.code, "a write the server decided against is exit status 7")
	require.Contains(t, r.stdout, "outcome  conflict with version 1")
	require.Equal(t, "syncctl: the server did not apply docs/d: conflict with version 1\n", r.stderr)

	out = c.ok("get", "notes", "a")
	require.Equal(t, "record   notes/a\nversion  1\npending  no\nvalue    {\"title\":\"hello\"}\n", out)
	var rec recordView
	decodeStrict(t, c.ok("get", "docs", "d", "--json"), &rec)
	require.JSONEq(t, `{"rev":1}`, string(rec.Value))
	require.Equal(t, recordView{Model: "docs", Key: "d", Version: 1, Value: rec.Value}, rec)
	requireOneLineError(t, c.run("get", "notes", "missing"), exitNotFound, "notes/missing does not exist")

	want := "VERSION  OP      MODEL/KEY                         VALUE\n" +
		"      1  put     notes/a                           {\"title\":\"hello\"}\n" +
		"      1  put     notes/b                           2\n"
	require.Eventually(t, func() bool { return watched.String() == want }, ioTimeout, 10*time.Millisecond, "watch printed %q", watched)
	require.NoError(t, stopWatch(), "an interrupt is watch's normal end")

	require.Eventually(t, func() bool { return strings.Count(watchedJSON.String(), "\n") == 3 }, ioTimeout, 10*time.Millisecond)
	require.NoError(t, stopWatchJSON())
	lines := strings.Split(strings.TrimSpace(watchedJSON.String()), "\n")
	var change changeView
	decodeStrict(t, lines[1], &change)
	require.Equal(t, changeView{Model: "docs", Key: "d", Version: 1, Value: []byte(`{"rev":1}`)}, change)
	requireKeys(t, object(t, lines[1]), "model", "key", "version", "value")
}

func TestSmallClientKeepsStateWithStateDir(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := newCLI(t, map[string]string{"SYNCCTL_SYNC_URL": ts.url, "SYNCCTL_CLIENT_TOKEN": ts.member, "SYNCCTL_CLIENT_ID": clientID})
	state := filepath.Join(t.TempDir(), "device")
	c.ok("put", "notes", "a", `1`, "--state", state)
	c.ok("put", "notes", "a", `2`, "--state", state)
	require.Contains(t, c.ok("get", "notes", "a", "--state", state), "version  2")
	require.FileExists(t, filepath.Join(state, "queue.db"))
	require.Contains(t, c.ok("queue", "stats", "--path", filepath.Join(state, "queue.db")), "pending       0")
}

func TestOplogTailFollow(t *testing.T) {
	ts := startServer(t, serverOptions{clock: fakeclock.New(t0)})
	c := newCLI(t, ts.adminEnv())
	out, outErr, stop := c.background("oplog", "tail", "--follow", "--interval", "5ms")
	outJSON, _, stopJSON := c.background("oplog", "tail", "--follow", "--interval", "5ms", "--json", "--model", "docs")
	require.Eventually(t, func() bool { return strings.HasPrefix(out.String(), "     SEQ") }, ioTimeout, 5*time.Millisecond, "stderr: %s", outErr)

	s := ts.dial(t, 0)
	s.push(write(1, syncproto.OpPut, "notes", "a", `1`, t0.Add(-2*time.Second), nil))
	require.Eventually(t, func() bool { return strings.Contains(out.String(), opID(1)) }, ioTimeout, 5*time.Millisecond)
	s.push(write(2, syncproto.OpPut, "docs", "d", `2`, t0.Add(-time.Second), version(0)), write(3, syncproto.OpDelete, "notes", "a", "", t0, nil))
	require.Eventually(t, func() bool { return strings.Contains(out.String(), opID(3)) }, ioTimeout, 5*time.Millisecond)
	require.NoError(t, stop(), "an interrupt is --follow's normal end")
	requireGolden(t, "oplog_tail_follow", out.String())

	require.Eventually(t, func() bool { return strings.Contains(outJSON.String(), opID(2)) }, ioTimeout, 5*time.Millisecond)
	require.NoError(t, stopJSON())
	lines := strings.Split(strings.TrimSpace(outJSON.String()), "\n")
	require.Len(t, lines, 1, "only the docs entry: %s", outJSON)
	requireKeys(t, object(t, lines[0]), "seq", "op_id", "model", "key", "op", "value", "version", "hlc", "deleted", "tenant", "client_id", "applied_at")
}

// Without --from, oplog tail starts where a read of every tenant may: at
// or after the highest tenant floor (oplog_floor). With retention per
// tenant that floor can be above the oldest retained entry, and a start
// below it would be refused as outside the retained oplog.
func TestOplogTailStartsAtTheHighestTenantFloor(t *testing.T) {
	ts := startServer(t, serverOptions{oplogMaxEntries: 1})
	require.Equal(t, syncproto.StatusApplied, ts.dial(t, 0).push(write(1, syncproto.OpPut, "notes", "a", `1`, t0, nil))[0].Status)
	bot, err := auth.Issue(ts.tokenPath, auth.Principal{Tenant: "globex", ClientID: "bot", Read: []string{auth.Wildcard}, Write: []string{auth.Wildcard}}, t0)
	require.NoError(t, err)
	s := ts.dialAs(t, bot, "bot", 0)
	for n := 2; n <= 4; n++ {
		m := write(n, syncproto.OpPut, "notes", fmt.Sprint("b", n), `1`, t0, nil)
		m.HLC.Origin = "bot"
		require.Equal(t, syncproto.StatusApplied, s.push(m)[0].Status)
	}
	ts.waitForStatus(t, "globex compacted to its newest entry", func(st statusView) bool {
		return st.OplogFloor == 3 && st.OplogOldest == 1
	})
	out := newCLI(t, ts.adminEnv()).ok("oplog", "tail", "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 1, "the entries after the floor: globex's newest (%s)", out)
	require.Contains(t, lines[0], opID(4))
}

// The device credential token issue --credential prints is all put needs.
func TestSmallClientTakesACredential(t *testing.T) {
	ts := startServer(t, serverOptions{})
	admin := newCLI(t, map[string]string{"SYNCCTL_TOKENS": ts.tokenPath})
	credential := strings.TrimSpace(admin.ok("token", "issue", "--tenant", tenant, "--client-id", "tablet-1", "--read", "*", "--write", "*", "--credential"))
	require.True(t, strings.HasPrefix(credential, client.CredentialPrefix+"tablet-1@sdk_"), credential)

	c := newCLI(t, map[string]string{"SYNCCTL_SYNC_URL": ts.url, "SYNCCTL_CLIENT_CREDENTIAL": credential})
	require.Contains(t, c.ok("put", "notes", "a", `1`), "applied as version 1")
	requireOneLineError(t, c.run("put", "notes", "a", `2`, "--credential", "tablet-1"), exitUsage, "invalid credential")
}

// waitSynced stops at the server's first refusal with its exit status,
// instead of waiting out its timeout and calling the server unreachable.
func TestWaitSyncedStopsAtTheRefusal(t *testing.T) {
	ts := startServer(t, serverOptions{})
	for _, tc := range []struct {
		name, token, clientID string
	}{
		{"refused token", "sdk_000000000000_nope", clientID},
		{"token of another client id", ts.member, "someone-else"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
			require.NoError(t, err)
			c, err := client.Open(t.Context(), client.Config{ServerURLs: []string{ts.url}, Token: tc.token, ClientID: tc.clientID, Queue: q, ReplicaPath: filepath.Join(dir, "replica.db")})
			require.NoError(t, err)
			d := &device{c: c, url: ts.url, id: tc.clientID, dir: dir}
			defer d.Close()
			err = d.waitSynced(t.Context(), time.Hour)
			require.Equal(t, exitUnauthorized, ExitCode(err), "%v", err)
		})
	}
}

// watch ends, with the unauthorized exit status, when its token is revoked
// while it runs (a session's token is rechecked every second).
func TestWatchEndsWhenItsTokenIsRevoked(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := newCLI(t, map[string]string{"SYNCCTL_SYNC_URL": ts.url, "SYNCCTL_CLIENT_TOKEN": ts.member, "SYNCCTL_CLIENT_ID": clientID})
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	stderr := &syncdtest.Buffer{}
	done := make(chan error, 1)
	go func() { done <- c.app(&syncdtest.Buffer{}, stderr).run(ctx, []string{"watch"}) }()
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "watching") }, ioTimeout, 10*time.Millisecond, "watch never started: %s", stderr)

	revoked := time.Now()
	require.NoError(t, auth.Revoke(ts.tokenPath, strings.SplitN(ts.member, "_", 3)[1]))
	select {
	case err := <-done:
		require.Equal(t, exitUnauthorized, ExitCode(err), "watch: %v", err)
		require.ErrorContains(t, err, "refused the client token")
		t.Logf("watch ended %s after the revocation", time.Since(revoked).Round(time.Millisecond))
	case <-ctx.Done():
		t.Fatalf("watch kept running after its token was revoked: %s", stderr)
	}
}

// --url takes a cluster's nodes comma-separated: the first that answers
// serves; a list holding something that is not a URL is a usage error.
func TestSmallClientTakesSeveralURLs(t *testing.T) {
	ts := startServer(t, serverOptions{})
	c := newCLI(t, map[string]string{"SYNCCTL_CLIENT_TOKEN": ts.member, "SYNCCTL_CLIENT_ID": clientID})
	out := c.ok("put", "notes", "a", `1`, "--url", "http://"+syncdtest.FreeAddr(t)+","+ts.url)
	require.Contains(t, out, "outcome  applied")
	requireOneLineError(t, c.run("put", "notes", "b", `2`, "--url", ts.url+",notaurl"), exitUsage, "--url")
}
