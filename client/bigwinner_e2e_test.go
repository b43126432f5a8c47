package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncproto"
)

// One batch of writes, each refused against a winner of nearly
// max_payload_bytes: together the winners exceed a frame, so the server
// leaves their values out of the answer (PROTOCOL.md 5.4). The client
// fetches each by resending the op alone, so the conflict handler still
// sees every winner whole, and the replica converges with the server.
func TestConflictHandlerSeesLargeWinnersWhole(t *testing.T) {
	const model, keys = "docs", 18 // 18 winners of ~256 KiB: about 4.5 MiB
	s := startSyncd(t, server.Config{Policies: replication.Config{model: syncproto.PolicyOptimistic}})
	conflicts := make(chan client.Conflict, keys)
	drop := func(_ context.Context, c client.Conflict) client.Resolution {
		conflicts <- c
		return client.Drop()
	}
	a := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-a", deviceOptions{})
	b := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-b", deviceOptions{tweak: func(c *client.Config) { c.ConflictHandler = drop }})
	key := func(i int) string { return fmt.Sprintf("d%d", i) }
	big := func(i int) string {
		return `"` + strings.Repeat(string(rune('a'+i)), syncproto.MaxPayloadBytes-64) + `"`
	}

	b.offline()
	var mine []string
	for i := range keys {
		op, err := b.PutIfVersion(t.Context(), model, key(i), json.RawMessage(`"from b"`), 0)
		require.NoError(t, err)
		mine = append(mine, op)
	}
	var theirs []string
	for i := range keys {
		op, err := a.PutIfVersion(t.Context(), model, key(i), json.RawMessage(big(i)), 0)
		require.NoError(t, err)
		theirs = append(theirs, op)
	}
	a.requireApplied(t, theirs)

	b.online()
	for i, op := range mine {
		o := b.await(t, op)
		require.Equal(t, client.StatusConflict, o.Status, "write %d", i)
	}
	require.Len(t, conflicts, keys, "the handler decides each conflict once")
	for range keys {
		c := <-conflicts
		var i int
		_, err := fmt.Sscanf(c.Key, "d%d", &i)
		require.NoError(t, err)
		require.False(t, c.Winner.ValueOmitted, "%s: the handler got a winner without its value", c.Key)
		require.Equal(t, uint64(1), c.Winner.Version)
		require.Equal(t, big(i), string(c.Winner.Value), "%s: winner value", c.Key)
	}
	require.Positive(t, metric(t, s.Registry, "syncd_winner_values_omitted_total"), "the batch's answer left no value out")
	require.Eventually(t, func() bool { return b.convergesWithServer(t, s, model) }, waitFor, pollTick)
}
