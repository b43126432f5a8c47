package soak_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/soak"
	"github.com/syncd-dev/syncd/soak/checker"
)

// These tests run real, short scenarios with one component deliberately
// broken, and require the checker to name the invariant the break
// violates: a checker that cannot fail is worth nothing.

// A queue that forgets attempt counts records none for the refusal that
// dead-letters a poison write (a permanent refusal dead-letters at its
// first answer, issue 10): its dead letters say they were charged nothing
// (5). The break hides nothing else: every write is still accounted for.
func TestCheckerCatchesQueueThatForgetsAttempts(t *testing.T) {
	t.Parallel()
	res := run(t, soak.Config{
		Duration: 6 * time.Second, Clients: 2, Seed: seed(t), Faults: []soak.FaultKind{},
		WriteEvery: 100 * time.Millisecond, QuiesceTimeout: 8 * time.Second, Break: soak.BreakForgetAttempts,
	})
	drained := res.Check.Verdict(checker.Drained)
	require.False(t, drained.Holds)
	t.Logf("invariant 5 says:\n%s", evidence(drained))
	assert.Contains(t, evidence(drained), "was charged no attempt")
	assert.Positive(t, res.Check.Stats.DeadLetters, "the poison writes queued before a welcome were dead-lettered")
	assert.True(t, res.Check.Verdict(checker.ExactlyOnce).Holds, "the break is in the queue, not the server")
	assert.True(t, res.Check.Verdict(checker.ReferenceModel).Holds, "the break is in the queue, not the server")
}

// A queue kept in memory loses what it had not delivered when its client
// is killed: the writes made offline before the SIGKILL are lost (1).
func TestCheckerCatchesVolatileQueue(t *testing.T) {
	t.Parallel()
	res := run(t, soak.Config{
		Duration: 10 * time.Second, Clients: 1, Seed: seed(t), Faults: []soak.FaultKind{soak.FaultOfflineCrash},
		ClientCrashEvery: 3 * time.Second, WriteEvery: 100 * time.Millisecond, QuiesceTimeout: 30 * time.Second,
		Break: soak.BreakVolatileQueue,
	})
	require.Positive(t, res.Faults[soak.FaultOfflineCrash])
	accounted := res.Check.Verdict(checker.Accounted)
	require.False(t, accounted.Holds, "writes queued in memory die with the process")
	t.Logf("invariant 1 says:\n%s", evidence(accounted))
	assert.Contains(t, evidence(accounted), "is lost: no outcome, not queued, not dead-lettered")
	assert.True(t, res.Check.Verdict(checker.ExactlyOnce).Holds, "the break is in the queue, not the server")
}

// A ledger that forgets its decisions between a commit and the resend of
// its lost acknowledgement decides the resend again, differently: the
// client is told something the first decision did not say (2). One client
// writing fast makes the next bytes towards it, which the fault cuts, the
// answer to a push syncd has just committed.
func TestCheckerCatchesLedgerAmnesia(t *testing.T) {
	t.Parallel()
	res := run(t, soak.Config{
		Duration: 10 * time.Second, Clients: 1, Seed: seed(t), Faults: []soak.FaultKind{soak.FaultAckLost},
		FlapEvery: 500 * time.Millisecond, WriteEvery: 30 * time.Millisecond, QuiesceTimeout: 30 * time.Second,
		Break: soak.BreakLedgerAmnesia,
	})
	require.Positive(t, res.Faults[soak.FaultAckLost])
	once := res.Check.Verdict(checker.ExactlyOnce)
	require.False(t, once.Holds)
	ev := evidence(once)
	t.Logf("invariant 2 says:\n%s", ev)
	assert.True(t, strings.Contains(ev, "decided twice") || strings.Contains(ev, "instead of answered from the ledger"),
		"the evidence must show a resend decided again, not only the wiped decisions:\n%s", ev)
}
