package client_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/soak/faultproxy"
)

// With a SQLite queue the replica lives in the queue's file and a Put is
// one commit: the queue's item and its pending overlay row. The client is
// killed (SIGKILL) while it writes offline, four times; after each kill,
// before any client opens the file again (so no repair runs), every queued
// item has its overlay row and every overlay row its item, and every write
// the process saw returned is among them. Then the device goes online and
// every reported write is applied exactly once.
func TestKilledMidPutKeepsQueueAndOverlayTogether(t *testing.T) {
	t.Parallel() // mostly waits on child processes
	const rounds, writes = 4, 400
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	s := startSyncd(t, server.Config{})
	p := s.proxy(t)
	p.SetMode(faultproxy.Refuse)
	dir := t.TempDir()
	cfg := killChild{Dir: dir, URL: "http://" + p.Addr(), Token: s.token(t, "phone-q"), ClientID: "phone-q",
		Writes: writes, Life: waitFor, SQLiteQueue: true}

	var reported []string
	for round := range rounds {
		cfg.Round = round
		killAfter := 20 + rng.IntN(writes/2)
		ops := s.runAndKill(t, cfg, func(pr childProgress) bool { return pr.puts >= killAfter })
		t.Logf("round %d: killed after %d reported puts", round, len(ops))
		reported = append(reported, ops...)
		requireQueueMatchesOverlay(t, filepath.Join(dir, "queue.db"), reported)
	}

	p.SetMode(faultproxy.Pass)
	d := openDevice(t, s, p, dir, cfg.ClientID, deviceOptions{token: cfg.Token})
	d.waitSynced(t)
	d.requireApplied(t, reported)
	s.requireAppliedOnce(t, reported)
	require.Empty(t, d.queued(t))
}

// requireQueueMatchesOverlay opens the queue file as it was left and
// checks that its items and the replica's pending overlay name the same
// writes, and that every op of reported is one of them.
func requireQueueMatchesOverlay(t *testing.T, path string, reported []string) {
	t.Helper()
	q, err := offlinequeue.OpenSQLite(path, offlinequeue.SQLiteOptions{})
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Close()) }()
	ctx := context.Background()
	rows, err := q.DB().QueryContext(ctx, `SELECT i.id, i.key, p.queue_id, p.op_id
		FROM items i LEFT JOIN pending p ON p.queue_id = i.id
		UNION ALL
		SELECT NULL, NULL, p.queue_id, p.op_id FROM pending p WHERE NOT EXISTS (SELECT 1 FROM items i WHERE i.id = p.queue_id)`)
	require.NoError(t, err)
	defer rows.Close()
	queued := map[string]bool{}
	for rows.Next() {
		var id, queueID *int64
		var key []byte
		var op *string
		require.NoError(t, rows.Scan(&id, &key, &queueID, &op))
		require.NotNil(t, id, "overlay row %v (op %v) without its queue item", queueID, op)
		require.NotNil(t, queueID, "queue item %d (op %s) without its overlay row", *id, key)
		require.Equal(t, string(key), *op, "item %d", *id)
		queued[*op] = true
	}
	require.NoError(t, rows.Err())
	for _, op := range reported {
		require.True(t, queued[op], "reported write %s is queued", op)
	}
}
