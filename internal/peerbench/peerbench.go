// Package peerbench runs PouchDB, the peer some of syncd's benchmarks are
// measured beside in the same run, from tools/peerbench (its Node.js
// packages installed by `make peerbench`, which `make bench` runs first):
// a PouchDB server over LevelDB on a loopback port, sequential awaited
// puts to it, and the replication of a local database to it. For
// benchmarks only; it needs node on PATH.
package peerbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// startTimeout bounds how long the PouchDB server may take to listen.
const startTimeout = 60 * time.Second

// Server is a PouchDB server (express-pouchdb over LevelDB) on 127.0.0.1.
type Server struct {
	// URL is the server's base address, without a trailing slash.
	URL string

	script string
	cmd    *exec.Cmd
}

// Start starts a PouchDB server keeping its databases in dir. It fails
// with what to run when tools/peerbench's packages are not installed.
func Start(ctx context.Context, dir string) (*Server, error) {
	script, err := locate()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "node", script, "server", dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start node: %w", err)
	}
	s := &Server{script: script, cmd: cmd}
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				port <- p
			}
		}
	}()
	select {
	case p := <-port:
		s.URL = "http://127.0.0.1:" + p
		return s, nil
	case <-time.After(startTimeout):
	case <-ctx.Done():
	}
	s.Close()
	return nil, fmt.Errorf("the PouchDB server did not listen within %s", startTimeout)
}

// Close stops the server and waits for it.
func (s *Server) Close() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// Puts makes n sequential awaited puts of documents of about 200 bytes to
// the database db (created first, outside the timing) and returns puts a
// second.
func (s *Server) Puts(ctx context.Context, db string, n int) (float64, error) {
	return s.run(ctx, "put", db, n, "puts/s ")
}

// Replicate writes n documents of about 200 bytes to a local LevelDB
// database, then replicates it to the database db and returns documents a
// second over the replication alone.
func (s *Server) Replicate(ctx context.Context, db string, n int) (float64, error) {
	return s.run(ctx, "replicate", db, n, "docs/s ")
}

func (s *Server) run(ctx context.Context, mode, db string, n int, prefix string) (float64, error) {
	out, err := exec.CommandContext(ctx, "node", s.script, mode, s.URL+"/"+db, strconv.Itoa(n)).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return 0, fmt.Errorf("node %s: %w: %s", mode, err, ee.Stderr)
		}
		return 0, fmt.Errorf("node %s: %w", mode, err)
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(string(out)), prefix)
	if !ok {
		return 0, fmt.Errorf("node %s printed %q, want %q and a rate", mode, out, prefix)
	}
	return strconv.ParseFloat(v, 64)
}

// locate finds tools/peerbench/pouchdb.js above the working directory (go
// test runs in the package's directory) and checks its packages are there.
func locate() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("peerbench: no go.mod above the working directory")
		}
		dir = parent
	}
	tools := filepath.Join(dir, "tools", "peerbench")
	if _, err := os.Stat(filepath.Join(tools, "node_modules", "pouchdb")); err != nil {
		return "", fmt.Errorf("peerbench: PouchDB is not installed in %s: run `make peerbench` (npm ci there)", tools)
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("peerbench: %w", err)
	}
	return filepath.Join(tools, "pouchdb.js"), nil
}
