package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/internal/fakeclock"
	"github.com/syncd-dev/syncd/syncproto"
)

// The --json output of every command decodes strictly into its documented
// Go type, and its objects carry exactly the documented keys.

func TestAdminCommandsJSON(t *testing.T) {
	ts := startServer(t, serverOptions{clock: fakeclock.New(t0), retention: true})
	seed(t, ts)
	ts.waitForStatus(t, "a ledger floor", func(st statusView) bool { return !st.LedgerFloor.IsZero() })
	ts.dial(t, 3)
	ts.waitForStatus(t, "one session", func(st statusView) bool { return st.Connections == 1 })
	c := newCLI(t, ts.adminEnv())

	t.Run("status", func(t *testing.T) {
		out := c.ok("status", "--json")
		var v statusView
		decodeStrict(t, out, &v)
		require.Equal(t, uint64(5), v.OplogHead)
		require.Equal(t, int64(2), v.LatestConflictID)
		requireKeys(t, object(t, out), "node_id", "build", "database_id", "schema_version", "started_at", "uptime_seconds", "connections", "draining", "oplog_head", "oplog_oldest", "oplog_floor",
			"ledger_entries", "ledger_floor", "max_client_lag_entries", "latest_conflict_id", "latest_conflict_at")
	})
	t.Run("clients", func(t *testing.T) {
		out := c.ok("clients", "--json")
		var v []adminapi.Session
		decodeStrict(t, out, &v)
		require.Len(t, v, 1)
		require.Equal(t, clientID, v[0].ClientID)
		requireKeys(t, objects(t, out)[0], "client_id", "tenant", "token_id", "remote", "connected_at", "cursor", "subscribed", "pending_pushes", "last_push_at", "last_push_ops")
	})
	t.Run("oplog tail", func(t *testing.T) {
		out := c.ok("oplog", "tail", "--json")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 5, "one JSON object per entry")
		for _, line := range lines {
			var e adminapi.OplogEntry
			decodeStrict(t, line, &e)
		}
		requireKeys(t, object(t, lines[0]), "seq", "op_id", "model", "key", "op", "value", "version", "hlc", "deleted", "tenant", "client_id", "applied_at")
		requireKeys(t, object(t, lines[4]), "seq", "op_id", "model", "key", "op", "version", "hlc", "deleted", "tenant", "client_id", "applied_at")
	})
	t.Run("conflicts ls", func(t *testing.T) {
		out := c.ok("conflicts", "ls", "--json")
		var v []adminapi.Conflict
		decodeStrict(t, out, &v)
		require.Len(t, v, 2)
		requireKeys(t, objects(t, out)[0], "id", "tenant", "model", "key", "policy", "reason", "loser", "winner", "decided_at")
	})
	t.Run("ledger get", func(t *testing.T) {
		out := c.ok("ledger", "get", opID(1), "--tenant", tenant, "--json")
		var v adminapi.LedgerAnswer
		decodeStrict(t, out, &v)
		require.True(t, v.Found)
		require.Equal(t, syncproto.StatusApplied, v.Result.Status)
		requireKeys(t, object(t, out), "tenant", "op_id", "found", "op_time", "decided_at", "result", "floor", "client_id")

		r := c.run("ledger", "get", opID(99), "--tenant", tenant, "--json")
		require.Equal(t, exitNotFound, r.code, "not found is exit status 5, with the answer still printed")
		requireKeys(t, object(t, r.stdout), "tenant", "op_id", "found", "floor")
	})
}

func TestQueueCommandsJSON(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "device.db")
	queueFixture(t, formatSQLite, path)
	c := newCLI(t, nil)

	var stats queueStatsView
	out := c.ok("queue", "stats", "--path", path, "--json")
	decodeStrict(t, out, &stats)
	require.Equal(t, queueStatsView{Path: path, Format: formatSQLite, FileBytes: stats.FileBytes, Pending: 3, DeadLetters: 2,
		OldestPendingAt: t0.Add(-time.Hour), OldestDeadAt: t0.Add(-time.Hour)}, stats)
	requireKeys(t, object(t, out), "path", "format", "file_bytes", "pending", "dead_letters", "oldest_pending_at", "oldest_dead_at")

	var items []itemView
	out = c.ok("queue", "ls", "--path", path, "--json")
	decodeStrict(t, out, &items)
	require.Len(t, items, 3)
	listed := objects(t, out)
	requireKeys(t, listed[1], "id", "key", "attempts", "enqueued_at", "payload_bytes", "write")
	requireKeys(t, listed[1]["write"].(map[string]any), "op_id", "model", "key", "op", "base_version", "hlc")
	requireKeys(t, listed[2], "id", "key", "attempts", "enqueued_at", "payload_bytes", "payload_error")

	var dead []deadView
	out = c.ok("queue", "dead", "--path", path, "--json")
	decodeStrict(t, out, &dead)
	require.Len(t, dead, 2)
	requireKeys(t, objects(t, out)[0], "id", "key", "attempts", "enqueued_at", "payload_bytes", "write", "reason", "dead_at")

	var rq requeueReport
	out = c.ok("queue", "requeue", "--path", path, "--all", "--json")
	decodeStrict(t, out, &rq)
	require.Equal(t, requeueReport{Path: path, Selected: 2, Requeued: 2, Pending: 5}, rq)
	requireKeys(t, object(t, out), "path", "selected", "requeued", "dropped", "pending", "dead_letters", "interrupted")

	var pr purgeReport
	decodeStrict(t, c.ok("queue", "purge", "--path", path, "--all", "--json"), &pr)
	require.Equal(t, purgeReport{Path: path, Pending: 5}, pr)
}

func TestTokenCommandsJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	c := newCLI(t, map[string]string{"SYNCCTL_TOKENS": path})

	var issued issuedView
	out := c.ok("token", "issue", "--tenant", "acme", "--client-id", "phone-1", "--read", "*", "--write", "notes", "--json")
	decodeStrict(t, out, &issued)
	require.True(t, strings.HasPrefix(issued.Token, "sdk_"+issued.TokenID+"_"))
	require.Equal(t, t0, issued.CreatedAt)
	requireKeys(t, object(t, out), "id", "tenant", "client_id", "read", "write", "created_at", "token", "credential")
	require.Equal(t, client.FormatCredential("phone-1", issued.Token), issued.Credential)

	var listed []tokenView
	out = c.ok("token", "ls", "--json")
	decodeStrict(t, out, &listed)
	require.Equal(t, []tokenView{{Principal: issued.Principal, CreatedAt: t0}}, listed)
	require.NotContains(t, out, strings.SplitN(issued.Token, "_", 3)[2], "ls never shows a secret")
	require.NotContains(t, out, "sha256", "nor its hash")

	var revoked revokedView
	decodeStrict(t, c.ok("token", "revoke", issued.TokenID, "--json"), &revoked)
	require.Equal(t, issued.TokenID, revoked.Revoked)
}
