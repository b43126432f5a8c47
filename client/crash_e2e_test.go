package client_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/soak/faultproxy"
)

// killChildEnv carries a killChild configuration (JSON) to the re-executed
// test binary: set, TestKilledMidReplay is the child.
const killChildEnv = "SYNCD_CLIENT_KILL_CHILD"

// killChild is what one child process does: open the client on Dir and
// make Writes puts, reporting each op id on stdout once Put returned, then
// keep replaying until it is killed (or Life passes, or stdin closes).
type killChild struct {
	Dir, URL, Token, ClientID string
	Round, Writes             int
	Life                      time.Duration
	SQLiteQueue               bool // queue.db (SQLite) instead of queue.ndjson
}

// Reported lines of a child on stdout.
const (
	reportPut  = "put "  // followed by the op id: Put returned it
	reportDone = "wrote" // every write returned
)

// The client process is killed (SIGKILL) ten times while it writes and
// replays, and reopened on the same files each time. Every write a process
// saw returned from Put ends applied, and none is applied twice: the queue
// (an NDJSON file, or SQLite with the replica in its file), the replica's
// outcomes and the server's ledger agree across the crashes.
func TestKilledMidReplay(t *testing.T) {
	if cfg := os.Getenv(killChildEnv); cfg != "" {
		runKillChild(t, cfg)
		return
	}
	t.Parallel() // mostly waits on child processes
	for _, sqlite := range []bool{false, true} {
		name := map[bool]string{false: "file", true: "sqlite"}[sqlite]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			killMidReplay(t, sqlite)
		})
	}
}

// killMidReplay is TestKilledMidReplay over one kind of queue. With the
// SQLite queue a write is pushed while its Put's commit syncs, so a kill
// can also land after syncd applied a write whose Put never returned: it
// must still be applied once, and every write a Put returned applied.
func killMidReplay(t *testing.T, sqlite bool) {
	const rounds, writes = 10, 80
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	s := startSyncd(t, server.Config{})
	p := s.proxy(t)
	dir := t.TempDir()
	cfg := killChild{Dir: dir, URL: "http://" + p.Addr(), Token: s.token(t, "phone-k"), ClientID: "phone-k", Writes: writes, Life: waitFor, SQLiteQueue: sqlite}
	var reported []string
	for round := range rounds {
		cfg.Round = round
		// Even rounds write online, so pushes interleave with the writes;
		// odd rounds write offline and are killed while the backlog
		// replays, between a push's commit and its settling if the kill
		// lands there.
		offline := round%2 == 1
		if offline {
			p.SetMode(faultproxy.Refuse)
		}
		killAfter := writes/4 + rng.IntN(writes/2)
		ops := s.runAndKill(t, cfg, func(pr childProgress) bool {
			if !offline {
				return pr.puts >= killAfter && pr.applied > 0
			}
			if pr.wrote {
				p.SetMode(faultproxy.Pass) // the backlog starts replaying
			}
			return pr.wrote && pr.applied > 0
		})
		t.Logf("round %d (offline %v): killed after %d reported puts", round, offline, len(ops))
		reported = append(reported, ops...)
	}

	p.SetMode(faultproxy.Pass)
	d := openDevice(t, s, p, dir, cfg.ClientID, deviceOptions{token: cfg.Token, fileQueue: !sqlite})
	d.waitSynced(t)
	d.requireApplied(t, reported)
	s.requireAppliedOnce(t, reported)
	require.Empty(t, d.queued(t))
	t.Logf("%d reported writes, %d answered from the ledger as duplicates", len(reported),
		int(metric(t, s.Registry, "syncd_mutations_total", "status=duplicate")))
}

// childProgress is what runAndKill knows of a running child.
type childProgress struct {
	puts    int     // puts the child reported returned
	wrote   bool    // every write returned
	applied float64 // mutations the server applied since the child started
}

// runAndKill runs one child and kills it with SIGKILL once step says so;
// step is called on every report of the child and every pollTick, and may
// act on the network. It returns the op ids the child reported.
func (s *syncd) runAndKill(t *testing.T, cfg killChild, step func(childProgress) (kill bool)) []string {
	t.Helper()
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestKilledMidReplay$", "-test.count=1")
	cmd.Env = append(os.Environ(), killChildEnv+"="+string(raw))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	waited := false
	defer func() {
		if !waited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	applied0 := metric(t, s.Registry, "syncd_mutations_total", "status=applied")
	var ops, other []string // other: anything else the child said (a test failure)
	wrote := false
	tick := time.NewTicker(pollTick)
	defer tick.Stop()
	for !step(childProgress{len(ops), wrote, metric(t, s.Registry, "syncd_mutations_total", "status=applied") - applied0}) {
		select {
		case line, ok := <-lines:
			if !ok {
				waited = true
				err := cmd.Wait()
				require.Failf(t, "child ended before it was killed", "round %d: %v; stdout: %s; stderr: %s",
					cfg.Round, err, strings.Join(other, "\n"), stderr.String())
			}
			switch {
			case strings.HasPrefix(line, reportPut):
				ops = append(ops, strings.TrimPrefix(line, reportPut))
			case line == reportDone:
				wrote = true
			default:
				other = append(other, line)
			}
		case <-tick.C:
		case <-ctx.Done():
			waited = true
			cmd.Wait()
			require.Failf(t, "child not killed in time", "round %d: %d puts reported; stderr: %s", cfg.Round, len(ops), stderr.String())
		}
	}
	require.NoError(t, cmd.Process.Kill())
	// Drain what the child wrote before it died (those puts returned too);
	// its death closes the pipe. Only then may Wait close our end.
	for line := range lines {
		if strings.HasPrefix(line, reportPut) {
			ops = append(ops, strings.TrimPrefix(line, reportPut))
		}
	}
	waited = true
	require.Error(t, cmd.Wait(), "the child was killed")
	return ops
}

// runKillChild is the child process: it writes, reports and replays until
// it is killed.
func runKillChild(t *testing.T, raw string) {
	var cfg killChild
	require.NoError(t, json.Unmarshal([]byte(raw), &cfg))
	c := openChildClient(t, cfg.Dir, cfg.URL, cfg.Token, cfg.ClientID, !cfg.SQLiteQueue)
	defer c.Close()
	for i := range cfg.Writes {
		op, err := c.Put(context.Background(), "notes", fmt.Sprintf("r%02d-%03d", cfg.Round, i), json.RawMessage(fmt.Sprintf(`{"round":%d,"i":%d}`, cfg.Round, i)))
		require.NoError(t, err)
		fmt.Fprintf(os.Stdout, "%s%s\n", reportPut, op)
	}
	fmt.Fprintln(os.Stdout, reportDone)
	// Replay goes on in the background until the parent kills this
	// process; a parent that is gone closes stdin.
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Life)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(io.Discard, os.Stdin)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// openChildClient opens a crash test's child client over the queue (SQLite,
// or the NDJSON file) and replica in dir, with the fast test intervals.
func openChildClient(t *testing.T, dir, url, token, clientID string, fileQueue bool) *client.Client {
	t.Helper()
	var q offlinequeue.Queue
	var err error
	if fileQueue {
		q, err = offlinequeue.OpenFile(filepath.Join(dir, "queue.ndjson"), offlinequeue.FileOptions{})
	} else {
		q, err = offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
	}
	require.NoError(t, err)
	c, err := client.Open(context.Background(), client.Config{
		ServerURLs: []string{url}, Token: token, ClientID: clientID,
		Queue: q, ReplicaPath: filepath.Join(dir, "replica.db"),
		ProbeInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond, MaxRetryInterval: 200 * time.Millisecond,
	})
	require.NoError(t, err)
	return c
}
