// Package loopback reserves loopback ports for the processes a test or the
// soak starts and restarts on fixed addresses. Unix only (fcntl locks).
package loopback

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// Ports below the kernel's ephemeral range: a port taken from that range
// (as 127.0.0.1:0 does) can be taken again, between its reservation and
// the child's bind or while a node is down between restarts, by any
// outgoing connection on the machine (the cluster's own routes redial
// all the time). Outgoing connections never take a port below the range.
const (
	low  = 20000
	high = 32768 // at most: where Linux's default ip_local_port_range starts
)

// handedOut holds the ports FreeAddr returned in this process: a port is
// handed out once, so tests running in parallel (each starting processes
// that bind their ports a while later) never get the same one.
var handedOut sync.Map // int -> struct{}

// claimsFile is the file whose bytes FreeAddr locks, one per port
// (fcntl record locks), so that two processes (go test runs two
// packages at once) never hand out the same port either: a lock lasts
// as long as the process that took it. Opened once and never closed,
// since closing any descriptor of the file would drop the process's
// locks; nil when it could not be opened (then claims are per process).
var claimsFile = sync.OnceValue(func() *os.File {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "syncd-loopback-ports"), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil
	}
	return f
})

// claim reports whether port was not handed out before, by this process
// or by another one still running, and claims it.
func claim(port int) bool {
	if _, taken := handedOut.LoadOrStore(port, struct{}{}); taken {
		return false
	}
	f := claimsFile()
	if f == nil {
		return true
	}
	lock := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: int64(port), Len: 1}
	return syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lock) == nil
}

// FreeAddr returns 127.0.0.1:port with a port free a moment ago, not
// returned before by this process or by another running one, and outside
// the ephemeral range when that range is known (Linux); elsewhere a port
// the kernel picks.
func FreeAddr() (string, error) {
	top := ephemeralStart()
	if top > low {
		for range 100 { // bounded: a port in use is tried again elsewhere
			port := low + rand.IntN(top-low)
			if !claim(port) {
				continue
			}
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			ln, err := net.Listen("tcp", addr)
			if err == nil {
				ln.Close()
				return addr, nil
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// ephemeralStart is the first port of the ephemeral range, 0 when unknown.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	var from, to int
	if _, err := fmt.Sscan(string(b), &from, &to); err != nil {
		return 0
	}
	return min(from, high)
}
