package server_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// With one snapshot turn and tenant A's devices (each of a scope of its
// own, so none joins another's read) holding it one after the other
// without reading, tenant B's device, which asked after all of them, is
// given the turn after A's first: B's snapshot is served whole while A's
// second device holds the turn and its third still waits. (In arrival
// order B would wait for A's third, which never lets go.)
func TestSnapshotStormLeavesAnotherTenantATurn(t *testing.T) {
	ts := startServer(t, server.Config{MaxConcurrentSnapshots: 1})
	seedLarge(t, ts)
	other, clock := session(t, ts, ts.Member(t, "globex", "seeder"), "seeder")
	requireApplied(t, other.push("o1", put(t, clock, "notes", "theirs", `1`)))

	stalled := syncdtest.Get(t, ts.url+syncproto.SnapshotPath, ts.Member(t, "acme", "stalled"))
	defer stalled.Body.Close()
	require.Equal(t, http.StatusOK, stalled.StatusCode)

	// A's three devices wait, in order, each reading notes and a model of
	// its own (a scope of its own).
	const storm = 3
	turns := make([]chan *http.Response, storm)
	for i := range storm {
		turns[i] = make(chan *http.Response, 1)
		token := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: fmt.Sprintf("d%d", i), Read: []string{"notes", fmt.Sprintf("own%d", i)}})
		req := snapshotRequest(t, ts.url, token)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				close(turns[i])
				return
			}
			turns[i] <- resp
		}()
		require.Eventually(t, func() bool { return ts.Metric(t, "syncd_snapshots_waiting") == fmt.Sprint(i+1) }, ioTimeout, 10*time.Millisecond)
	}
	// B's device asks last.
	type fetched struct {
		records int
		err     error
	}
	served := make(chan fetched, 1)
	bToken := ts.Member(t, "globex", "reader")
	go func() {
		recs, err := fetchSnapshotRecords(ts.url, bToken)
		served <- fetched{len(recs), err}
	}()
	require.Eventually(t, func() bool { return ts.Metric(t, "syncd_snapshots_waiting") == fmt.Sprint(storm+1) }, ioTimeout, 10*time.Millisecond)
	require.Equal(t, fmt.Sprint(storm), ts.Metric(t, `syncd_snapshot_turns_waiting{tenant="acme"}`))
	require.Equal(t, "1", ts.Metric(t, `syncd_snapshot_turns_waiting{tenant="globex"}`))

	// The turn goes to A's first device, which holds it; then to B.
	stalled.Body.Close()
	first := receiveTurn(t, turns[0])
	first.Body.Close()
	select {
	case got := <-served:
		require.NoError(t, got.err)
		require.Equal(t, 1, got.records, "B's own record alone")
	case <-time.After(2 * ioTimeout):
		t.Fatal("B's device was not given a turn before A's later devices")
	}

	// Then A's second device holds the turn and its third waits.
	second := receiveTurn(t, turns[1])
	defer second.Body.Close()
	require.Equal(t, "1", ts.Metric(t, `syncd_snapshot_turns_waiting{tenant="acme"}`))
	require.Equal(t, "0", ts.Metric(t, `syncd_snapshot_turns_waiting{tenant="globex"}`))
	require.Equal(t, "3", ts.Metric(t, `syncd_snapshot_turns_total{tenant="acme"}`), "stalled, first, second")
	require.Equal(t, "1", ts.Metric(t, `syncd_snapshot_turns_total{tenant="globex"}`))
	second.Body.Close()
	third := receiveTurn(t, turns[2])
	third.Body.Close()
}

// receiveTurn waits for the response of a snapshot whose turn came and
// requires it 200.
func receiveTurn(t *testing.T, turn <-chan *http.Response) *http.Response {
	t.Helper()
	select {
	case resp, ok := <-turn:
		require.True(t, ok, "the snapshot request failed")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return resp
	case <-time.After(2 * ioTimeout):
		t.Fatal("a waiting snapshot was never given its turn")
		return nil
	}
}
