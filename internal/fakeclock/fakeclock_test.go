package fakeclock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/fakeclock"
)

func TestClockMovesOnlyWhenTold(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := fakeclock.New(t0)
	require.Equal(t, t0, c.Now())
	c.Advance(time.Minute)
	require.Equal(t, t0.Add(time.Minute), c.Now())
	c.Set(t0.Add(-time.Hour))
	require.Equal(t, t0.Add(-time.Hour), c.Now(), "a clock may be set backwards")
	c.Advance(-time.Hour)
	require.Equal(t, t0.Add(-2*time.Hour), c.Now())
}

func TestClockIsSafeForConcurrentUse(t *testing.T) {
	c := fakeclock.New(time.Unix(0, 0))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				c.Advance(time.Second)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	require.Equal(t, time.Unix(800, 0), c.Now())
}
