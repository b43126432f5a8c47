package faultproxy

import (
	"net"
	"syscall"
	"unsafe"
)

// unacked returns how many bytes written to tc its peer has not yet
// acknowledged (the SIOCOUTQ ioctl), and false if the count is unavailable.
func unacked(tc *net.TCPConn) (int, bool) {
	raw, err := tc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var n int32
	var errno syscall.Errno
	if err := raw.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCOUTQ, uintptr(unsafe.Pointer(&n)))
	}); err != nil || errno != 0 {
		return 0, false
	}
	return int(n), true
}
