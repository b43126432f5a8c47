package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/internal/crashpoint"
	"github.com/syncd-dev/syncd/internal/crashpoint/crashtest"
	"github.com/syncd-dev/syncd/server"
)

// outcomeChildEnv carries an outcomeChild (JSON) to the re-executed test
// binary: set, TestKilledAroundOutcome is the child.
const outcomeChildEnv = "SYNCD_CLIENT_OUTCOME_CHILD"

// The driver's steps around recording the outcomes of applied writes
// (client/driver.go).
const (
	stepAnswered = "outcomes answered, not recorded"
	stepRecorded = "outcomes recorded"
)

// outcomeChild is what the child does: one Put and its Await, stopped at
// Step (the parent kills it there).
type outcomeChild struct {
	Dir, URL, Token, ClientID string
	Step                      string
	FileQueue                 bool
}

// Lines the child prints before it stops.
const (
	reportOp  = "op "  // the write's op id, once Put returned
	reportLog = "log " // the sizes of the device's logs before its outcome was recorded
)

// A device is killed (SIGKILL) after the server answered its write:
// before the outcome is recorded, or after it was recorded without a sync
// of its own, and then also with the device's files cut back to what was
// synced before the outcome (what a power cut may leave: what was written
// without a sync lost, the enqueue kept: with the SQLite queue the outcome
// and its item's removal, with the file queue the removal). On
// reopen the app's Await resolves with the outcome the server decided
// (same version and seq), the server applied the write exactly once
// (a replayed write is answered from its ledger as a duplicate), the queue
// is empty and nothing is dead-lettered.
func TestKilledAroundOutcome(t *testing.T) {
	if raw := os.Getenv(outcomeChildEnv); raw != "" {
		runOutcomeChild(t, raw)
		return
	}
	t.Parallel() // mostly waits on child processes
	for _, queue := range []struct {
		name string
		file bool
	}{{"sqlite", false}, {"file", true}} {
		for _, tc := range []struct {
			name      string
			step      string
			powerCut  bool
			replayed  bool // the write is sent again and answered duplicate
			localKept bool // the outcome survives on the device
		}{
			{"before record", stepAnswered, false, true, false},
			{"after record", stepRecorded, false, false, true},
			{"after record, unsynced lost", stepRecorded, true, true, false},
		} {
			t.Run(queue.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				s := startSyncd(t, server.Config{})
				p := s.proxy(t)
				dir := t.TempDir()
				cfg := outcomeChild{Dir: dir, URL: "http://" + p.Addr(), Token: s.token(t, "phone-o"), ClientID: "phone-o", Step: tc.step, FileQueue: queue.file}
				raw, err := json.Marshal(cfg)
				require.NoError(t, err)
				ctx, cancel := context.WithTimeout(t.Context(), 2*waitFor)
				defer cancel()
				res := crashtest.Run(t, ctx, []string{outcomeChildEnv + "=" + string(raw)}, "-test.run=^TestKilledAroundOutcome$", "-test.count=1")
				require.True(t, res.Stopped, "the child reached no step %q: %s", tc.step, res.Output)
				op, logs := parseOutcomeChild(t, res.Output)
				s.requireAppliedOnce(t, []string{op})
				entry := oplogEntry(t, s, op)
				if tc.powerCut {
					cutToSynced(t, dir, logs)
				}

				d := openDevice(t, s, p, dir, cfg.ClientID, deviceOptions{token: cfg.Token, fileQueue: queue.file})
				if tc.localKept {
					o, found, err := d.Lookup(t.Context(), op)
					require.NoError(t, err)
					require.True(t, found, "the outcome recorded before the kill is kept")
					require.Equal(t, client.StatusApplied, o.Status)
				}
				o := d.await(t, op)
				require.Equal(t, client.StatusApplied, o.Status, "%+v", o)
				require.Equal(t, entry.Version, o.Version, "the outcome the server decided")
				require.Equal(t, entry.Seq, o.Seq, "the outcome the server decided")
				d.waitSynced(t)
				s.requireAppliedOnce(t, []string{op})
				require.Empty(t, d.queued(t))
				st, err := d.queue.Stats(t.Context())
				require.NoError(t, err)
				require.Zero(t, st.DeadLetters, "nothing dead-lettered")
				dup := metric(t, s.Registry, "syncd_mutations_total", "status=duplicate")
				if tc.replayed {
					require.Equal(t, 1.0, dup, "the write was replayed and answered from the ledger")
				} else {
					require.Zero(t, dup, "the write was not sent again")
				}
			})
		}
	}
}

// oplogEntry returns the server's oplog entry of op.
func oplogEntry(t *testing.T, s *syncd, op string) (e struct{ Version, Seq uint64 }) {
	t.Helper()
	for _, x := range s.oplog(t) {
		if x.OpID == op {
			e.Version, e.Seq = x.Version, x.Seq
			return e
		}
	}
	require.Failf(t, "no oplog entry", "op %s", op)
	return e
}

// deviceLogs are the device files whose unsynced tail a power cut may
// lose: the SQLite queue's log (the outcome and the item's removal), or
// the file queue (the item's removal; its replica's outcome is synced).
func deviceLogs(dir string, fileQueue bool) []string {
	if fileQueue {
		return []string{filepath.Join(dir, "queue.ndjson")}
	}
	return []string{filepath.Join(dir, "queue.db-wal")}
}

// cutToSynced truncates each device log to the size the child saw before
// the outcome was recorded, and removes SQLite's shared-memory index
// (rebuilt from the log on open): the state a power cut leaves when it
// loses what was written after the last sync.
func cutToSynced(t *testing.T, dir string, sizes map[string]int64) {
	t.Helper()
	require.NotEmpty(t, sizes)
	for path, n := range sizes {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		require.Greater(t, fi.Size(), n, "%s: the outcome was written after the sizes were taken", path)
		require.NoError(t, os.Truncate(path, n))
		if base, ok := strings.CutSuffix(path, "-wal"); ok {
			require.NoError(t, os.Remove(base+"-shm"))
		}
	}
}

// parseOutcomeChild reads the op id and the log sizes the child printed.
func parseOutcomeChild(t *testing.T, out string) (op string, logs map[string]int64) {
	t.Helper()
	logs = map[string]int64{}
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, reportOp); ok {
			op = v
		}
		if v, ok := strings.CutPrefix(line, reportLog); ok {
			path, size, _ := strings.Cut(v, "=")
			n, err := strconv.ParseInt(size, 10, 64)
			require.NoError(t, err, line)
			logs[path] = n
		}
	}
	require.NotEmpty(t, op, "the child printed no op id: %s", out)
	return op, logs
}

// runOutcomeChild is the child: it puts one write and awaits it; the
// crashpoint hook stops it at cfg.Step (once the op id is printed, so the
// parent knows it), printing the sizes of the device's logs taken before
// the outcome was recorded.
func runOutcomeChild(t *testing.T, raw string) {
	var cfg outcomeChild
	require.NoError(t, json.Unmarshal([]byte(raw), &cfg))
	printed := make(chan struct{})
	var before []string // log sizes before the outcome was recorded
	crashpoint.Set(func(step string) {
		if step != stepAnswered && step != stepRecorded {
			return // opening the device's files
		}
		select {
		case <-printed:
		case <-time.After(waitFor):
			t.Errorf("the op id was not printed within %v", waitFor)
		}
		if step == stepAnswered {
			before = before[:0]
			for _, path := range deviceLogs(cfg.Dir, cfg.FileQueue) {
				fi, err := os.Stat(path)
				if err == nil {
					before = append(before, fmt.Sprintf("%s%s=%d", reportLog, path, fi.Size()))
				}
			}
		}
		if step == cfg.Step {
			fmt.Fprintln(os.Stdout, strings.Join(before, "\n"))
			crashtest.Stop(step)
		}
	})
	c := openChildClient(t, cfg.Dir, cfg.URL, cfg.Token, cfg.ClientID, cfg.FileQueue)
	defer c.Close()
	op, err := c.Put(context.Background(), "notes", "one", json.RawMessage(`{"n":1}`))
	require.NoError(t, err)
	fmt.Fprintf(os.Stdout, "%s%s\n", reportOp, op)
	close(printed)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, err = c.Await(ctx, op)
	require.NoError(t, err)
	// Await may return before the step (the file queue's removal of the
	// item follows the outcome's commit): the hook stops this process.
	<-ctx.Done()
	t.Errorf("the child was not stopped at %q within %v", cfg.Step, waitFor)
}
