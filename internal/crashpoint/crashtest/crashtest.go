// Package crashtest is the test kit of crash tests that kill a child
// process with SIGKILL at a chosen point: the child (the test binary run
// again, told what to do by its environment) stops at the point and says
// so on stdout; the parent kills it there and looks at what it left on
// disk. A point is either one the child's own hooks find (Stop) or the
// k-th step the code under test reaches (crashpoint.Reach; StopAtStep).
// Only tests import it.
package crashtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/syncd-dev/syncd/internal/crashpoint"
)

// stoppedPrefix starts the line a stopped child prints.
const stoppedPrefix = "stopped at "

// Stop is the child's side: it prints "stopped at <point>" on stdout and
// blocks until the process is killed. It never returns.
func Stop(point string) {
	// One write: the line is whole in the pipe or absent.
	_, _ = os.Stdout.WriteString(stoppedPrefix + point + "\n")
	select {}
}

// StepEnv is the environment variable by which the parent tells a child
// the rank of the step to stop at (StopAtStep).
const StepEnv = "SYNCD_CRASHTEST_STEP"

// StopAtStep is the child's side of a kill at the k-th step: when StepEnv
// holds k >= 1 it sets the crashpoint hook so that the k-th
// crashpoint.Reach of this process calls Stop("<k> <step>"), and returns
// a function that reports how many steps were reached so far and removes
// the hook. Without StepEnv it sets nothing and reports ok false.
func StopAtStep() (done func() int, ok bool) {
	k, err := strconv.Atoi(os.Getenv(StepEnv))
	if err != nil || k < 1 {
		return nil, false
	}
	var mu sync.Mutex
	n := 0
	crashpoint.Set(func(step string) {
		mu.Lock()
		n++
		at := n
		mu.Unlock()
		if at == k {
			Stop(strconv.Itoa(k) + " " + step)
		}
	})
	return func() int {
		crashpoint.Set(nil)
		mu.Lock()
		defer mu.Unlock()
		return n
	}, true
}

// Result is how a child run ended.
type Result struct {
	// Stopped: the child printed "stopped at <Point>" and was killed with
	// SIGKILL there. Otherwise it exited by itself.
	Stopped bool
	Point   string
	// Output is every line the child printed on stdout before it stopped
	// or exited, and its stderr.
	Output string
}

// Run starts this test binary again with args (say -test.run=^TestChild$)
// and env added to the test's environment, and waits until the child
// prints a "stopped at" line, then kills it with SIGKILL and waits for it,
// or until it exits by itself. ctx bounds the child's whole life: when it
// ends, the child is killed and Run fails the test.
func Run(t testing.TB, ctx context.Context, env []string, args ...string) Result {
	t.Helper()
	child := exec.CommandContext(ctx, os.Args[0], args...)
	child.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	child.Stderr = &stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatalf("crashtest: %v", err)
	}
	if err := child.Start(); err != nil {
		t.Fatalf("crashtest: start the child: %v", err)
	}
	var r Result
	var lines strings.Builder
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if point, ok := strings.CutPrefix(line, stoppedPrefix); ok {
			r.Stopped, r.Point = true, point
			break
		}
		lines.WriteString(line + "\n")
	}
	if r.Stopped {
		if err := child.Process.Kill(); err != nil { // SIGKILL
			t.Fatalf("crashtest: kill the child: %v", err)
		}
	}
	_, _ = io.Copy(io.Discard, out) // until the child's end closes the pipe
	werr := child.Wait()
	r.Output = lines.String() + stderr.String()
	if ctx.Err() != nil {
		t.Fatalf("crashtest: the child outlived its bound: %v\n%s", ctx.Err(), r.Output)
	}
	if !r.Stopped && werr != nil {
		t.Fatalf("crashtest: the child failed: %v\n%s", werr, r.Output)
	}
	return r
}

// String describes r for test logs.
func (r Result) String() string {
	if r.Stopped {
		return fmt.Sprintf("killed at %s", r.Point)
	}
	return "ran to its end"
}
