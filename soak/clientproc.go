package soak

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// clientStopTimeout bounds a client's clean stop.
const clientStopTimeout = 30 * time.Second

// clientProc is one client of the population: its files, its fault proxies,
// and the process of its current incarnation. Its methods are called by one
// goroutine at a time (the scheduler, then quiescence); the status the
// process reports is read under mu from anywhere.
type clientProc struct {
	cfg     childConfig
	cfgPath string
	logPath string
	self    string // the executable to re-execute as a client
	proxies *proxySet

	cmd     *exec.Cmd
	stdin   io.WriteCloser
	done    chan struct{}
	waitErr error

	mu     sync.Mutex
	latest childStatus
}

// running reports whether an incarnation is alive.
func (c *clientProc) running() bool {
	if c.done == nil {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// exitedOnItsOwn reports an incarnation that ended without the harness
// killing or stopping it; nil otherwise.
func (c *clientProc) exitedOnItsOwn() error {
	if c.done == nil || c.running() {
		return nil
	}
	c.done = nil
	return fmt.Errorf("client %s incarnation %d exited on its own: %v (see %s)", c.cfg.Profile.ID, c.cfg.Incarnation, c.waitErr, c.logPath)
}

// status returns the newest status line of the current incarnation.
func (c *clientProc) status() childStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.latest
}

// start launches the next incarnation on the client's queue, replica and
// journal. The goroutine it starts reads the status lines and reaps the
// process; it ends when the process does.
func (c *clientProc) start() error {
	c.cfg.Incarnation++
	raw, err := json.Marshal(c.cfg)
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.cfgPath, raw, 0o600); err != nil {
		return err
	}
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.self)
	cmd.Env = append(os.Environ(), childEnv+"="+c.cfgPath)
	cmd.Stderr = logf
	dieWithParent(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start client %s: %w", c.cfg.Profile.ID, err)
	}
	c.cmd, c.stdin, c.done = cmd, stdin, make(chan struct{})
	done, incarnation := c.done, c.cfg.Incarnation
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var st childStatus
			if json.Unmarshal(sc.Bytes(), &st) == nil && st.Incarnation == incarnation {
				c.mu.Lock()
				c.latest = st
				c.mu.Unlock()
			}
		}
		c.waitErr = cmd.Wait()
		logf.Close()
		close(done)
	}()
	return nil
}

// send writes one command line to the running incarnation.
func (c *clientProc) send(cmd string) error {
	if !c.running() {
		return fmt.Errorf("client %s is not running", c.cfg.Profile.ID)
	}
	_, err := io.WriteString(c.stdin, cmd+"\n")
	return err
}

// kill SIGKILLs the running incarnation and reaps it.
func (c *clientProc) kill() error {
	if !c.running() {
		return c.exitedOnItsOwn()
	}
	if err := c.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-c.done:
		c.done = nil
		return nil
	case <-time.After(clientStopTimeout):
		return fmt.Errorf("client %s not reaped %v after SIGKILL", c.cfg.Profile.ID, clientStopTimeout)
	}
}

// stop asks the running incarnation to close cleanly and waits for it;
// past clientStopTimeout it is killed. An exit other than 0 (a failure, a
// race report) is an error.
func (c *clientProc) stop() error {
	if !c.running() {
		return c.exitedOnItsOwn()
	}
	c.send(cmdStop)
	c.stdin.Close()
	select {
	case <-c.done:
		c.done = nil
		if c.waitErr != nil {
			return fmt.Errorf("client %s exited with %v on stop (see %s)", c.cfg.Profile.ID, c.waitErr, c.logPath)
		}
		return nil
	case <-time.After(clientStopTimeout):
		c.cmd.Process.Kill()
		<-c.done
		c.done = nil
		return fmt.Errorf("client %s did not stop within %v; killed", c.cfg.Profile.ID, clientStopTimeout)
	}
}
