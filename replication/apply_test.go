package replication_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	r "github.com/syncd-dev/syncd/replication"
)

// TestApplyPath drives random proposals from several clients through the
// whole apply path on a real database, several batches per transaction
// (group commit) and some transactions rolled back, then checks what a
// reader sees: gap-free seqs, versions per key 1..n with no gap, each
// record equal to its key's last entry, LWW keys at their max-HLC applied
// write, a conflict row for every loser, and a snapshot consistent with the
// log's head.
func TestApplyPath(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, r.Retention{}, r.Retention{})
	resolver, err := r.NewResolver(r.ResolverOptions{Policies: r.Config{"accounts": r.PolicyOptimistic}})
	require.NoError(t, err)
	applier := r.NewApplier(resolver, s.log, s.records, s.conflicts)
	rng := rand.New(rand.NewPCG(7, 11))

	type key struct{ model, key string }
	keys := []key{{"notes", "a"}, {"notes", "b"}, {"accounts", "x"}, {"accounts", "y"}}
	clients := []string{"c1", "c2", "c3"}
	seen := map[string]uint64{}         // client/model/key -> last version it saw
	committed := map[key][]r.Proposal{} // applied LWW writes
	var wantConflicts, rolledBack, opCount int
	outcomes := map[r.Outcome]int{}

	for txn := range 40 {
		tx, err := s.db.BeginTx(ctx, nil)
		require.NoError(t, err)
		var head uint64
		pendingSeen := map[string]uint64{}
		pendingApplied := map[key][]r.Proposal{}
		pendingConflicts := 0
		for range 1 + rng.IntN(3) { // batches sharing this transaction
			for range 1 + rng.IntN(5) {
				opCount++
				k, c := keys[rng.IntN(len(keys))], clients[rng.IntN(len(clients))]
				sk := c + "/" + k.model + "/" + k.key
				p := r.Proposal{
					Tenant: "t1", OpID: fmt.Sprintf("op-%d", opCount), Model: k.model, Key: k.key, Op: r.OpPut,
					Value: []byte(fmt.Sprintf(`{"n":%d}`, opCount)), ClientID: c,
					HLC:         ts(1000+rng.Int64N(50), uint32(rng.IntN(3)), c),
					BaseVersion: ptr(max(seen[sk], pendingSeen[sk])),
				}
				if rng.IntN(6) == 0 {
					p.Op, p.Value = r.OpDelete, nil
				}
				d, err := applier.Apply(ctx, tx, p)
				require.NoError(t, err)
				outcomes[d.Outcome]++
				switch d.Outcome {
				case r.OutcomeApplied:
					require.Positive(t, d.Record.Seq)
					head = d.Record.Seq
					pendingSeen[sk] = d.Record.Version
					pendingApplied[k] = append(pendingApplied[k], p)
				default:
					pendingSeen[sk] = d.Winner.Version
				}
				if d.Conflict != nil {
					require.Positive(t, d.Conflict.ID)
					pendingConflicts++
				}
			}
		}
		if txn%7 == 3 {
			require.NoError(t, tx.Rollback())
			rolledBack++
			continue
		}
		require.NoError(t, tx.Commit())
		if head > 0 {
			s.log.Committed(head)
		}
		for sk, v := range pendingSeen {
			seen[sk] = v
		}
		for k, ps := range pendingApplied {
			committed[k] = append(committed[k], ps...)
		}
		wantConflicts += pendingConflicts
	}
	require.Positive(t, rolledBack)
	for _, o := range []r.Outcome{r.OutcomeApplied, r.OutcomeSuperseded, r.OutcomeConflict} {
		require.Positive(t, outcomes[o], "the run never produced %s", o)
	}

	// The log: seqs 1..head without a gap; per key, versions 1..n.
	page := read(t, s, r.ReadRequest{Scope: r.Scope{Tenant: "t1", AllModels: true}, Limit: r.MaxReadLimit})
	require.True(t, page.CaughtUp())
	last := map[key]r.Entry{}
	for i, e := range page.Entries {
		require.Equal(t, uint64(i+1), e.Seq, "seq gap")
		k := key{e.Model, e.Key}
		require.Equal(t, last[k].Version+1, e.Version, "version gap on %v", k)
		last[k] = e
	}
	require.Equal(t, uint64(len(page.Entries)), page.Head)

	// The records: each is its key's last entry; LWW keys hold the max-HLC
	// write that was applied.
	var snap []r.Record
	head, err := s.records.Snapshot(ctx, r.Scope{Tenant: "t1", AllModels: true}, func(_ uint64, x r.Record) error {
		snap = append(snap, x)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, page.Head, head)
	require.Len(t, snap, len(last))
	for _, x := range snap {
		k := key{x.Model, x.Key}
		require.Equal(t, last[k].Record(), x)
		if x.Model == "notes" {
			maxW := committed[k][0]
			for _, p := range committed[k][1:] {
				if p.HLC.Compare(maxW.HLC) > 0 {
					maxW = p
				}
			}
			require.Equal(t, maxW.OpID, x.OpID, "LWW key %v is not at its max-HLC write", k)
		}
	}

	conflicts, err := s.conflicts.List(ctx, r.ConflictFilter{Scope: r.Scope{Tenant: "t1", AllModels: true}, Limit: r.MaxConflictListLimit})
	require.NoError(t, err)
	require.Len(t, conflicts, wantConflicts)
}

// TestApplyRefusesMalformed: a proposal its policy refuses is an error, and
// after the caller's rollback nothing of it is in the log or the records.
func TestApplyRefusesMalformed(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, r.Retention{}, r.Retention{})
	resolver, err := r.NewResolver(r.ResolverOptions{Policies: r.Config{"accounts": r.PolicyOptimistic}})
	require.NoError(t, err)
	applier := r.NewApplier(resolver, s.log, s.records, s.conflicts)

	tx, err := s.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	p := put(ts(1000, 0, "c1"), nil)
	p.Model = "accounts"
	_, err = applier.Apply(ctx, tx, p)
	require.ErrorIs(t, err, r.ErrBaseVersionRequired)
	require.NoError(t, tx.Rollback())

	b, err := s.log.Bounds(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(0), b.Head)
	inTx(t, s.db, func(tx *sql.Tx) error {
		_, exists, err := s.records.Get(ctx, tx, "t1", "accounts", "k")
		require.False(t, exists)
		return err
	})
}
