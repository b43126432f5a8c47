package loopback_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
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

// childEnv makes the test binary a child that hands out childPorts ports,
// prints them, and holds them until its stdin closes.
const (
	childEnv   = "LOOPBACK_TEST_CHILD"
	childPorts = 1000
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		for range childPorts {
			addr, err := loopback.FreeAddr()
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			fmt.Println(addr)
		}
		io.Copy(io.Discard, os.Stdin) // hold the claims until the parent is done
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestFreeAddrNeverHandsOutAPortAnotherProcessHolds: go test runs two
// packages' test binaries at once, each starting processes on ports it
// reserved; a port one process handed out is not handed out by another
// while the first runs. (Random picks alone would share about 150 of
// these 1,000 and 2,000 ports.)
func TestFreeAddrNeverHandsOutAPortAnotherProcessHolds(t *testing.T) {
	child := exec.Command(os.Args[0], "-test.run", "^$")
	child.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := child.StdinPipe()
	require.NoError(t, err)
	stdout, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	theirs := map[string]bool{}
	lines := bufio.NewScanner(stdout)
	for len(theirs) < childPorts && lines.Scan() {
		theirs[lines.Text()] = true
	}
	require.Len(t, theirs, childPorts, "the child's ports: %v", lines.Err())
	for range 2000 {
		addr, err := loopback.FreeAddr()
		require.NoError(t, err)
		require.False(t, theirs[addr], "%s is the child's", addr)
	}
	require.NoError(t, stdin.Close())
	require.NoError(t, child.Wait())
}
