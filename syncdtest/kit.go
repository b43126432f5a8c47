package syncdtest

import (
	"bytes"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/loopback"
)

// Buffer is a bytes.Buffer safe for concurrent use: a server's or a
// command's log or output that a test reads while it is written.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// FreeAddr returns 127.0.0.1:port with a port free a moment ago, outside
// the kernel's ephemeral range where that is known (internal/loopback), for
// a listener a test starts (or restarts) on a fixed address, or for an
// address nothing listens on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := loopback.FreeAddr()
	require.NoError(t, err)
	return addr
}

// FreePort is FreeAddr's port.
func FreePort(t testing.TB) int {
	t.Helper()
	_, port, err := net.SplitHostPort(FreeAddr(t))
	require.NoError(t, err)
	n, err := strconv.Atoi(port)
	require.NoError(t, err)
	return n
}
