package offlinequeue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/client/offlinequeue/queuetest"
)

func TestFileConformance(t *testing.T) {
	queuetest.Run(t, queuetest.Config{
		New: func(t *testing.T) func(opts offlinequeue.Options) (offlinequeue.Queue, error) {
			path := filepath.Join(t.TempDir(), "queue.ndjson")
			return func(opts offlinequeue.Options) (offlinequeue.Queue, error) {
				q, err := offlinequeue.OpenFile(path, offlinequeue.FileOptions{Options: opts})
				if err != nil {
					return nil, err
				}
				return q, nil
			}
		},
		Durable: true,
		MoveWith: func(ctx context.Context, q offlinequeue.Queue, id offlinequeue.ID, reason string, record func(context.Context) error) error {
			return q.(*offlinequeue.File).MoveToDeadLettersWith(ctx, id, reason, record)
		},
	})
}

// openTestFile opens path with default options and closes it at the end of the test.
func openTestFile(t *testing.T, path string) *offlinequeue.File {
	t.Helper()
	q, err := offlinequeue.OpenFile(path, offlinequeue.FileOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	return q
}

func reopenTestFile(t *testing.T, q *offlinequeue.File, path string) *offlinequeue.File {
	t.Helper()
	require.NoError(t, q.Close())
	return openTestFile(t, path)
}

func enqueueOK(t *testing.T, q offlinequeue.Queue, payload, key string) offlinequeue.ID {
	t.Helper()
	id, err := q.Enqueue(t.Context(), []byte(payload), key)
	require.NoError(t, err)
	return id
}

func allPendingItems(t *testing.T, q offlinequeue.Queue) []offlinequeue.Item {
	t.Helper()
	items, err := q.Peek(t.Context(), 0, 1<<30)
	require.NoError(t, err)
	return items
}

func allDeadLetters(t *testing.T, q offlinequeue.Queue) []offlinequeue.DeadLetter {
	t.Helper()
	dls, err := q.DeadLetters(t.Context(), 0, 1<<30)
	require.NoError(t, err)
	return dls
}

func TestFileHighWaterMarkSurvivesRepeatedCompactions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q")
	q := openTestFile(t, path)
	require.Equal(t, offlinequeue.ID(1), enqueueOK(t, q, "one", ""))
	require.Equal(t, offlinequeue.ID(2), enqueueOK(t, q, "two", ""))
	require.NoError(t, q.MarkDone(t.Context(), 2))
	q = reopenTestFile(t, q, path)
	q = reopenTestFile(t, q, path)
	require.Equal(t, offlinequeue.ID(3), enqueueOK(t, q, "three", ""))

	// An emptied queue keeps its mark as well.
	require.NoError(t, q.MarkDone(t.Context(), 1, 3))
	q = reopenTestFile(t, q, path)
	q = reopenTestFile(t, q, path)
	require.Equal(t, offlinequeue.ID(4), enqueueOK(t, q, "four", ""))
}

func TestFileKeysPayloadsAndReasonsRoundTripExactBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q")
	q := openTestFile(t, path)
	var every []byte
	for b := range 256 {
		every = append(every, byte(b))
	}
	keys := []string{"nul\x00inside", "\xff\xfe invalid utf-8", "\"quoted\"\n\\", "é", "\x00"}
	for _, key := range keys {
		enqueueOK(t, q, string(every)+key, key)
	}
	dead := enqueueOK(t, q, "dead", "dead\x80key")
	require.NoError(t, q.MoveToDeadLetters(t.Context(), dead, "reason \xc3 with a broken rune\x00"))
	wantPending, wantDead := allPendingItems(t, q), allDeadLetters(t, q)

	q = reopenTestFile(t, q, path)
	requireSameItems(t, wantPending, allPendingItems(t, q))
	requireSameDead(t, wantDead, allDeadLetters(t, q))
	for i, key := range keys {
		id, err := q.Enqueue(t.Context(), []byte("again"), key)
		require.NoError(t, err)
		require.Equal(t, wantPending[i].ID, id, "key %q does not dedup after reopen", key)
	}
	require.Equal(t, "reason \xc3 with a broken rune\x00", allDeadLetters(t, q)[0].Reason)

	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "nul\x00inside", "keys are stored encoded, not as JSON strings")
}

// requireSameItems compares items as instants, not as time.Time values.
func requireSameItems(t *testing.T, want, got []offlinequeue.Item) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.True(t, want[i].EnqueuedAt.Equal(got[i].EnqueuedAt), "item %d EnqueuedAt", i)
		w, g := want[i], got[i]
		w.EnqueuedAt, g.EnqueuedAt = time.Time{}, time.Time{}
		require.Equal(t, w, g, "item %d", i)
	}
}

func requireSameDead(t *testing.T, want, got []offlinequeue.DeadLetter) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.True(t, want[i].DeadAt.Equal(got[i].DeadAt), "dead letter %d DeadAt", i)
		requireSameItems(t, []offlinequeue.Item{want[i].Item}, []offlinequeue.Item{got[i].Item})
		require.Equal(t, want[i].Reason, got[i].Reason)
	}
}

// writeQueueFile writes a queue file by the lines given, each followed by a newline.
func writeQueueFile(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "q")
	var buf bytes.Buffer
	for _, l := range lines {
		buf.WriteString(l + "\n")
	}
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o600))
	return path
}

const v1Header = `{"op":"header","format":"syncd-offlinequeue","version":1}`

func TestFileDamageACrashCannotCauseIsCorruptionAndLeavesTheFileAlone(t *testing.T) {
	put := func(id int, key string) string {
		return fmt.Sprintf(`{"op":"put","id":%d,"payload":"eA==","key":%q,"at":1}`, id, key)
	}
	cases := []struct {
		name  string
		lines []string
		line  int
	}{
		{"malformed middle line", []string{v1Header, put(1, "azE="), `{"op":"put","id":2,`, put(3, "")}, 3},
		{"unknown op", []string{v1Header, `{"op":"rename","id":1}`, put(2, "")}, 2},
		{"reused id", []string{v1Header, put(1, ""), put(1, ""), put(2, "")}, 3},
		{"key pending twice", []string{v1Header, put(1, "azE="), put(2, "azE="), put(3, "")}, 3},
		{"done of an unknown id", []string{v1Header, put(1, ""), `{"op":"done","ids":[9]}`, put(2, "")}, 3},
		{"high-water mark going back", []string{v1Header, put(5, ""), `{"op":"hw","id":4}`, put(6, "")}, 3},
		{"invalid base64 payload", []string{v1Header, `{"op":"put","id":1,"payload":"!!"}`, put(2, "")}, 2},
		{"no header", []string{put(1, ""), put(2, "")}, 1},
		{"foreign format", []string{`{"op":"header","format":"other","version":1}`, put(1, "")}, 1},
		{"not json at all", []string{"hello world"}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeQueueFile(t, c.lines...)
			before, err := os.ReadFile(path)
			require.NoError(t, err)

			q, err := offlinequeue.OpenFile(path, offlinequeue.FileOptions{})
			require.Nil(t, q)
			ce, ok := errors.AsType[*offlinequeue.CorruptError](err)
			require.True(t, ok, "want a *CorruptError, got %v", err)
			require.Equal(t, path, ce.Path)
			require.Equal(t, c.line, ce.Line)
			requireUnchanged(t, path, before)
		})
	}
}

// requireUnchanged requires path to hold before and no compaction leftovers.
func requireUnchanged(t *testing.T, path string, before []byte) {
	t.Helper()
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after, "a failed open changed the queue file")
	require.NoFileExists(t, path+".compact")
}

func TestFileNewerFormatVersionIsRefused(t *testing.T) {
	path := writeQueueFile(t, `{"op":"header","format":"syncd-offlinequeue","version":2}`, `{"op":"whatever"}`)
	before, err := os.ReadFile(path)
	require.NoError(t, err)
	_, err = offlinequeue.OpenFile(path, offlinequeue.FileOptions{})
	require.ErrorIs(t, err, offlinequeue.ErrUnsupportedVersion)
	requireUnchanged(t, path, before)
}

func TestFileUnreadablePathIsAnErrorNotAnEmptyQueue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q")
	require.NoError(t, os.Mkdir(path, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(path, "inside"), []byte("x"), 0o600))
	q, err := offlinequeue.OpenFile(path, offlinequeue.FileOptions{})
	require.Error(t, err)
	require.Nil(t, q)
	require.FileExists(t, filepath.Join(path, "inside"), "the directory was replaced")
	require.NoFileExists(t, path+".compact")
}

func TestFileMissingDirectoryIsAnError(t *testing.T) {
	_, err := offlinequeue.OpenFile(filepath.Join(t.TempDir(), "no", "such", "q"), offlinequeue.FileOptions{})
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestFileTornTrailingLineHeals(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q")
	q := openTestFile(t, path)
	enqueueOK(t, q, "a", "ka")
	enqueueOK(t, q, "b", "")
	want := allPendingItems(t, q)
	require.NoError(t, q.Close())

	clean, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, tail := range []string{`{"op":"done","ids":[1`, "garbage\n", `{"op":"done","ids":[1]}`, "\x00\x00\x00"} {
		require.NoError(t, os.WriteFile(path, append(bytes.Clone(clean), tail...), 0o600))
		q = openTestFile(t, path)
		requireSameItems(t, want, allPendingItems(t, q))
		require.NoError(t, q.Close())
		healed, err := os.ReadFile(path)
		require.NoError(t, err)
		require.NotContains(t, string(healed), tail, "compaction kept the torn tail %q", tail)
	}
}

func TestFileSecondHandleOnOnePathIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q")
	q := openTestFile(t, path)
	enqueueOK(t, q, "a", "")

	other, err := offlinequeue.OpenFile(path, offlinequeue.FileOptions{})
	require.ErrorIs(t, err, offlinequeue.ErrLocked)
	require.Nil(t, other)

	require.NoError(t, q.Close())
	q = openTestFile(t, path)
	require.Len(t, allPendingItems(t, q), 1, "the refused open must not have touched the file")
}

func TestFileNegativeLimitsAreRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q")
	for _, opts := range []offlinequeue.Options{{MaxDepth: -1}, {MaxPayloadBytes: -1}} {
		_, err := offlinequeue.OpenFile(path, offlinequeue.FileOptions{Options: opts})
		require.Error(t, err)
		require.NoFileExists(t, path)
	}
}

func TestFileMetricsAreLabelledWithThePath(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := offlinequeue.NewMetrics(reg)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "q")
	q, err := offlinequeue.OpenFile(path, offlinequeue.FileOptions{Options: offlinequeue.Options{Metrics: m}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	enqueueOK(t, q, "a", "")
	id := enqueueOK(t, q, "b", "")
	require.NoError(t, q.MoveToDeadLetters(t.Context(), id, "r"))

	want := fmt.Sprintf(`
# HELP syncd_client_queue_depth Pending items in the offline queue.
# TYPE syncd_client_queue_depth gauge
syncd_client_queue_depth{queue=%[1]q} 1
# HELP syncd_client_queue_dead_letters Items in the offline queue's dead-letter store.
# TYPE syncd_client_queue_dead_letters gauge
syncd_client_queue_dead_letters{queue=%[1]q} 1
`, path)
	require.NoError(t, testutil.GatherAndCompare(reg, bytes.NewBufferString(want),
		"syncd_client_queue_depth", "syncd_client_queue_dead_letters"))
}

// TestFileReadsTheVersion1Format opens a hand-written version 1 file, so a
// change that breaks reading existing queue files fails here.
func TestFileReadsTheVersion1Format(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join("testdata", "v1.ndjson"))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "q")
	require.NoError(t, os.WriteFile(path, golden, 0o600))
	q := openTestFile(t, path)

	at := time.Unix(0, 1700000000000000000)
	requireSameItems(t, []offlinequeue.Item{
		{ID: 1, Payload: []byte("first"), Key: "op-1", Attempts: 2, EnqueuedAt: at},
		{ID: 6, Payload: []byte("requeued"), Key: "op-3", EnqueuedAt: at.Add(3 * time.Second)},
	}, allPendingItems(t, q))
	requireSameDead(t, []offlinequeue.DeadLetter{{
		Item:   offlinequeue.Item{ID: 4, Payload: []byte("poison"), Key: "op-\x00", Attempts: 5, EnqueuedAt: at.Add(time.Second)},
		Reason: "rejected: bad field",
		DeadAt: at.Add(2 * time.Second),
	}}, allDeadLetters(t, q))
	require.Equal(t, offlinequeue.ID(10), enqueueOK(t, q, "next", ""), "the high-water mark 9 was lost")

	// Compaction writes the header every version-1 reader expects.
	require.NoError(t, q.Close())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	first, _, _ := bytes.Cut(raw, []byte("\n"))
	var h struct {
		Op      string `json:"op"`
		Format  string `json:"format"`
		Version int    `json:"version"`
	}
	require.NoError(t, json.Unmarshal(first, &h))
	require.Equal(t, "header", h.Op)
	require.Equal(t, "syncd-offlinequeue", h.Format)
	require.Equal(t, 1, h.Version)
}

// TestFileMatchesMemoryUnderRandomOperations runs one seeded random sequence
// of calls against the file queue and the memory queue side by side, and
// reopens the file queue now and then: what it reloads must be what it held.
func TestFileMatchesMemoryUnderRandomOperations(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	clock := time.Unix(1700000000, 0)
	opts := offlinequeue.Options{MaxDepth: 40, Now: func() time.Time { return clock }}
	path := filepath.Join(t.TempDir(), "q")
	file, err := offlinequeue.OpenFile(path, offlinequeue.FileOptions{Options: opts})
	require.NoError(t, err)
	t.Cleanup(func() { _ = file.Close() })
	mem := offlinequeue.NewMemory(opts)

	pick := func(items []offlinequeue.ID) offlinequeue.ID {
		if len(items) == 0 || rng.IntN(8) == 0 {
			return offlinequeue.ID(rng.IntN(300) + 1) // unknown, mostly
		}
		return items[rng.IntN(len(items))]
	}
	for step := range 400 {
		clock = clock.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
		pendingIDs, deadIDs := itemIDs(allPendingItems(t, mem)), deadLetterIDs(allDeadLetters(t, mem))
		// Draw every choice first: both queues get the same call.
		kind, key := rng.IntN(10), ""
		if rng.IntN(2) == 0 {
			key = fmt.Sprintf("k%d", rng.IntN(30))
		}
		a, b, c := pick(pendingIDs), pick(pendingIDs), pick(deadIDs)
		d, n := pick(deadIDs), offlinequeue.Attempts(rng.IntN(4))
		var op string
		call := func(q offlinequeue.Queue) (string, error) {
			switch {
			case kind < 4:
				op = "enqueue " + key
				id, err := q.Enqueue(t.Context(), []byte(fmt.Sprintf("p%d", step)), key)
				return fmt.Sprint(id), err
			case kind < 6:
				op = "done"
				return "", q.MarkDone(t.Context(), a, b)
			case kind < 7:
				op = "attempts"
				return "", q.SetAttempts(t.Context(), a, n)
			case kind < 8:
				op = "dead"
				return "", q.MoveToDeadLetters(t.Context(), a, fmt.Sprintf("reason %d", step))
			case kind < 9:
				op = "requeue"
				return "", q.Requeue(t.Context(), c, d, c)
			default:
				op = "purge"
				return "", q.Purge(t.Context(), c)
			}
		}
		gotFile, errFile := call(file)
		gotMem, errMem := call(mem)
		require.Equal(t, fmt.Sprint(errMem), fmt.Sprint(errFile), "step %d %s", step, op)
		require.Equal(t, gotMem, gotFile, "step %d %s", step, op)
		if rng.IntN(40) == 0 {
			file = reopenFileWith(t, file, path, opts)
		}
		requireSameItems(t, allPendingItems(t, mem), allPendingItems(t, file))
		requireSameDead(t, allDeadLetters(t, mem), allDeadLetters(t, file))
	}
}

func reopenFileWith(t *testing.T, q *offlinequeue.File, path string, opts offlinequeue.Options) *offlinequeue.File {
	t.Helper()
	require.NoError(t, q.Close())
	q, err := offlinequeue.OpenFile(path, offlinequeue.FileOptions{Options: opts})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	return q
}

func itemIDs(items []offlinequeue.Item) []offlinequeue.ID {
	out := make([]offlinequeue.ID, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

func deadLetterIDs(dls []offlinequeue.DeadLetter) []offlinequeue.ID {
	out := make([]offlinequeue.ID, len(dls))
	for i, d := range dls {
		out[i] = d.ID
	}
	return out
}

// TestFileMoveToDeadLettersWithHoldsReaders: a read that begins once the
// hook's effects can be seen (here: the hook starts it) sees the item
// dead, never the state before the move; the queue holds readers from the
// hook to the move's apply.
func TestFileMoveToDeadLettersWithHoldsReaders(t *testing.T) {
	q := openTestFile(t, filepath.Join(t.TempDir(), "queue.ndjson"))
	ctx := t.Context()
	id, err := q.Enqueue(ctx, []byte("poison"), "op-1")
	require.NoError(t, err)
	type listing struct {
		dead []offlinequeue.DeadLetter
		err  error
	}
	seen := make(chan listing, 1)
	require.NoError(t, q.MoveToDeadLettersWith(ctx, id, "refused", func(context.Context) error {
		go func() {
			dead, err := q.DeadLetters(ctx, 0, 10)
			seen <- listing{dead, err}
		}()
		return nil
	}))
	got := <-seen
	require.NoError(t, got.err)
	require.Len(t, got.dead, 1, "the read begun by the hook lists the item")
	require.Equal(t, id, got.dead[0].ID)
}
