package soak

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
)

// dieWithParent makes the kernel kill cmd's process if the harness dies
// first, so an aborted run leaves no orphans.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// openFiles lists what the process's file descriptors point at, for the
// event log: when invariant 6 fails, the difference says what leaked.
func openFiles(pid int) []string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		out = append(out, target)
	}
	sort.Strings(out)
	return out
}
