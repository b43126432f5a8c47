package soak_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/syncd-dev/syncd/soak"
)

// TestShortClusterSoak is the short cluster soak (part of `make test`): three
// syncd nodes, fewer clients, node kills and route cuts among the faults;
// every invariant must hold and every node end with the same records.
func TestShortClusterSoak(t *testing.T) {
	res := run(t, soak.Config{
		Duration: 40 * time.Second, Clients: 4, Nodes: 3, Seed: seed(t),
		FlapEvery: 500 * time.Millisecond, ClientCrashEvery: 8 * time.Second, SyncdCrashEvery: 10 * time.Second,
		QuiesceTimeout: 2 * time.Minute, MinFlaps: 20,
	})
	assert.True(t, res.Converged, "every node holds the same records")
	requirePassed(t, res, len(soak.AllFaults)+len(soak.ClusterFaults))
}
