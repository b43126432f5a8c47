package main

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/internal/fakeclock"
	"github.com/syncd-dev/syncd/syncproto"
)

// seed pushes the golden scenario's writes as dev-a, after the aged write
// startServer made (seq 1, notes/aged, evicted from the ledger): two notes,
// an optimistic docs record with a stale second write (a conflict), an LWW
// write older than the record it targets (superseded) and a delete.
//
//	seq 2  put    notes/a  v1
//	seq 3  put    notes/b  v1
//	seq 4  put    docs/d   v1
//	       put    docs/d   base 0: conflict with v1
//	       put    notes/a  older hlc: superseded by v1
//	seq 5  delete notes/b  v2
func seed(t testing.TB, ts *testServer) {
	t.Helper()
	s := ts.dial(t, 0)
	defer s.close()
	res := s.push(
		write(1, syncproto.OpPut, "notes", "a", `{"title":"first"}`, t0.Add(-10*time.Second), nil),
		write(2, syncproto.OpPut, "notes", "b", `{"title":"second"}`, t0.Add(-9*time.Second), nil),
		write(3, syncproto.OpPut, "docs", "d", `{"rev":1}`, t0.Add(-8*time.Second), version(0)),
		write(4, syncproto.OpPut, "docs", "d", `{"rev":2}`, t0.Add(-7*time.Second), version(0)),
		write(5, syncproto.OpPut, "notes", "a", `{"title":"late"}`, t0.Add(-20*time.Second), nil),
		write(6, syncproto.OpDelete, "notes", "b", "", t0.Add(-5*time.Second), nil),
	)
	var statuses []syncproto.Status
	for _, r := range res {
		statuses = append(statuses, r.Status)
	}
	require.Equal(t, []syncproto.Status{"applied", "applied", "applied", "conflict", "superseded", "applied"}, statuses)
}

var (
	remotePort = regexp.MustCompile(`127\.0\.0\.1:\d+`)
	// The build and the database id differ per build and per run.
	buildLine    = regexp.MustCompile(`(?m)^(build\s+)\S.*$`)
	databaseLine = regexp.MustCompile(`(?m)^(database\s+)\S.*$`)
	// schemaLine's version moves with every migration of the database.
	schemaLine = regexp.MustCompile(`(?m)^(schema\s+version )\d+$`)
)

func TestAdminCommandsGolden(t *testing.T) {
	ts := startServer(t, serverOptions{clock: fakeclock.New(t0), retention: true})
	seed(t, ts)
	ts.waitForStatus(t, "a ledger floor", func(st statusView) bool { return !st.LedgerFloor.IsZero() })
	ts.dial(t, 3) // a connected client two entries behind the head
	ts.waitForStatus(t, "one session", func(st statusView) bool { return st.Connections == 1 })
	memberID := strings.SplitN(ts.member, "_", 3)[1]
	c := newCLI(t, ts.adminEnv())

	for _, tc := range []struct {
		name string
		args []string
	}{
		{"status", []string{"status"}},
		{"clients", []string{"clients"}},
		{"oplog_tail", []string{"oplog", "tail"}},
		{"oplog_tail_model", []string{"oplog", "tail", "--model", "docs"}},
		{"oplog_tail_from", []string{"oplog", "tail", "--from", "3"}},
		{"conflicts_ls", []string{"conflicts", "ls"}},
		{"conflicts_ls", []string{"conflicts"}}, // the group alone lists
		{"oplog_tail", []string{"oplog"}},       // the group alone tails
		{"oplog_tail", []string{"oplog", "tail", "-n", "10"}},
		{"ledger_get_applied", []string{"ledger", "get", opID(1), "--tenant", tenant}},
		{"ledger_get_conflict", []string{"ledger", "get", opID(4), "--tenant", tenant}},
		{"ledger_get_superseded", []string{"ledger", "get", opID(5), "--tenant", tenant}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := c.ok(tc.args...)
			out = strings.ReplaceAll(out, memberID, "tokenid00001")
			out = remotePort.ReplaceAllString(out, "127.0.0.1:PORT")
			out = buildLine.ReplaceAllString(out, "${1}BUILD")
			out = databaseLine.ReplaceAllString(out, "${1}DATABASE-ID")
			out = schemaLine.ReplaceAllString(out, "${1}N")
			requireGolden(t, tc.name, out)
		})
	}

	t.Run("ledger_get_unknown", func(t *testing.T) {
		r := c.run("ledger", "get", opID(99), "--tenant", tenant)
		require.Equal(t, exitNotFound, r.code)
		require.Equal(t, "syncctl: op "+opID(99)+" has no decision in tenant acme's ledger\n", r.stderr)
		requireGolden(t, "ledger_get_unknown", r.stdout)
	})
}

// queueFixture builds a device queue with the fixture's items at path:
//
//	1  put notes/x                       pending
//	2  put docs/y if v3                  pending, 2 attempts
//	3  put secret/z                      dead: forbidden_model
//	4  an opaque payload                 pending
//	5  delete notes/w                    dead: expired
func queueFixture(t testing.TB, format queueFormat, path string) {
	t.Helper()
	ctx := context.Background()
	opts := offlinequeue.Options{Now: func() time.Time { return t0.Add(-time.Hour) }}
	var q offlinequeue.Queue
	var err error
	if format == formatSQLite {
		q, err = offlinequeue.OpenSQLite(path, offlinequeue.SQLiteOptions{Options: opts})
	} else {
		q, err = offlinequeue.OpenFile(path, offlinequeue.FileOptions{Options: opts})
	}
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Close()) }()
	enqueue(t, q, write(11, syncproto.OpPut, "notes", "x", `{"v":1}`, t0.Add(-time.Hour), nil))
	y := enqueue(t, q, write(12, syncproto.OpPut, "docs", "y", `{"v":2}`, t0.Add(-time.Hour), version(3)))
	require.NoError(t, q.SetAttempts(ctx, y, 2))
	z := enqueue(t, q, write(13, syncproto.OpPut, "secret", "z", `{"v":3}`, t0.Add(-time.Hour), nil))
	require.NoError(t, q.SetAttempts(ctx, z, 5))
	require.NoError(t, q.MoveToDeadLetters(ctx, z, "forbidden_model: this token may not write model secret"))
	_, err = q.Enqueue(ctx, []byte("opaque bytes"), "k-4")
	require.NoError(t, err)
	w := enqueue(t, q, write(15, syncproto.OpDelete, "notes", "w", "", t0.Add(-time.Hour), nil))
	require.NoError(t, q.SetAttempts(ctx, w, 1))
	require.NoError(t, q.MoveToDeadLetters(ctx, w, "expired: older than the replay ledger covers"))
}

var byteCount = regexp.MustCompile(`\d+ bytes`)

func TestQueueCommandsGolden(t *testing.T) {
	for _, format := range []queueFormat{formatNDJSON, formatSQLite} {
		t.Run(string(format), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "device.queue")
			queueFixture(t, format, path)
			c := newCLI(t, nil)
			norm := func(s string) string {
				return byteCount.ReplaceAllString(strings.ReplaceAll(s, path, "$QUEUE"), "N bytes")
			}
			before := snapshotDir(t, dir)
			requireGolden(t, "queue_stats_"+string(format), norm(c.ok("queue", "stats", "--path", path)))
			// Listings are the same whatever the format.
			requireGolden(t, "queue_ls", norm(c.ok("queue", "ls", "--path", path)))
			requireGolden(t, "queue_dead", norm(c.ok("queue", "dead", "--path", path)))
			// The file is the subject: it may be the argument instead of --path.
			for _, sub := range []string{"stats", "ls", "dead"} {
				require.Equal(t, c.ok("queue", sub, "--path", path), c.ok("queue", sub, path), sub)
			}
			requireOneLineError(t, c.run("queue", "stats", path, "--path", path+".other"), exitUsage, "the queue file is given twice")
			requireOneLineError(t, c.run("queue", "stats"), exitUsage, "name the device's queue file")

			r := c.run("queue", "ls", "--path", path, "--limit", "2")
			require.NoError(t, r.err)
			requireGolden(t, "queue_ls_page", norm(r.stdout))
			require.Equal(t, "more items follow: --after 2 for the next page, --limit 0 for all\n", r.stderr)
			requireGolden(t, "queue_ls_next_page", norm(c.ok("queue", "ls", "--path", path, "--after", "2")))
			require.Equal(t, before, snapshotDir(t, dir), "reading a queue changes no file")

			requireGolden(t, "queue_requeue", norm(c.ok("queue", "requeue", "--path", path, "3")))
			requireGolden(t, "queue_purge", norm(c.ok("queue", "purge", "--path", path, "--all")))
			requireGolden(t, "queue_ls_after", norm(c.ok("queue", "ls", "--path", path)))
		})
	}
}

func TestTokenCommandsGolden(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	c := newCLI(t, map[string]string{"SYNCCTL_TOKENS": path})

	r := c.run("token", "issue", "--admin")
	require.NoError(t, r.err)
	admin := strings.TrimSpace(r.stdout)
	require.Regexp(t, `^sda_[0-9a-f]{12}_\S+$`, admin, "admin tokens have their own prefix")
	adminID := strings.SplitN(admin, "_", 3)[1]
	require.Equal(t, "issued token "+adminID+" for an admin token in "+path+"; it is shown only this once\n", r.stderr)

	member := strings.TrimSpace(c.ok("token", "issue", "--tenant", "acme", "--client-id", "phone-1", "--user", "alice", "--read", "*", "--write", "notes,docs"))
	memberID := strings.SplitN(member, "_", 3)[1]

	norm := func(s string) string {
		return strings.NewReplacer(adminID, "admin0000001", memberID, "member000001").Replace(s)
	}
	requireGolden(t, "token_ls", norm(c.ok("token", "ls")))
	requireGolden(t, "token_revoke", norm(c.ok("token", "revoke", adminID)))
	requireGolden(t, "token_ls_after_revoke", norm(c.ok("token", "ls")))
}
