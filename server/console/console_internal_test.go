package console

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
)

func TestBetweenGivesRatesAndLatency(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hist := func(counts ...uint64) adminapi.Histogram {
		h := adminapi.Histogram{}
		for i, c := range counts {
			le := math.Inf(1)
			if i < len(counts)-1 {
				le = 0.001 * float64(uint(1)<<i) // 1, 2, 4 ms, then +Inf
			}
			h.Buckets = append(h.Buckets, adminapi.Bucket{UpperBound: le, Count: c})
		}
		h.Count = counts[len(counts)-1]
		return h
	}
	a := adminapi.Figures{At: t0, Pushes: 10, Mutations: map[string]uint64{"applied": 100}, Ack: hist(5, 10, 10, 10)}
	a.Ack.Sum = 0.010
	for _, tc := range []struct {
		name string
		b    adminapi.Figures
		want Sample
	}{
		{"no pushes", adminapi.Figures{At: t0.Add(2 * time.Second), Pushes: 10, Mutations: map[string]uint64{"applied": 100}, Ack: a.Ack},
			Sample{At: t0.Add(2 * time.Second)}},
		// 20 pushes in 2 s, all within 2..4 ms: the p95 is interpolated
		// in that bucket, at 19 of its 20.
		{"pushes in one bucket", adminapi.Figures{At: t0.Add(2 * time.Second), Pushes: 30, Mutations: map[string]uint64{"applied": 300}, Ack: func() adminapi.Histogram {
			h := hist(5, 10, 30, 30)
			h.Sum = 0.010 + 20*0.003
			return h
		}()}, Sample{At: t0.Add(2 * time.Second), AppliedPerSecond: 100, PushesPerSecond: 10, Acks: 20, AckMeanMs: 3, AckP95Ms: 2 + 2*19.0/20}},
		// Beyond the last finite bound: that bound.
		{"slow pushes", adminapi.Figures{At: t0.Add(time.Second), Pushes: 12, Mutations: map[string]uint64{"applied": 100}, Ack: func() adminapi.Histogram {
			h := hist(5, 10, 10, 12)
			h.Sum = 0.010 + 2*0.5
			return h
		}()}, Sample{At: t0.Add(time.Second), PushesPerSecond: 2, Acks: 2, AckMeanMs: 500, AckP95Ms: 4}},
		// A restarted server's totals go down: no negative rates.
		{"counters restarted", adminapi.Figures{At: t0.Add(time.Second), Mutations: map[string]uint64{}, Ack: hist(0, 0, 0, 0)}, Sample{At: t0.Add(time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := between(a, tc.b)
			require.InDelta(t, tc.want.AckMeanMs, got.AckMeanMs, 1e-9)
			require.InDelta(t, tc.want.AckP95Ms, got.AckP95Ms, 1e-9)
			got.AckMeanMs, got.AckP95Ms, tc.want.AckMeanMs, tc.want.AckP95Ms = 0, 0, 0, 0
			require.Equal(t, tc.want, got)
		})
	}
}

func TestSessionsExpireAndStayBounded(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := Config{Now: func() time.Time { return now }, IdleTimeout: time.Minute, MaxSessionAge: 5 * time.Minute, MaxSessions: 2}
	m, err := newMetrics(nil)
	require.NoError(t, err)
	b := newSessionBook(cfg, m)

	s := b.open("t1")
	require.NotEqual(t, s.id, s.csrf)
	now = now.Add(50 * time.Second)
	_, ok := b.get(s.id)
	require.True(t, ok, "used within the idle timeout")
	now = now.Add(50 * time.Second)
	_, ok = b.get(s.id)
	require.True(t, ok, "each request restarts the idle timeout")
	now = now.Add(time.Minute)
	_, ok = b.get(s.id)
	require.False(t, ok, "idle for a minute: ended")

	s = b.open("t2")
	for range 9 {
		now = now.Add(30 * time.Second)
		_, ok = b.get(s.id)
		require.True(t, ok)
	}
	now = now.Add(30 * time.Second)
	_, ok = b.get(s.id)
	require.False(t, ok, "five minutes after login: ended however busy")

	first := b.open("a")
	now = now.Add(time.Second)
	second := b.open("b")
	now = now.Add(time.Second)
	third := b.open("c")
	_, ok = b.get(first.id)
	require.False(t, ok, "the oldest made room")
	for _, s := range []*session{second, third} {
		_, ok = b.get(s.id)
		require.True(t, ok)
	}
}

func TestQueryLeavesOutOnlyDefaults(t *testing.T) {
	for _, tc := range []struct {
		kv   []any
		want string
	}{
		{[]any{"tenant", "acme", "from", uint64(0), "page", 0, "before", int64(0)}, "tenant=acme"},
		{[]any{"tenant", "0", "model", "", "from", uint64(7), "page", 2, "before", int64(9)}, "before=9&from=7&page=2&tenant=0"},
		{[]any{"key", `a&b=<c>`, "values", 1}, "key=a%26b%3D%3Cc%3E&values=1"},
	} {
		require.Equal(t, tc.want, string(query(tc.kv...)))
	}
}

// TestTenantRatesOverTheWindow: per-tenant rates are taken between the
// oldest kept reading and the newest; the sampler keeps at most
// TenantMarks readings, none older than its window, whatever the
// sampling interval; a restarted counter gives no negative rate.
func TestTenantRatesOverTheWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &sampler{window: 10 * time.Second}
	rates, window := s.tenantRates()
	require.Nil(t, rates)
	require.Zero(t, window)
	s.mark(tenantMark{at: t0, totals: map[string]uint64{"acme": 0, "globex": 50}})
	_, window = s.tenantRates()
	require.Zero(t, window, "one reading is no rate")
	// A reading every 100 ms for 30 s: acme pushes 10 a second, globex
	// restarts at 0 and stays there.
	for i := 1; i <= 300; i++ {
		s.mark(tenantMark{at: t0.Add(time.Duration(i) * 100 * time.Millisecond), totals: map[string]uint64{"acme": uint64(i), "globex": 0}})
		require.LessOrEqual(t, len(s.marks), TenantMarks)
	}
	rates, window = s.tenantRates()
	require.LessOrEqual(t, window, 10*time.Second)
	require.GreaterOrEqual(t, window, 9*time.Second)
	require.InDelta(t, 10.0, rates["acme"], 0.01)
	require.Zero(t, rates["globex"])
}
