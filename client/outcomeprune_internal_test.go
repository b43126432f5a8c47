package client

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// trimOutcomes keeps the newest decided outcomes and forgets the rest.
func TestTrimOutcomesKeepsTheNewest(t *testing.T) {
	forEachLayout(t, testTrimOutcomesKeepsTheNewest)
}

func testTrimOutcomesKeepsTheNewest(t *testing.T, r *replica) {
	base := time.Now()
	var ops []string
	for i := range 5 {
		m := testMutation(t, "k", `{"n":1}`)
		ops = append(ops, m.OpID)
		require.NoError(t, r.decide(t.Context(), m, Outcome{OpID: m.OpID, Status: StatusApplied, Version: uint64(i + 1), DecidedAt: base.Add(time.Duration(i) * time.Second)}))
	}
	n, err := r.trimOutcomes(t.Context(), 3)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	for i, op := range ops {
		_, found, err := r.outcome(t.Context(), op)
		require.NoError(t, err)
		require.Equal(t, i >= 2, found, "outcome %d", i)
	}
	n, err = r.trimOutcomes(t.Context(), 3)
	require.NoError(t, err)
	require.Zero(t, n, "nothing beyond the bound")
}

func TestOutcomePruneInterval(t *testing.T) {
	require.Equal(t, MaxOutcomePruneInterval, outcomePruneInterval(DefaultOutcomeRetention))
	require.Equal(t, 30*time.Minute, outcomePruneInterval(time.Hour))
	require.Equal(t, minOutcomePruneInterval, outcomePruneInterval(time.Millisecond))
}
