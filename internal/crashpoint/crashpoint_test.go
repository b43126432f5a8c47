package crashpoint_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/crashpoint"
)

// Reach calls the hook Set gave it, in order, and nothing once it is
// removed.
func TestReachCallsTheHookUntilRemoved(t *testing.T) {
	var got []string
	crashpoint.Reach("before any hook")
	crashpoint.Set(func(step string) { got = append(got, step) })
	crashpoint.Reach("a")
	crashpoint.Reach("b")
	crashpoint.Set(nil)
	crashpoint.Reach("after")
	require.Equal(t, []string{"a", "b"}, got)
}
