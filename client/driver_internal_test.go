package client

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/synccore"
	"github.com/syncd-dev/syncd/syncproto"
)

// A push filled to the budget, with the largest payloads and re-stamped
// with the longest timestamps, still encodes within the frame limit.
func TestPushBudgetFitsFrame(t *testing.T) {
	limits := syncproto.DefaultLimits()
	budget := pushBytes(limits)
	require.Equal(t, syncproto.MaxFrameBytes-pushEnvelope, budget)
	limits.MaxFrameBytes = 1 << 20
	require.Equal(t, 1<<20-pushEnvelope, pushBytes(limits), "a tighter announced limit is honoured")

	// Plain values, which Marshal (the queue) and Encode (the wire) write
	// alike, so only the re-stamp can make a mutation longer on the wire.
	value, err := json.Marshal(strings.Repeat("x", syncproto.MaxPayloadBytes-64))
	require.NoError(t, err)
	var muts []syncproto.Mutation
	size := 0
	for i := 0; ; i++ {
		op, err := syncproto.NewOpID()
		require.NoError(t, err)
		m := syncproto.Mutation{OpID: op, Model: "notes", Key: fmt.Sprintf("k%d", i), Op: syncproto.OpPut, Value: value,
			HLC: syncproto.Timestamp{Wall: 1_733_140_000_000, Origin: "phone-1"}}
		payload, err := json.Marshal(m)
		require.NoError(t, err)
		if !synccore.FitsPush(len(muts), size, len(payload), syncproto.MaxBatch, budget) {
			break
		}
		size += len(payload) + synccore.MutationSlack
		m.HLC = syncproto.Timestamp{Wall: syncproto.MaxWall, Logical: 1<<32 - 1, Origin: "phone-1"}
		muts = append(muts, m)
	}
	require.Greater(t, len(muts), 1)
	frame, err := syncproto.Encode(&syncproto.Push{ID: strings.Repeat("r", syncproto.MaxRequestIDBytes), Mutations: muts})
	require.NoError(t, err)
	require.LessOrEqual(t, len(frame), syncproto.MaxFrameBytes)

	require.True(t, synccore.FitsPush(0, 0, budget*2, syncproto.MaxBatch, budget), "an empty push takes any one write")
	require.False(t, synccore.FitsPush(syncproto.MaxBatch, 0, 1, syncproto.MaxBatch, budget), "the batch limit holds")
}

// Frames of a subscription replaced since (an older subscribe's id) are
// ignored: its backfill pages and evictions may follow a request the app
// has changed.
func TestFramesOfAReplacedSubscriptionAreIgnored(t *testing.T) {
	d := &driver{subID: "s2", subFrom: 7}
	page := &syncproto.Backfill{ID: "s1", Scope: "project", Value: "p1", Done: true}
	require.Nil(t, d.feedInput(page))
	require.Nil(t, d.feedInput(&syncproto.Changes{ID: "s1", Cursor: 9, Head: 9, Evictions: []syncproto.Eviction{{Scope: "project", Value: "p2", Reason: syncproto.EvictUnsubscribed}}}))
	page.ID = "s2"
	require.Equal(t, synccore.Backfill{Scope: "project", Value: "p1", Done: true}, d.feedInput(page))
	ev := []syncproto.Eviction{{Scope: "project", Value: "p2", Reason: syncproto.EvictRevoked}}
	require.Equal(t, synccore.Changes{From: 7, Next: 7, Evictions: ev}, d.feedInput(&syncproto.Changes{ID: "s2", Cursor: 7, Head: 9, Evictions: ev}))
}
