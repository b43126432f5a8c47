// Package crashpoint names the steps of work a crash must not tear apart
// (a device file's schema migrations, the steps of opening it) so that a
// crash test can stop a process at each step in turn and kill it there
// with SIGKILL (see crashpoint/crashtest). Production code marks a step
// with Reach; only a crash test's child process sets a hook, so everywhere
// else a step costs one atomic load.
package crashpoint

import "sync/atomic"

// hook is the function Reach calls; nil: none.
var hook atomic.Pointer[func(step string)]

// Reach marks step as reached: the work before it is done, the work after
// it not begun. With a hook set (Set) it calls the hook, which may never
// return (the process is killed there); without one it does nothing.
// Steps must be reached in the same order on every run of the same work
// over the same files, so a test can name a step by its rank.
func Reach(step string) {
	if f := hook.Load(); f != nil {
		(*f)(step)
	}
}

// Set makes fn the hook of every later Reach in this process, from any
// goroutine; nil removes it. Only a crash test's child process sets one.
func Set(fn func(step string)) {
	if fn == nil {
		hook.Store(nil)
		return
	}
	hook.Store(&fn)
}
