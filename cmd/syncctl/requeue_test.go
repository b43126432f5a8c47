package main

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

// fillDeadLetters creates a SQLite queue at path holding n dead letters,
// in one transaction: the queue's own API would take one transaction per
// item. The rows are what Enqueue and MoveToDeadLetters write (ids issued
// by the items table, so its sequence stays ahead of them).
func fillDeadLetters(t testing.TB, path string, n int) {
	t.Helper()
	q, err := offlinequeue.OpenSQLite(path, offlinequeue.SQLiteOptions{})
	require.NoError(t, err)
	require.NoError(t, q.Close())
	db, err := sql.Open("sqlite3", path)
	require.NoError(t, err)
	defer db.Close()
	tx, err := db.Begin()
	require.NoError(t, err)
	at := t0.UnixNano()
	_, err = tx.Exec(`WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < ?)
		INSERT INTO items (payload, key, attempts, enqueued_at)
		SELECT CAST(printf('{"n":%d}', i) AS BLOB), CAST(printf('op-%06d', i) AS BLOB), 5, ? FROM seq`, n, at)
	require.NoError(t, err)
	_, err = tx.Exec(`INSERT INTO dead_letters (id, payload, key, attempts, enqueued_at, reason, dead_at)
		SELECT id, payload, key, attempts, enqueued_at, CAST('invalid_key: refused' AS BLOB), ? FROM items`, at)
	require.NoError(t, err)
	_, err = tx.Exec(`DELETE FROM items`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
}

// queueCounts opens the queue at path and returns its counts.
func queueCounts(t testing.TB, path string) offlinequeue.Stats {
	t.Helper()
	q, err := offlinequeue.OpenSQLite(path, offlinequeue.SQLiteOptions{})
	require.NoError(t, err)
	defer q.Close()
	st, err := q.Stats(context.Background())
	require.NoError(t, err)
	return st
}

// interruptAt is a stderr that cancels the run (as SIGINT does) once the
// progress bar shows mark.
type interruptAt struct {
	mark   string
	cancel context.CancelFunc
	mu     sync.Mutex
	buf    bytes.Buffer
}

func (w *interruptAt) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if bytes.Contains(p, []byte(w.mark)) {
		w.cancel()
	}
	return w.buf.Write(p)
}

func TestRequeue100000DeadLettersSurvivesAnInterrupt(t *testing.T) {
	const n = 100_000
	path := filepath.Join(t.TempDir(), "device.db")
	fillDeadLetters(t, path, n)
	require.Equal(t, offlinequeue.Stats{DeadLetters: n, MaxDepth: offlinequeue.DefaultMaxDepth}, queueCounts(t, path))
	c := newCLI(t, nil)

	// Interrupted once the bar shows 30000: the batch in hand finishes
	// (each is atomic), the next never starts.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &interruptAt{mark: " 30000/100000", cancel: cancel}
	var stdout bytes.Buffer
	err := c.app(&stdout, stderr).run(ctx, []string{"queue", "requeue", "--path", path, "--all", "--progress", "always", "--batch", "1000"})
	require.Equal(t, exitInterrupted, ExitCode(err))
	require.Contains(t, stderr.buf.String(), "\rrequeue [#########---------------------]  30000/100000  30%")
	require.True(t, strings.HasSuffix(stderr.buf.String(),
		"\nsyncctl: interrupted after 30000 of 100000 dead letters; each batch of 1000 is atomic, so the queue is consistent: run the command again to finish\n"), stderr.buf.String())
	require.Equal(t, "requeued 30000 dead letters, dropped 0 (key pending again); "+path+" now has 30000 pending and 70000 dead letters\n", stdout.String())
	require.Equal(t, offlinequeue.Stats{Pending: 30000, DeadLetters: 70000, MaxDepth: offlinequeue.DefaultMaxDepth}, queueCounts(t, path), "every item is either requeued or dead")

	// Run again: the rest is requeued, with progress, and nothing is lost
	// or doubled.
	r := c.run("queue", "requeue", "--path", path, "--all", "--progress", "always")
	require.NoError(t, r.err, r.stderr)
	require.Contains(t, r.stderr, "\rrequeue [##############################] 70000/70000 100%\n")
	require.Equal(t, offlinequeue.Stats{Pending: n, MaxDepth: offlinequeue.DefaultMaxDepth}, queueCounts(t, path))

	db, err := sql.Open("sqlite3", path)
	require.NoError(t, err)
	defer db.Close()
	var items, keys, maxAttempts int
	require.NoError(t, db.QueryRow(`SELECT count(*), count(DISTINCT key), max(attempts) FROM items`).Scan(&items, &keys, &maxAttempts))
	require.Equal(t, n, items)
	require.Equal(t, n, keys, "every dead letter came back exactly once")
	require.Zero(t, maxAttempts, "requeue resets attempts")
}

func TestProgressBarOnlyOnATerminal(t *testing.T) {
	for _, tc := range []struct {
		mode     progressMode
		terminal bool
		drawn    bool
	}{
		{progressAuto, true, true},
		{progressAuto, false, false},
		{progressAlways, false, true},
		{progressNever, true, false},
	} {
		var stderr bytes.Buffer
		a := &app{stderr: &stderr, isTerminal: func(w io.Writer) bool { return tc.terminal && w == &stderr }}
		p := a.newProgress(tc.mode, "purge", 4)
		p.set(1)
		p.set(4)
		p.end()
		want := ""
		if tc.drawn {
			want = "\rpurge [#######-----------------------] 1/4  25%\rpurge [##############################] 4/4 100%\n"
		}
		require.Equal(t, want, stderr.String(), "mode %s, terminal %v", tc.mode, tc.terminal)
	}
}
