package main

import (
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// requireOneLineError checks that a run failed with code and said so in
// one line on stderr, mentioning each of mention, with nothing on stdout.
func requireOneLineError(t testing.TB, r result, code int, mention ...string) {
	t.Helper()
	require.Error(t, r.err)
	require.Equal(t, code, r.code, "stderr: %s", r.stderr)
	require.Empty(t, r.stdout)
	require.True(t, strings.HasPrefix(r.stderr, "syncctl: "), r.stderr)
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	for _, m := range mention {
		require.Contains(t, r.stderr, m)
	}
}

// badQueueFiles writes one file of each bad kind into dir and returns their
// paths with the exit status each must give.
func badQueueFiles(t testing.TB, dir string) map[string]int {
	t.Helper()
	files := map[string]int{filepath.Join(dir, "missing.ndjson"): exitNotFound}
	write := func(name, body string) {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
		files[path] = exitBadFile
	}
	write("notes.txt", "hello, this is not a queue\n")
	write("empty.ndjson", "")
	write("other.json", `{"op":"put","id":1}`+"\n")
	write("corrupt.ndjson", `{"op":"header","format":"syncd-offlinequeue","version":1}`+"\n"+
		"this line is damaged\n"+
		`{"op":"put","id":1,"payload":"eA==","at":1}`+"\n")
	write("corrupt.db", "SQLite format 3\x00"+strings.Repeat("\xde\xad\xbe\xef", 1024))
	write("future.ndjson", `{"op":"header","format":"syncd-offlinequeue","version":99}`+"\n")

	foreign := filepath.Join(dir, "foreign.db")
	db, err := sql.Open("sqlite3", foreign)
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO accounts (name) VALUES ('x')`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	files[foreign] = exitBadFile

	// Issue 11: a FIFO must not hang syncctl, and a link must not be
	// followed (requeue would replace it with a regular file).
	fifo := filepath.Join(dir, "queue.fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	files[fifo] = exitBadFile
	link := filepath.Join(dir, "link.ndjson")
	require.NoError(t, os.Symlink("future.ndjson", link))
	files[link] = exitBadFile

	sub := filepath.Join(dir, "a-directory")
	require.NoError(t, os.Mkdir(sub, 0o700))
	files[sub] = exitBadFile
	return files
}

func TestBadQueueFilesFailCleanlyAndChangeNothing(t *testing.T) {
	dir := t.TempDir()
	files := badQueueFiles(t, dir)
	before := snapshotDir(t, dir)
	c := newCLI(t, map[string]string{"SYNCCTL_SERVER": "http://" + syncdtest.FreeAddr(t), "SYNCCTL_TOKEN": "sdk_000000000000_nope"})
	for path, code := range files {
		for _, args := range [][]string{
			{"queue", "stats"}, {"queue", "ls"}, {"queue", "dead"},
			{"queue", "requeue", "--all"}, {"queue", "purge", "--all"}, {"queue", "requeue", "1"},
			{"explain", "--tenant", tenant},
		} {
			r := c.run(append(args, "--path", path)...)
			requireOneLineError(t, r, code, path)
		}
	}
	require.Equal(t, before, snapshotDir(t, dir), "no file was created, changed or removed")
}

func TestBadQueueMessages(t *testing.T) {
	dir := t.TempDir()
	badQueueFiles(t, dir)
	c := newCLI(t, nil)
	for name, want := range map[string]string{
		"missing.ndjson": "does not exist",
		"notes.txt":      "is not a syncd queue",
		"corrupt.ndjson": "is a corrupt queue file: line 2",
		"corrupt.db":     "is a SQLite database but not a usable syncd queue",
		"foreign.db":     "is not a syncd offline queue",
		"future.ndjson":  "newer queue format",
	} {
		r := c.run("queue", "stats", "--path", filepath.Join(dir, name))
		require.Contains(t, r.stderr, want, name)
	}
}

func TestLockedQueueIsRefusedForChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "device.ndjson")
	q, err := offlinequeue.OpenFile(path, offlinequeue.FileOptions{})
	require.NoError(t, err)
	defer q.Close()
	id := enqueue(t, q, write(1, syncproto.OpPut, "notes", "a", `1`, t0, nil))
	require.NoError(t, q.MoveToDeadLetters(t.Context(), id, "invalid_key: x"))
	c := newCLI(t, nil)

	require.Contains(t, c.ok("queue", "dead", "--path", path), "invalid_key: x", "reading works beside a running client")
	r := c.run("queue", "requeue", "--path", path, "--all")
	requireOneLineError(t, r, exitBadFile, "in use")
}

func TestSelectionMistakesChangeNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "device.db")
	queueFixture(t, formatSQLite, path)
	before := snapshotDir(t, dir)
	c := newCLI(t, nil)
	requireOneLineError(t, c.run("queue", "requeue", "--path", path), exitUsage, "--all")
	requireOneLineError(t, c.run("queue", "requeue", "--path", path, "--all", "3"), exitUsage, "not both")
	requireOneLineError(t, c.run("queue", "purge", "--path", path, "3", "77"), exitNotFound, "no dead letter with id 77")
	requireOneLineError(t, c.run("queue", "requeue", "--path", path, "x"), exitUsage, `"x" is not an item id`)
	requireOneLineError(t, c.run("queue", "requeue", "--path", path, "--all", "--batch", "0"), exitUsage, "--batch")
	requireOneLineError(t, c.run("queue", "ls"), exitUsage, "name the device's queue file")
	requireOneLineError(t, c.run("queue", "requeue", "--all"), exitUsage, `required flag(s) "path" not set`)
	require.Equal(t, before, snapshotDir(t, dir))
}

func TestServerErrors(t *testing.T) {
	ts := startServer(t, serverOptions{})
	down := "http://" + syncdtest.FreeAddr(t)
	path := filepath.Join(t.TempDir(), "device.ndjson")
	queueFixture(t, formatNDJSON, path)
	before := snapshotDir(t, filepath.Dir(path))

	commands := [][]string{
		{"status"}, {"clients"}, {"oplog", "tail"}, {"oplog", "tail", "--follow"}, {"conflicts", "ls"},
		{"ledger", "get", opID(1), "--tenant", tenant}, {"explain", "--path", path, "--tenant", tenant},
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		code    int
		mention string
	}{
		{"wrong token", map[string]string{"SYNCCTL_SERVER": ts.adminURL, "SYNCCTL_TOKEN": "sdk_000000000000_wrong"}, exitUnauthorized, "refused the admin token"},
		{"client token", map[string]string{"SYNCCTL_SERVER": ts.adminURL, "SYNCCTL_TOKEN": ts.member}, exitUnauthorized, "refused the admin token"},
		{"unreachable", map[string]string{"SYNCCTL_SERVER": down, "SYNCCTL_TOKEN": ts.admin}, exitUnreachable, "is unreachable"},
		{"public listener", map[string]string{"SYNCCTL_SERVER": ts.url, "SYNCCTL_TOKEN": ts.admin}, exitUnreachable, "no syncd admin API"},
		{"no token", map[string]string{"SYNCCTL_SERVER": ts.adminURL}, exitUsage, "SYNCCTL_TOKEN"},
		{"bad url", map[string]string{"SYNCCTL_SERVER": "127.0.0.1:8081", "SYNCCTL_TOKEN": ts.admin}, exitUsage, "--server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t, tc.env)
			for _, args := range commands {
				requireOneLineError(t, c.run(args...), tc.code, tc.mention)
			}
		})
	}
	require.Equal(t, before, snapshotDir(t, filepath.Dir(path)), "explain changed nothing")

	t.Run("small client", func(t *testing.T) {
		state := filepath.Join(t.TempDir(), "state")
		for _, tc := range []struct {
			env  map[string]string
			code int
		}{
			{map[string]string{"SYNCCTL_SYNC_URL": ts.url, "SYNCCTL_CLIENT_TOKEN": "sdk_000000000000_wrong", "SYNCCTL_CLIENT_ID": clientID}, exitUnauthorized},
			{map[string]string{"SYNCCTL_SYNC_URL": ts.url, "SYNCCTL_CLIENT_TOKEN": ts.admin, "SYNCCTL_CLIENT_ID": clientID}, exitUnauthorized},
			{map[string]string{"SYNCCTL_SYNC_URL": ts.url, "SYNCCTL_CLIENT_TOKEN": ts.member, "SYNCCTL_CLIENT_ID": "someone-else"}, exitUnauthorized},
			{map[string]string{"SYNCCTL_SYNC_URL": down, "SYNCCTL_CLIENT_TOKEN": ts.member, "SYNCCTL_CLIENT_ID": clientID}, exitUnreachable},
			{map[string]string{"SYNCCTL_SYNC_URL": ts.url, "SYNCCTL_CLIENT_TOKEN": ts.member}, exitUsage},
		} {
			c := newCLI(t, tc.env)
			for _, args := range [][]string{{"put", "notes", "a", `1`}, {"get", "notes", "a"}, {"watch"}} {
				requireOneLineError(t, c.run(append(args, "--state", state)...), tc.code)
			}
		}
		require.NoDirExists(t, state, "nothing is written before the server accepted the token")
		c := newCLI(t, map[string]string{"SYNCCTL_SYNC_URL": ts.url, "SYNCCTL_CLIENT_TOKEN": ts.member, "SYNCCTL_CLIENT_ID": clientID})
		requireOneLineError(t, c.run("put", "notes", "a", "not json"), exitUsage, "VALUE must be JSON")
	})
}

func TestTokenFileErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.json")
	foreign := filepath.Join(dir, "foreign.json")
	require.NoError(t, os.WriteFile(foreign, []byte("{not json"), 0o600))
	good := filepath.Join(dir, "tokens.json")
	c := newCLI(t, map[string]string{"SYNCCTL_TOKENS": good})
	c.ok("token", "issue", "--admin")
	before := snapshotDir(t, dir)

	requireOneLineError(t, c.run("token", "ls", "--tokens", missing), exitNotFound, "does not exist")
	requireOneLineError(t, c.run("token", "revoke", "abc", "--tokens", missing), exitNotFound, "does not exist")
	requireOneLineError(t, c.run("token", "ls", "--tokens", foreign), exitBadFile, "not a token file")
	requireOneLineError(t, c.run("token", "issue", "--admin", "--tokens", foreign), exitBadFile, "not a token file")
	requireOneLineError(t, c.run("token", "revoke", "abc"), exitNotFound, "no token with id abc")
	requireOneLineError(t, c.run("token", "issue", "--tenant", "acme"), exitUsage, "client id")
	requireOneLineError(t, c.run("token", "issue", "--admin", "--tenant", "acme"), exitUsage, "admin token carries no tenant")
	requireOneLineError(t, c.run("token", "issue", "--admin", "--credential"), exitUsage, "for client tokens")
	require.Equal(t, before, snapshotDir(t, dir))
}

func TestUsageErrors(t *testing.T) {
	c := newCLI(t, nil)
	for _, args := range [][]string{
		{"bogus"}, {"queue"}, {"queue", "bogus"}, {"status", "--bogus"}, {"status", "extra"},
		{"ledger", "get"}, {"ledger", "get", "not-an-op-id", "--tenant", "t", "--token", "x"},
		{"ledger", "get", opID(1), "--token", "x"}, {"put", "notes"}, {"queue", "ls", "--path", "x", "--progress", "loud"},
	} {
		r := c.run(args...)
		require.Equal(t, exitUsage, r.code, "syncctl %s: %s", strings.Join(args, " "), r.stderr)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	}
	require.Equal(t, exitOK, c.run("--help").code)
	require.Equal(t, exitOK, c.run("queue", "requeue", "--help").code)
}

// Human output never passes data through raw: a key holding a
// bidirectional override is printed escaped, so a row cannot pretend to be
// another (JSON output keeps the exact key).
func TestHumanOutputEscapesData(t *testing.T) {
	ts := startServer(t, serverOptions{})
	hostile := "invoice\u202efdp.exe"
	s := ts.dial(t, 0)
	res := s.push(write(1, syncproto.OpPut, "notes", hostile, `"\u202e\u001b[2J"`, t0, nil))
	require.Equal(t, syncproto.StatusApplied, res[0].Status)

	c := newCLI(t, ts.adminEnv())
	out := c.ok("oplog", "tail")
	require.NotContains(t, out, "\u202e", "no raw bidi override")
	require.Contains(t, out, `notes/invoice\u202efdp.exe`)
	var entry struct{ Key string }
	require.NoError(t, json.Unmarshal([]byte(c.ok("oplog", "tail", "--json")), &entry))
	require.Equal(t, hostile, entry.Key, "JSON keeps the key exactly")
}
