package main

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server"
)

// The limit flags reach server.Config, from the command line or from
// their SYNCD_* variables, and a bad tenant weight is refused by name.
func TestLimitFlagsReachTheConfig(t *testing.T) {
	env := map[string]string{"SYNCD_TENANT_WEIGHT": "gold=4, silver=2", "SYNCD_SNAPSHOT_TIMEOUT": "7m", "SYNCD_HTTP_READ_TIMEOUT": "45s"}
	o, err := parseFlags([]string{"--requests-per-second", "50", "--request-burst", "60", "--max-tenant-labels", "7", "--hello-timeout", "3s",
		"--idle-timeout", "2m", "--max-concurrent-snapshots", "9", "--tenant-mutations-per-second", "1000"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	var cfg server.Config
	o.limits.apply(&cfg)
	require.Equal(t, 50.0, cfg.RequestsPerSecond)
	require.Equal(t, 60, cfg.RequestBurst)
	require.Equal(t, map[string]int{"gold": 4, "silver": 2}, cfg.TenantWeights)
	require.Equal(t, 7, cfg.MaxTenantLabels)
	require.Equal(t, 3*time.Second, cfg.HelloTimeout)
	require.Equal(t, 2*time.Minute, cfg.IdleTimeout)
	require.Equal(t, 9, cfg.MaxConcurrentSnapshots)
	require.Equal(t, 7*time.Minute, cfg.SnapshotTimeout)
	require.Equal(t, 45*time.Second, cfg.HTTPTimeouts.Read)
	require.Equal(t, 1000.0, o.quotas.TenantMutationsPerSecond)

	for _, bad := range []string{"gold", "gold=0", "gold=1001", "=3", "gold=x"} {
		_, err := parseFlags([]string{"--tenant-weight", bad}, func(string) string { return "" }, io.Discard)
		require.ErrorContains(t, err, "TENANT=WEIGHT", "--tenant-weight %s", bad)
	}
}

// At the defaults, no limit that would throttle one device is on: the
// mutation quotas are off and the session limit is the backstop.
func TestDefaultLimitsThrottleNoDevice(t *testing.T) {
	o, err := parseFlags(nil, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	require.Negative(t, o.quotas.TokenMutationsPerSecond, "token quota off")
	require.Negative(t, o.quotas.TenantMutationsPerSecond, "tenant quota off")
	require.Equal(t, float64(server.DefaultRequestsPerSecond), o.limits.requestsPerSecond)
	require.Empty(t, o.limits.tenantWeights, "equal weights")
}
