package crashtest_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/crashpoint"
	"github.com/syncd-dev/syncd/internal/crashpoint/crashtest"
)

// TestStepsChild is the child of TestRunKillsAtEachStep; without
// crashtest.StepEnv it does nothing. It reaches three steps and prints
// how many it reached.
func TestStepsChild(t *testing.T) {
	done, ok := crashtest.StopAtStep()
	if !ok {
		return
	}
	for i := range 3 {
		crashpoint.Reach("step " + strconv.Itoa(i+1))
	}
	fmt.Printf("reached %d\n", done())
}

// TestRunKillsAtEachStep: a child told step k is killed there, for each
// of its three steps, and Run reports the point; told step 4 it runs to
// its end, and Run reports its output.
func TestRunKillsAtEachStep(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for k := 1; k <= 4; k++ {
		r := crashtest.Run(t, ctx, []string{crashtest.StepEnv + "=" + strconv.Itoa(k)}, "-test.run=^TestStepsChild$", "-test.count=1")
		if k <= 3 {
			require.True(t, r.Stopped, r.Output)
			require.Equal(t, fmt.Sprintf("%d step %d", k, k), r.Point)
			require.Equal(t, "killed at "+r.Point, r.String())
			continue
		}
		require.False(t, r.Stopped)
		require.Contains(t, r.Output, "reached 3")
		require.Equal(t, "ran to its end", r.String())
	}
}
