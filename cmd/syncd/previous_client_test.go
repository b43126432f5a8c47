package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
)

// previousRelease is the commit of the release before this one
// (testdata/previous-release): the client library devices in the field
// run.
func previousRelease(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "previous-release"))
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

// buildPreviousNotes builds the example app of the previous release from
// the repository's own history, so its client library is exactly what that
// release shipped.
func buildPreviousNotes(t *testing.T) string {
	t.Helper()
	return buildAtCommit(t, previousRelease(t), "./examples/notes")
}

// buildAtCommit builds the package pkg (relative to the module root) as it
// was at commit rev, from a detached git worktree of the repository's own
// history, and returns the binary's path. Both go away when t ends.
func buildAtCommit(t *testing.T, rev, pkg string) string {
	t.Helper()
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	run := func(d string, name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = d
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s %v: %s", name, args, out)
	}
	run("..", "git", "worktree", "add", "--detach", "--quiet", tree, rev)
	t.Cleanup(func() { _ = exec.Command("git", "-C", "..", "worktree", "remove", "--force", tree).Run() })
	bin := filepath.Join(dir, filepath.Base(pkg)+"-"+rev[:min(len(rev), 7)])
	run(tree, "go", "build", "-o", bin, pkg)
	return bin
}

// TestPreviousReleaseClientSyncsWithThisServer: devices running the client
// library of the previous release (its example app, built from git
// history) keep working against this server: they write offline and
// online, replay, read each other's writes and this release's client's,
// and nothing is lost or refused (PROTOCOL.md section 18: a server serves
// the previous and the current client at once).
func TestPreviousReleaseClientSyncsWithThisServer(t *testing.T) {
	notes := buildPreviousNotes(t)
	s := syncdtest.Start(t, server.Config{})
	// device returns a runner of the previous notes app as one device,
	// with its own token and its own queue and replica directory.
	device := func(name string) func(args ...string) string {
		token, dir := s.Member(t, "shop", name), filepath.Join(t.TempDir(), name)
		return func(args ...string) string {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			all := append([]string{"--server", s.URL, "--token", token, "--client-id", name, "--dir", dir, "--wait", "30s"}, args...)
			out, err := exec.CommandContext(ctx, notes, all...).CombinedOutput()
			require.NoError(t, err, "previous notes %v: %s", args, out)
			return string(out)
		}
	}
	oldA := device("phone")
	oldA("add", "milk", "two litres")
	oldA("add", "eggs", "a dozen")
	oldA("rm", "eggs")
	oldA("add", "bread", "rye")
	oldA("sync")

	// This release's client sees the previous one's writes, and writes one.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	queue, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
	require.NoError(t, err)
	c, err := client.Open(ctx, client.Config{ServerURLs: []string{s.URL}, Token: s.Member(t, "shop", "laptop"), ClientID: "laptop",
		Queue: queue, ReplicaPath: filepath.Join(dir, "replica.db")})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.Sync(ctx))
	rec, ok, err := c.Get(ctx, "notes", "milk")
	require.NoError(t, err)
	require.True(t, ok)
	require.JSONEq(t, `{"text":"two litres"}`, string(rec.Value))
	_, ok, err = c.Get(ctx, "notes", "eggs")
	require.NoError(t, err)
	require.False(t, ok, "the previous client's delete applied")
	op, err := c.Put(ctx, "notes", "tea", []byte(`{"text":"green"}`))
	require.NoError(t, err)
	_, err = c.Await(ctx, op)
	require.NoError(t, err)

	// Another device of the previous release reads everything.
	tablet := device("tablet")
	tablet("sync")
	listing := tablet("ls")
	for _, want := range []string{"milk", "bread", "tea"} {
		require.Contains(t, listing, want)
	}
	require.NotContains(t, listing, "eggs")
}
