package loopback_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/loopback"
)

func TestFreeAddrIsBindableLoopback(t *testing.T) {
	addr, err := loopback.FreeAddr()
	require.NoError(t, err)
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	require.Greater(t, p, 0)
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	ln.Close()
}

// TestFreeAddrNeverHandsOutAPortTwice: tests running in parallel in one
// process each reserve ports their children bind later; no two get the
// same one.
func TestFreeAddrNeverHandsOutAPortTwice(t *testing.T) {
	seen := map[string]bool{}
	for range 2000 {
		addr, err := loopback.FreeAddr()
		require.NoError(t, err)
		require.False(t, seen[addr], "%s handed out twice", addr)
		seen[addr] = true
	}
}
