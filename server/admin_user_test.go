package server_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncproto"
)

// TestAdminShowsTheUserOfADevice: the oplog, the ledger and the conflict
// log name the user whose device namespace holds the writer's client id,
// though none of them stores a user.
func TestAdminShowsTheUserOfADevice(t *testing.T) {
	ts := startJWTServer(t, server.Config{}, nil)
	alice, aliceClock := session(t, ts.testServer, ts.idp.Token("ES256", "alice", "acme", time.Minute), "alice:phone")
	bob, bobClock := session(t, ts.testServer, ts.idp.Token("ES256", "bob", "acme", time.Minute), "bob:phone")
	older := put(t, bobClock, "notes", "k", `"bob"`) // a second older, sent last
	older.HLC.Wall -= 1000
	newer := put(t, aliceClock, "notes", "k", `"alice"`)
	requireApplied(t, alice.push("p1", newer))
	require.Equal(t, syncproto.StatusSuperseded, bob.push("p1", older)[0].Status)

	entries := ts.Oplog(t, "&tenant=acme")
	require.Len(t, entries, 1)
	require.Equal(t, "alice:phone", entries[0].ClientID)
	require.Equal(t, "alice", entries[0].User)

	var ans adminapi.LedgerAnswer
	require.Equal(t, http.StatusOK, ts.adminGet(t, adminapi.LedgerPath(newer.OpID)+"?tenant=acme", ts.adminToken, &ans))
	require.Equal(t, "alice:phone", ans.ClientID)
	require.Equal(t, "alice", ans.User)

	var conflicts []adminapi.Conflict
	require.Equal(t, http.StatusOK, ts.adminGet(t, adminapi.PathConflicts+"?tenant=acme", ts.adminToken, &conflicts))
	require.Len(t, conflicts, 1)
	require.Equal(t, "bob", conflicts[0].Loser.User)
	require.Equal(t, "bob:phone", conflicts[0].Loser.ClientID)
	require.Equal(t, "alice", conflicts[0].Winner.User)
}
