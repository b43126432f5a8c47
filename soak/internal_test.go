package soak

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/soak/checker"
)

func TestParseMetrics(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(`# HELP go_goroutines Number of goroutines.
# TYPE go_goroutines gauge
go_goroutines 13
process_open_fds 15
syncd_mutations_total{status="applied"} 159
syncd_mutations_total{status="rejected"} 82
syncd_conflicts_total{policy="lww"} 3
syncd_conflicts_total{policy="optimistic"} 1
garbage line
`))
	require.NoError(t, err)
	assert.Equal(t, 13, m.int("go_goroutines"))
	assert.Equal(t, 15, m.int("process_open_fds"))
	assert.Equal(t, 159.0, m[`syncd_mutations_total{status="applied"}`])
	assert.Equal(t, 241.0, m["syncd_mutations_total"], "a name sums its series")
	assert.Equal(t, 4.0, m["syncd_conflicts_total"])
}

func TestCountersSurviveGenerations(t *testing.T) {
	s := &syncdProc{carried: metricSample{}}
	s.last = metricSample{"syncd_ledger_hits_total": 5, "go_goroutines": 40}
	s.ended()
	s.last = metricSample{"syncd_ledger_hits_total": 2, "go_goroutines": 12}
	assert.Equal(t, 7.0, s.counter("syncd_ledger_hits_total"), "counters add up across restarts")
	assert.Equal(t, 12.0, s.counter("go_goroutines"), "gauges are not carried")
}

func TestPopulationHasEveryKindEarly(t *testing.T) {
	cfg := Config{Clients: 6}
	require.NoError(t, cfg.setDefaults())
	p := population(&cfg)
	require.Len(t, p, 6)
	assert.Greater(t, p[1].Skew, cfg.MaxClockSkew, "c01 runs beyond the skew bound")
	assert.Positive(t, p[2].Skew)
	assert.Less(t, p[2].Skew, cfg.MaxClockSkew)
	assert.Negative(t, p[4].Skew)
	assert.False(t, p[3].writesDocs(), "c03 may not write docs")
	assert.NotContains(t, p[3].Read, ModelDocs)
	assert.Equal(t, tenantSide, p[4].Tenant)
	assert.Equal(t, checker.QueueNDJSON, p[0].Queue)
	assert.Equal(t, checker.QueueSQLite, p[1].Queue)

	cfg.Break = BreakVolatileQueue
	assert.Equal(t, checker.QueueMemory, population(&cfg)[0].Queue)
}

func TestConfigValidation(t *testing.T) {
	for name, cfg := range map[string]Config{
		"negative duration": {Duration: -time.Second},
		"no clients":        {Clients: -1},
		"too many clients":  {Clients: 101},
		"hot keys > keys":   {Keys: 2, HotKeys: 3},
		"unknown fault":     {Faults: []FaultKind{"meteor"}},
		"unknown break":     {Break: "everything"},
	} {
		assert.Error(t, cfg.setDefaults(), name)
	}
	var cfg Config
	require.NoError(t, cfg.setDefaults())
	assert.Equal(t, 10*time.Minute, cfg.Duration)
	assert.Equal(t, AllFaults, cfg.Faults)
	assert.NotZero(t, cfg.Seed)
}

func TestParseFaults(t *testing.T) {
	all, err := ParseFaults("all")
	require.NoError(t, err)
	assert.Equal(t, AllFaults, all)
	none, err := ParseFaults("none")
	require.NoError(t, err)
	assert.Empty(t, none)
	some, err := ParseFaults("blackhole, syncd-crash")
	require.NoError(t, err)
	assert.Equal(t, []FaultKind{FaultBlackhole, FaultSyncdCrash}, some)
	_, err = ParseFaults("blackhole,meteor")
	assert.ErrorContains(t, err, "meteor")
}

func TestPlanFirstsCoversEveryKindInTheFirstPartOfTheChurn(t *testing.T) {
	cfg := Config{Seed: 7}
	require.NoError(t, cfg.setDefaults())
	start := time.Unix(1000, 0)
	ch := newChaos(&cfg, nil, nil, nil, &counts{faults: map[FaultKind]int{}}, nil, start)
	require.Len(t, ch.firsts, len(AllFaults))
	for k, at := range ch.firsts {
		assert.True(t, at.After(start), k)
		assert.True(t, at.Before(start.Add(cfg.Duration*7/10+time.Second)), k)
	}
}
