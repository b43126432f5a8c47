package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// Dead letters are listed, requeued and purged through the Client, without
// reaching into the queue.
func TestDeadLettersThroughTheClient(t *testing.T) {
	s := startSyncd(t, server.Config{})
	tok := s.Issue(t, auth.Principal{Tenant: tenant, ClientID: "phone-1", Read: []string{auth.Wildcard}, Write: []string{"notes"}})
	d := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-1", deviceOptions{token: tok})
	ctx := t.Context()
	a := d.put(t, "secret", "a", `{"n":1}`)
	b := d.put(t, "secret", "b", `{"n":2}`)
	require.Equal(t, client.StatusDeadLettered, d.await(t, a).Status)
	require.Equal(t, client.StatusDeadLettered, d.await(t, b).Status)
	require.Equal(t, 2, d.status(t).DeadLetters, "an awaited dead letter is counted at once")

	dead, err := d.DeadLetters(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 2)
	byOp := map[string]client.DeadLetter{}
	for _, dl := range dead {
		byOp[dl.Mutation.OpID] = dl
		require.Contains(t, dl.Reason, "forbidden_model")
	}

	require.NoError(t, d.PurgeDeadLetters(ctx, byOp[b].ID))
	require.NoError(t, d.RequeueDeadLetters(ctx, byOp[a].ID))
	// Still forbidden: decided anew, dead-lettered again at its first
	// refusal (a permanent refusal is not retried).
	o := d.await(t, a)
	require.Equal(t, client.StatusDeadLettered, o.Status)
	st := d.status(t)
	require.Equal(t, 1, st.DeadLetters, "dead-lettered again")
	require.Zero(t, st.Pending)
	dead, err = d.DeadLetters(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1, "the purged one is gone")
	require.Equal(t, a, dead[0].Mutation.OpID)
	require.Equal(t, 1, dead[0].Attempts)
}

// An app must never see a write's dead-letter outcome (Await, Lookup)
// before DeadLetters lists the write. The watched queues below check that
// at the one instant it could fail: a move to the dead letters made apart
// from recording the outcome (plain MoveToDeadLetters, after the outcome's
// own commit). The client records both together (MoveToDeadLettersWith),
// so the check never runs unless that regresses, and then it finds the
// gap without a race.
type watchedSQLite struct {
	*offlinequeue.SQLite
	gap func(offlinequeue.ID)
}

func (w watchedSQLite) MoveToDeadLetters(ctx context.Context, id offlinequeue.ID, reason string) error {
	w.gap(id)
	return w.SQLite.MoveToDeadLetters(ctx, id, reason)
}

type watchedFile struct {
	*offlinequeue.File
	gap func(offlinequeue.ID)
}

func (w watchedFile) MoveToDeadLetters(ctx context.Context, id offlinequeue.ID, reason string) error {
	w.gap(id)
	return w.File.MoveToDeadLetters(ctx, id, reason)
}

// TestAwaitedDeadLetterIsListed: when Await answers dead-lettered,
// DeadLetters lists the write and Status counts it at that instant, with
// the SQLite queue (one commit) and the NDJSON file queue (it holds its
// readers while the outcome commits).
func TestAwaitedDeadLetterIsListed(t *testing.T) {
	s := startSyncd(t, server.Config{})
	tok := s.Issue(t, auth.Principal{Tenant: tenant, ClientID: "phone-1", Read: []string{auth.Wildcard}, Write: []string{"notes"}})
	for _, backend := range []string{"sqlite", "file"} {
		t.Run(backend, func(t *testing.T) {
			dir := t.TempDir()
			var d *device
			var gaps []string // op ids whose outcome was readable before their dead letter
			gap := func(id offlinequeue.ID) {
				ctx := context.Background()
				items, err := d.queue.Peek(ctx, id-1, 1)
				if err != nil || len(items) == 0 {
					gaps = append(gaps, fmt.Sprintf("item %d not pending before its move (%v)", id, err))
					return
				}
				var m syncproto.Mutation
				if err := json.Unmarshal(items[0].Payload, &m); err != nil {
					gaps = append(gaps, err.Error())
					return
				}
				o, found, err := d.Lookup(ctx, m.OpID)
				dead, derr := d.DeadLetters(ctx, 0, 10)
				if err != nil || derr != nil || found && o.Status == client.StatusDeadLettered && !listed(dead, m.OpID) {
					gaps = append(gaps, fmt.Sprintf("%s (%v, %v)", m.OpID, err, derr))
				}
			}
			var q offlinequeue.Queue
			if backend == "sqlite" {
				sq, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
				require.NoError(t, err)
				q = watchedSQLite{sq, gap}
			} else {
				fq, err := offlinequeue.OpenFile(filepath.Join(dir, "queue.ndjson"), offlinequeue.FileOptions{})
				require.NoError(t, err)
				q = watchedFile{fq, gap}
			}
			d = openDevice(t, s, s.proxy(t), dir, "phone-1", deviceOptions{token: tok, queue: q})

			op := d.put(t, "secret", "s1", `{"n":1}`)
			require.Equal(t, client.StatusDeadLettered, d.await(t, op).Status)
			dead, err := d.DeadLetters(t.Context(), 0, 10)
			require.NoError(t, err)
			require.True(t, listed(dead, op), "Await answered dead-lettered: DeadLetters lists the write at once")
			require.Equal(t, 1, d.status(t).DeadLetters)
			require.Empty(t, gaps, "a dead-letter outcome was readable before DeadLetters listed it")
		})
	}
}

// listed reports whether dead holds the write opID.
func listed(dead []client.DeadLetter, opID string) bool {
	for _, dl := range dead {
		if dl.Mutation.OpID == opID {
			return true
		}
	}
	return false
}
