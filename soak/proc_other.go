//go:build !linux

package soak

import "os/exec"

// dieWithParent is a no-op where the kernel offers no parent-death signal:
// children notice the harness is gone when their stdin ends.
func dieWithParent(*exec.Cmd) {}

// openFiles lists nothing where /proc is not available.
func openFiles(int) []string { return nil }
