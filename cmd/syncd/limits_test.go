package main

import (
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
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

// Every limit is listed with its flag in PROTOCOL.md section 11, and
// every flag in docs/operations.md: a limit added without its row fails
// here, not in an operator's hands.
func TestEveryLimitFlagIsDocumented(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return string(b)
	}
	protocol := read("../../PROTOCOL.md")
	start := strings.Index(protocol, "## 11. Limits")
	end := strings.Index(protocol, "## 12. ")
	require.True(t, start >= 0 && end > start, "PROTOCOL.md has its section 11")
	limitsSection := protocol[start:end]
	operations := read("../../docs/operations.md")

	limitFlags := flag.NewFlagSet("limits", flag.ContinueOnError)
	new(limitOptions).register(limitFlags)
	limits := []string{"max-connections", "max-connections-per-token", "max-connections-per-tenant", "max-connections-per-address",
		"token-mutations-per-second", "token-mutation-burst", "tenant-mutations-per-second", "tenant-mutation-burst",
		"frame-budget", "token-frame-bytes", "tenant-frame-bytes", "max-scope-values",
		"oplog-max-entries", "oplog-max-age", "ledger-max-entries", "ledger-max-age"}
	limitFlags.VisitAll(func(f *flag.Flag) { limits = append(limits, f.Name) })
	documented := func(text, name string) bool { return strings.Contains(text, "`--"+name+"`") }
	for _, name := range limits {
		require.True(t, documented(limitsSection, name), "PROTOCOL.md section 11 lists --%s", name)
	}

	var help strings.Builder
	_, err := parseFlags([]string{"--help"}, func(string) string { return "" }, &help)
	require.ErrorIs(t, err, flag.ErrHelp)
	flags := regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(help.String(), -1)
	require.Greater(t, len(flags), len(limits), "syncd --help lists its flags")
	for _, f := range flags {
		if f[1] != "version" {
			require.True(t, strings.Contains(operations, "--"+f[1]), "docs/operations.md names --%s", f[1])
		}
	}
}

// --max-log-pages reaches the options from the command line or from
// SYNCD_MAX_LOG_PAGES, defaults to sqlitedb's bound, and a bound that is
// not a positive number of pages is refused by name.
func TestMaxLogPagesFlag(t *testing.T) {
	o, err := parseFlags(nil, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	require.EqualValues(t, sqlitedb.DefaultMaxLogPages, o.maxLogPages)
	o, err = parseFlags(nil, func(k string) string { return map[string]string{"SYNCD_MAX_LOG_PAGES": "500"}[k] }, io.Discard)
	require.NoError(t, err)
	require.EqualValues(t, 500, o.maxLogPages)
	for _, bad := range []string{"0", "-1"} {
		_, err := parseFlags([]string{"--max-log-pages", bad}, func(string) string { return "" }, io.Discard)
		require.ErrorContains(t, err, "--max-log-pages", bad)
	}
}
