package offlinequeue_test

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

// The crash test runs a child process (this test binary, running only
// TestCrashHelper) that enqueues from several goroutines and reports each
// enqueue on stdout after it returned. The parent kills it with SIGKILL at a
// random moment, reopens the queue, and checks that everything reported is
// there exactly once and that IDs only grow.
const (
	crashKindEnv  = "SYNCD_OFFLINEQUEUE_CRASH_KIND"
	crashPathEnv  = "SYNCD_OFFLINEQUEUE_CRASH_PATH"
	crashRoundEnv = "SYNCD_OFFLINEQUEUE_CRASH_ROUND"

	crashRounds    = 20 // kills per queue kind
	crashProducers = 4  // concurrent enqueuers in the child, so group commits happen
	crashMaxDelay  = 100 * time.Millisecond
	// The child's own bounds, should the parent never kill it.
	crashChildItems    = 100_000
	crashChildDuration = 20 * time.Second
)

var crashKinds = map[string]func(path string) (offlinequeue.Queue, error){
	"file": func(path string) (offlinequeue.Queue, error) {
		q, err := offlinequeue.OpenFile(path, offlinequeue.FileOptions{})
		if err != nil {
			return nil, err
		}
		return q, nil
	},
	"sqlite": func(path string) (offlinequeue.Queue, error) {
		q, err := offlinequeue.OpenSQLite(path, offlinequeue.SQLiteOptions{})
		if err != nil {
			return nil, err
		}
		return q, nil
	},
}

// TestCrashHelper is the child process of TestCrashRecovery; run without its
// environment it does nothing. It prints "ready" once the queue is open, then
// "ok <id> <key>" after each Enqueue returned, until it is killed.
func TestCrashHelper(t *testing.T) {
	kind := os.Getenv(crashKindEnv)
	if kind == "" {
		return
	}
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		// One write per line: a line is whole in the pipe or absent.
		_, _ = os.Stdout.WriteString(fmt.Sprintf(format, args...) + "\n")
	}
	q, err := crashKinds[kind](os.Getenv(crashPathEnv))
	if err != nil {
		say("error open: %v", err)
		return
	}
	round := os.Getenv(crashRoundEnv)
	say("ready")
	deadline := time.Now().Add(crashChildDuration)
	var wg sync.WaitGroup
	for g := range crashProducers {
		wg.Go(func() {
			for i := 0; i < crashChildItems && time.Now().Before(deadline); i++ {
				key := fmt.Sprintf("r%s-g%d-%d", round, g, i)
				id, err := q.Enqueue(t.Context(), []byte("payload of "+key), key)
				if err != nil {
					say("error enqueueOK %s: %v", key, err)
					return
				}
				say("ok %d %s", id, key)
			}
		})
	}
	wg.Wait()
	_ = q.Close()
}

func TestCrashRecovery(t *testing.T) {
	for _, kind := range []string{"file", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			seed := time.Now().UnixNano()
			t.Logf("seed %d", seed)
			runCrashRounds(t, kind, rand.New(rand.NewPCG(uint64(seed), 0)))
		})
	}
}

func runCrashRounds(t *testing.T, kind string, rng *rand.Rand) {
	path := filepath.Join(t.TempDir(), "queue")
	live := map[string]offlinequeue.ID{} // items that must be pending, by key
	everID := map[offlinequeue.ID]bool{}
	var highest offlinequeue.ID
	reportedTotal := 0
	for round := range crashRounds {
		delay := time.Duration(2+rng.IntN(int(crashMaxDelay/time.Millisecond))) * time.Millisecond
		reported := runCrashChild(t, kind, path, round, delay)
		reportedTotal += len(reported)

		q, err := crashKinds[kind](path)
		require.NoError(t, err, "round %d: reopen after SIGKILL", round)
		items := pagedPending(t, q)
		byKey := map[string]offlinequeue.ID{}
		prefix := fmt.Sprintf("r%d-", round)
		var roundHighest offlinequeue.ID
		for _, it := range items {
			_, dup := byKey[it.Key]
			require.False(t, dup, "round %d: key %s is pending twice", round, it.Key)
			byKey[it.Key] = it.ID
			if !strings.HasPrefix(it.Key, prefix) {
				require.Equal(t, live[it.Key], it.ID, "round %d: item %s of an earlier round changed or appeared", round, it.Key)
				continue
			}
			require.Greater(t, it.ID, highest, "round %d: item %s got an ID an earlier round had reached", round, it.Key)
			require.False(t, everID[it.ID], "round %d: ID %d reissued", round, it.ID)
			everID[it.ID] = true
			roundHighest = max(roundHighest, it.ID)
		}
		for key, id := range reported {
			require.Equal(t, id, byKey[key], "round %d: reported enqueueOK %s lost after SIGKILL", round, key)
		}
		for key, id := range live {
			require.Equal(t, id, byKey[key], "round %d: item %s of an earlier round lost", round, key)
		}
		highest = max(highest, roundHighest)

		// Deliver half of this round's items, so later rounds also check
		// that done items stay done and their IDs stay used.
		var done []offlinequeue.ID
		for key, id := range byKey {
			if strings.HasPrefix(key, prefix) && id%2 == 0 {
				done = append(done, id)
				continue
			}
			live[key] = id
		}
		require.NoError(t, q.MarkDone(t.Context(), done...))
		require.NoError(t, q.Close())
	}
	t.Logf("%d rounds, %d enqueues reported before the kills, %d items pending", crashRounds, reportedTotal, len(live))
	require.Positive(t, reportedTotal, "no child ever reported an enqueueOK: the test tested nothing")
}

// runCrashChild starts the child, kills it delay after it reported ready, and
// returns the enqueues it reported (key to ID).
func runCrashChild(t *testing.T, kind, path string, round int, delay time.Duration) map[string]offlinequeue.ID {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashKindEnv+"="+kind, crashPathEnv+"="+path, crashRoundEnv+"="+strconv.Itoa(round))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-t.Context().Done():
				return
			}
		}
	}()

	reported := map[string]offlinequeue.ID{}
	var failures []string
	var kill <-chan time.Time
	for lines != nil {
		select {
		case <-kill:
			require.NoError(t, cmd.Process.Kill())
			kill = nil
		case line, ok := <-lines:
			fields := strings.Fields(line)
			switch {
			case !ok:
				lines = nil
			case line == "ready":
				if kind == "file" {
					// One path, one owner, across processes too.
					_, err := offlinequeue.OpenFile(path, offlinequeue.FileOptions{})
					require.ErrorIs(t, err, offlinequeue.ErrLocked, "round %d: opened a file the child holds", round)
				}
				timer := time.NewTimer(delay)
				defer timer.Stop()
				kill = timer.C
			case len(fields) == 3 && fields[0] == "ok":
				id, err := strconv.ParseUint(fields[1], 10, 64)
				require.NoError(t, err, "child line %q", line)
				reported[fields[2]] = offlinequeue.ID(id)
			case strings.HasPrefix(line, "error"):
				failures = append(failures, line)
			}
		}
	}
	err = cmd.Wait()
	require.Empty(t, failures, "round %d: the child failed; stderr:\n%s", round, stderr.String())
	require.Error(t, err, "round %d: the child exited on its own; stderr:\n%s", round, stderr.String())
	require.NotContains(t, stderr.String(), "DATA RACE", "round %d: race in the child", round)
	return reported
}

// pagedPending lists every pending item through Peek pages.
func pagedPending(t *testing.T, q offlinequeue.Queue) []offlinequeue.Item {
	t.Helper()
	var all []offlinequeue.Item
	var after offlinequeue.ID
	for range 1 << 20 {
		page, err := q.Peek(t.Context(), after, 500)
		require.NoError(t, err)
		if len(page) == 0 {
			return all
		}
		all = append(all, page...)
		after = page[len(page)-1].ID
	}
	require.FailNow(t, "Peek never reached the end of the queue")
	return nil
}
