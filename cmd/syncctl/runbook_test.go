package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/datalock"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// runbook returns the syncctl commands of the runbook named name in
// docs/operations.md (a fenced block after <!-- runbook: name -->), one
// argument list a command, comments left out.
func runbook(t *testing.T, name string) [][]string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- runbook: " + regexp.QuoteMeta(name) + " -->\n```sh\n(.*?)```\n<!-- end runbook -->").FindSubmatch(doc)
	require.NotNil(t, m, "docs/operations.md has no runbook %q", name)
	var cmds [][]string
	for line := range strings.Lines(string(m[1])) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		words := strings.Fields(line)
		require.Equal(t, "syncctl", words[0], "the runbook runs syncctl only: %s", line)
		cmds = append(cmds, words[1:])
	}
	return cmds
}

// The backup and restore runbook of docs/operations.md section 4, run as
// written against a real syncd, its paths moved under a test directory: the
// backup is taken while syncd runs and is private; restore is refused while
// syncd holds the database; once syncd is stopped (cleanly: no -wal or
// -shm left), restore moves the old database into a directory it creates,
// and syncd serves the backup's records under a new database id.
func TestBackupAndRestoreRunbook(t *testing.T) {
	root := t.TempDir()
	cmds := runbook(t, "backup and restore")
	require.Len(t, cmds, 2, "backup, then restore")
	for _, c := range cmds {
		for i, w := range c {
			c[i] = strings.NewReplacer("/var/lib/syncd", filepath.Join(root, "var/lib/syncd"), "/backup", filepath.Join(root, "backup")).Replace(w)
		}
	}
	require.NoError(t, os.MkdirAll(filepath.Join(root, "var/lib/syncd"), 0o700))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "backup"), 0o700))
	data := filepath.Join(root, "var/lib/syncd/syncd.db")

	srv := syncdtest.Start(t, server.Config{DataPath: data})
	// What cmd/syncd does at start: hold the database's lock while serving.
	lock, err := datalock.Acquire(data)
	require.NoError(t, err)
	ts := &testServer{srv: srv.Server, url: srv.URL, adminURL: srv.AdminURL, admin: srv.AdminToken, member: srv.Member(t, tenant, clientID)}
	s := ts.dial(t, 0)
	res := s.push(write(1, syncproto.OpPut, "notes", "kept", `{"v":1}`, t0, nil))
	s.close()
	require.Equal(t, syncproto.StatusApplied, res[0].Status)
	before := srv.Status(t)

	c := newCLI(t, nil)
	out := c.ok(cmds[0]...)
	require.Contains(t, out, "mode 0600")
	backupFile := filepath.Join(root, "backup/syncd-20250601T1200.db")
	fi, err := os.Stat(backupFile)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "a backup holds every tenant's data")
	entries, err := os.ReadDir(filepath.Join(root, "backup"))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no work file left beside the backup")

	r := c.run(cmds[1]...)
	require.Equal(t, exitUsage, r.code, "restore while syncd runs: %s", r.stderr)
	require.Contains(t, r.stderr, "syncd is running on it")
	require.FileExists(t, data, "a refused restore moved nothing")

	srv.Stop(t)
	require.NoError(t, lock.Release())
	require.NoFileExists(t, data+"-wal", "a clean stop leaves no -wal: the runbook must not need one")
	c.ok(cmds[1]...)
	aside := filepath.Join(root, "var/lib/syncd/before-restore")
	fi, err = os.Stat(aside)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
	require.FileExists(t, filepath.Join(aside, "syncd.db"))

	srv.Restart(t)
	after := srv.Status(t)
	require.NotEqual(t, before.DatabaseID, after.DatabaseID, "a restored database has a new id")
	require.Equal(t, before.OplogHead, after.OplogHead, "the backup's writes are served")
	_, records := srv.Snapshot(t, ts.member)
	require.Len(t, records, 1)
	require.Equal(t, "kept", records[0].Key)
}

func TestBackupRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	srv := syncdtest.Start(t, server.Config{DataPath: filepath.Join(dir, "syncd.db")})
	existing := filepath.Join(dir, "existing.db")
	require.NoError(t, os.WriteFile(existing, []byte("keep me"), 0o600))
	c := newCLI(t, nil)
	requireOneLineError(t, c.run("backup", "--data", srv.DataPath, "--out", existing), exitUsage, "never replaces a file")
	body, err := os.ReadFile(existing)
	require.NoError(t, err)
	require.Equal(t, "keep me", string(body))
	requireOneLineError(t, c.run("backup", "--data", filepath.Join(dir, "missing.db"), "--out", filepath.Join(dir, "b.db")), exitNotFound, "does not exist")
	requireOneLineError(t, c.run("backup", "--data", dir, "--out", filepath.Join(dir, "b.db")), exitBadFile, "not a regular file")
	requireOneLineError(t, c.run("backup", "--data", existing, "--out", filepath.Join(dir, "b.db")), exitBadFile, existing)
	require.NoFileExists(t, filepath.Join(dir, "b.db"))
}
