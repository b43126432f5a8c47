package reconnect_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/reconnect"
)

// highest is a Rand that always picks the top of the range, so Delay equals
// Ceiling.
func highest(n int64) int64 { return n - 1 }

func TestBackoffCeiling(t *testing.T) {
	ms := time.Millisecond
	b := reconnect.Backoff{Base: 100 * ms, Cap: time.Second}
	for _, tt := range []struct {
		failures int
		want     time.Duration
	}{
		{0, 0},
		{1, 100 * ms},
		{2, 200 * ms},
		{3, 400 * ms},
		{4, 800 * ms},
		{5, time.Second},
		{6, time.Second},
		{64, time.Second},
		{1 << 30, time.Second},
	} {
		require.Equal(t, tt.want, b.Ceiling(tt.failures), "failures=%d", tt.failures)
	}

	var zero reconnect.Backoff // defaults: 250ms doubling to 30s
	require.Equal(t, 250*ms, zero.Ceiling(1))
	require.Equal(t, 16*time.Second, zero.Ceiling(7))
	require.Equal(t, 30*time.Second, zero.Ceiling(8))

	require.Equal(t, 50*ms, reconnect.Backoff{Base: 100 * ms, Cap: 50 * ms}.Ceiling(1),
		"Cap bounds even the first wait")
}

// The one jitter rule: uniform in [C/2, C], C the ceiling, raised to
// twice a hint that is more than half of it.
func TestBackoffWaitIsEqualJitter(t *testing.T) {
	ms := time.Millisecond
	top := reconnect.Backoff{Base: 100 * ms, Cap: 500 * ms, Rand: highest}
	var got []time.Duration
	for n := 1; n <= 5; n++ {
		got = append(got, top.Delay(n))
	}
	require.Equal(t, []time.Duration{100 * ms, 200 * ms, 400 * ms, 500 * ms, 500 * ms}, got)

	bottom := reconnect.Backoff{Base: 100 * ms, Rand: func(int64) int64 { return 0 }}
	require.Equal(t, 200*ms, bottom.Delay(3), "never below half the ceiling")
	require.Zero(t, bottom.Delay(0))

	var asked int64
	half := reconnect.Backoff{Base: 100 * ms, Rand: func(n int64) int64 { asked = n; return n / 2 }}
	require.Equal(t, 300*ms, half.Delay(3))
	require.Equal(t, int64(200*ms)+1, asked, "the range includes the ceiling")

	// A hint beyond half the ceiling is a floor, and waits above it are
	// spread over as long as the hint; one below changes nothing.
	require.Equal(t, 3*time.Second, bottom.Wait(3, 3*time.Second))
	require.Equal(t, 6*time.Second, top.Wait(3, 3*time.Second))
	require.Equal(t, 200*ms, bottom.Wait(3, 150*ms))
	require.Equal(t, 400*ms, top.Wait(3, 150*ms))
	require.Equal(t, 3*time.Second, bottom.Wait(0, 3*time.Second), "a hint alone is honoured")

	// The default source stays within [ceiling/2, ceiling].
	var random reconnect.Backoff
	for range 1000 {
		d := random.Delay(3)
		require.GreaterOrEqual(t, d, random.Ceiling(3)/2)
		require.LessOrEqual(t, d, random.Ceiling(3))
	}
}
