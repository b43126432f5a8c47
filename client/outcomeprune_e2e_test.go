package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/server"
)

// A running client forgets outcomes past their retention, not only at
// Open, and counts them.
func TestOutcomesArePrunedWhileRunning(t *testing.T) {
	s := startSyncd(t, server.Config{})
	d := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-1", deviceOptions{tweak: func(c *client.Config) {
		c.OutcomeRetention = 200 * time.Millisecond
	}})
	op := d.put(t, "notes", "a", `{"n":1}`)
	require.Equal(t, client.StatusApplied, d.await(t, op).Status)
	require.Eventually(t, func() bool {
		_, found, err := d.Lookup(t.Context(), op)
		return err == nil && !found
	}, waitFor, pollTick, "the outcome is forgotten while the client runs")
	_, err := d.Await(t.Context(), op)
	require.True(t, errors.Is(err, client.ErrUnknownOp), "%v", err)
	// Counted once the pass that forgot it ends, just after its commit.
	require.Eventually(t, func() bool { return metric(t, d.registry, "syncd_client_outcomes_pruned_total") >= 1 }, waitFor, pollTick)
}
