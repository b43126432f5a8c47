package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncproto"
)

// stamps reads the timestamp of every write waiting in the device's queue,
// by op id.
func (d *device) stamps(t testing.TB) map[string]syncproto.Timestamp {
	t.Helper()
	out := map[string]syncproto.Timestamp{}
	for _, it := range d.queued(t) {
		m := queuedMutation(t, it)
		out[m.OpID] = m.HLC
	}
	return out
}

// Two devices write the same keys of a last-writer-wins model while
// offline, interleaved so that each writes last on half of them, then sync
// one after the other. Whatever the arrival order, the newer timestamp wins
// every key, both replicas end equal to the server's records, and every
// write that arrived after its newer rival is refused (superseded) and in
// the conflict log beside the winner. A loser that arrived first was applied
// and then overwritten: its trace is the oplog, where the winner follows it.
func TestOfflineEditsOfSameKeysConverge(t *testing.T) {
	const model, keys = "notes", 10
	s := startSyncd(t, server.Config{})
	a := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-a", deviceOptions{})
	b := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-b", deviceOptions{})
	key := func(i int) string { return fmt.Sprintf("k%d", i) }

	// A shared starting point both replicas hold.
	var base []string
	for i := range keys {
		base = append(base, a.put(t, model, key(i), `{"by":"origin"}`))
	}
	a.requireApplied(t, base)
	require.Eventually(t, func() bool { return b.convergesWithServer(t, s, model) }, waitFor, pollTick)

	a.offline()
	b.offline()
	type edit struct {
		dev *device
		op  string
	}
	edits := map[string][]edit{} // key -> its two writes
	write := func(d *device, i int) {
		edits[key(i)] = append(edits[key(i)], edit{d, d.put(t, model, key(i), fmt.Sprintf(`{"by":%q}`, d.id))})
	}
	for i := range keys / 2 {
		write(a, i)
	}
	for i := range keys {
		write(b, i)
	}
	for i := keys / 2; i < keys; i++ {
		write(a, i)
	}
	stamps := a.stamps(t)
	for op, ts := range b.stamps(t) {
		stamps[op] = ts
	}

	// a's writes arrive first, b's second.
	a.online()
	a.waitSynced(t)
	b.online()
	b.waitSynced(t)

	serverState := s.serverRecords(t, a.token, model)
	conflicts := s.conflicts(t, model)
	seqs := map[string]uint64{}
	for _, e := range s.oplog(t) {
		seqs[e.OpID] = e.Seq
	}
	wins := map[string]int{}                 // device -> races won
	losses := map[client.OutcomeStatus]int{} // how the losers ended
	for k, two := range edits {
		require.Len(t, two, 2)
		win, lose := two[0], two[1]
		if stamps[win.op].Compare(stamps[lose.op]) < 0 {
			win, lose = lose, win
		}
		wins[win.dev.id]++
		require.JSONEq(t, fmt.Sprintf(`{"by":%q}`, win.dev.id), string(serverState[k].Value), "key %s: the newer write stands", k)
		ow := win.dev.await(t, win.op)
		require.Equal(t, client.StatusApplied, ow.Status)
		require.Equal(t, serverState[k].Version, ow.Version)
		lost := lose.dev.await(t, lose.op)
		losses[lost.Status]++
		// Whichever arrived first, the race is in the conflict log with
		// the loser and the winner named.
		var row *adminapi.Conflict
		for i := range conflicts {
			if conflicts[i].Loser.OpID == lose.op {
				row = &conflicts[i]
			}
		}
		require.NotNil(t, row, "key %s: the losing write %s (%s) is not in the conflict log", k, lose.op, lost.Status)
		require.Equal(t, k, row.Key)
		require.Equal(t, syncproto.PolicyLWW, row.Policy)
		require.Equal(t, win.op, row.Winner.OpID, "key %s: the logged winner", k)
		switch lost.Status {
		case client.StatusSuperseded: // arrived second
			require.NotNil(t, lost.Winner)
			require.Equal(t, ow.Version, lost.Winner.Version)
			require.JSONEq(t, string(serverState[k].Value), string(lost.Winner.Value))
		case client.StatusApplied: // arrived first, then overwritten
			require.Less(t, seqs[lose.op], seqs[win.op], "key %s: the winner follows the overwritten loser in the oplog", k)
		default:
			require.Failf(t, "unexpected outcome", "key %s: the losing write ended %+v", k, lost)
		}
	}
	t.Logf("races won: %v; losers ended: %v", wins, losses)
	require.Positive(t, losses[client.StatusSuperseded], "no loser arrived second")
	require.Positive(t, losses[client.StatusApplied], "no loser arrived first")
	for _, d := range []*device{a, b} {
		require.Eventually(t, func() bool { return d.convergesWithServer(t, s, model) }, waitFor, pollTick, "%s converges", d.id)
		d.requireMatchesServer(t, s, model)
	}
}

// Two devices write the same record of an optimistic model from the same
// base version. The second to sync is refused; its conflict handler gets
// the winner and rebases onto it, and the rebased write lands on top.
func TestOptimisticConflictRebased(t *testing.T) {
	const model = "docs"
	s := startSyncd(t, server.Config{Policies: replication.Config{model: syncproto.PolicyOptimistic}})
	conflicts := make(chan client.Conflict, 4)
	rebase := func(ctx context.Context, c client.Conflict) client.Resolution {
		conflicts <- c
		var mine, theirs struct{ Lines []string }
		if json.Unmarshal(c.Value, &mine) != nil || json.Unmarshal(c.Winner.Value, &theirs) != nil {
			return client.Drop()
		}
		merged, err := json.Marshal(struct{ Lines []string }{append(theirs.Lines, mine.Lines[len(mine.Lines)-1])})
		if err != nil {
			return client.Drop()
		}
		return client.Rebase(merged)
	}
	a := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-a", deviceOptions{})
	b := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-b", deviceOptions{tweak: func(c *client.Config) { c.ConflictHandler = rebase }})

	created, err := a.PutIfVersion(t.Context(), model, "d1", json.RawMessage(`{"Lines":["base"]}`), 0)
	require.NoError(t, err)
	require.Equal(t, uint64(1), a.await(t, created).Version)
	require.Eventually(t, func() bool { return b.convergesWithServer(t, s, model) }, waitFor, pollTick)

	a.offline()
	b.offline()
	fromA, err := a.PutIfVersion(t.Context(), model, "d1", json.RawMessage(`{"Lines":["base","from a"]}`), 1)
	require.NoError(t, err)
	fromB, err := b.PutIfVersion(t.Context(), model, "d1", json.RawMessage(`{"Lines":["base","from b"]}`), 1)
	require.NoError(t, err)

	a.online()
	oa := a.await(t, fromA)
	require.Equal(t, client.StatusApplied, oa.Status)
	require.Equal(t, uint64(2), oa.Version)

	b.online()
	ob := b.await(t, fromB)
	require.Equal(t, client.StatusConflict, ob.Status)
	require.NotNil(t, ob.Winner)
	require.Equal(t, uint64(2), ob.Winner.Version)
	require.NotEmpty(t, ob.RebasedAs)

	require.Len(t, conflicts, 1, "the handler decides the conflict once")
	c := <-conflicts
	require.Equal(t, fromB, c.OpID)
	require.Equal(t, "d1", c.Key)
	require.Equal(t, uint64(1), c.BaseVersion)
	require.JSONEq(t, `{"Lines":["base","from b"]}`, string(c.Value))
	require.Equal(t, uint64(2), c.Winner.Version)
	require.JSONEq(t, `{"Lines":["base","from a"]}`, string(c.Winner.Value))

	rebased := b.await(t, ob.RebasedAs)
	require.Equal(t, client.StatusApplied, rebased.Status)
	require.Equal(t, c.Winner.Version+1, rebased.Version)
	serverState := s.serverRecords(t, b.token, model)
	require.Equal(t, uint64(3), serverState["d1"].Version)
	require.JSONEq(t, `{"Lines":["base","from a","from b"]}`, string(serverState["d1"].Value))
	s.requireAppliedOnce(t, []string{created, fromA, ob.RebasedAs})
	require.Zero(t, s.oplogCounts(t)[fromB], "the refused write is not in the oplog")

	logged := false
	for _, e := range s.conflicts(t, model) {
		logged = logged || (e.Loser.OpID == fromB && e.Policy == syncproto.PolicyOptimistic && e.Winner.Version == 2)
	}
	require.True(t, logged, "the refused write is in the conflict log")
	for _, d := range []*device{a, b} {
		require.Eventually(t, func() bool { return d.convergesWithServer(t, s, model) }, waitFor, pollTick, "%s converges", d.id)
	}
}
