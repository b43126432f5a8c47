package soak_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/soak"
	"github.com/syncd-dev/syncd/soak/checker"
)

// seed is SYNCD_SOAK_SEED when set (to replay a run), else 1.
func seed(t *testing.T) int64 {
	t.Helper()
	s := os.Getenv("SYNCD_SOAK_SEED")
	if s == "" {
		return 1
	}
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err, "SYNCD_SOAK_SEED")
	return n
}

// TestShortSoak is the soak that make test runs: fewer clients and less
// time than make soak, every fault kind, and every invariant must hold.
func TestShortSoak(t *testing.T) {
	t.Parallel()
	res := run(t, soak.Config{
		Duration: 45 * time.Second, Clients: 6, Seed: seed(t),
		FlapEvery: 400 * time.Millisecond, ClientCrashEvery: 6 * time.Second, SyncdCrashEvery: 15 * time.Second,
		QuiesceTimeout: 2 * time.Minute, MinFlaps: 50,
	})
	requirePassed(t, res, len(soak.AllFaults))
}

// requirePassed asserts that every invariant held, every enabled fault
// kind (kinds of them) was covered, the run quiesced, the harness found
// nothing, and the run exercised poison writes and applied writes.
func requirePassed(t *testing.T, res *soak.Result, kinds int) {
	t.Helper()
	for _, v := range res.Check.Verdicts {
		assert.True(t, v.Holds, "invariant %d (%s) violated %d times:\n%s", int(v.Invariant), v.Invariant, v.Violations, evidence(v))
	}
	for _, c := range res.Coverage {
		assert.True(t, c.OK(), "fault %s injected %d times, %d required", c.Kind, c.Count, c.Required)
	}
	assert.Empty(t, res.Health, "harness findings")
	assert.True(t, res.Quiesced, "the clients did not quiesce")
	assert.True(t, res.Passed)
	st := res.Check.Stats
	assert.Positive(t, st.Made["poison"], "poison writes were made")
	assert.Positive(t, st.DeadLetters, "poison writes were dead-lettered")
	assert.Positive(t, st.Outcomes["applied"])
	assert.Positive(t, st.Made["scoped"], "scoped writes (tasks, membership churn) were made")
	assert.Positive(t, st.Received, "rows of scoped models were received and judged at the wire")
	assert.Equal(t, kinds, len(res.Coverage)-1, "every fault kind is covered")
	assert.Equal(t, checker.Invariants, invariantsOf(res.Check.Verdicts))
}

func invariantsOf(vs []checker.Verdict) []checker.Invariant {
	out := make([]checker.Invariant, len(vs))
	for i, v := range vs {
		out[i] = v.Invariant
	}
	return out
}
