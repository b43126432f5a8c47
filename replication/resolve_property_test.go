package replication_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	r "github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// randomWrites returns n proposals to one key with distinct HLCs drawn from
// a small range (so walls and logicals collide often and ties break on
// origin), random ops, and random, mostly stale, base versions.
func randomWrites(rng *rand.Rand, n int) []r.Proposal {
	origins := []string{"A", "a", "b", "client-1", "client-2"}
	seen := map[syncproto.Timestamp]bool{}
	ps := make([]r.Proposal, 0, n)
	for i := 0; len(ps) < n; i++ {
		hlc := ts(1000+rng.Int64N(5), uint32(rng.IntN(3)), origins[rng.IntN(len(origins))])
		if seen[hlc] {
			continue
		}
		seen[hlc] = true
		var base *uint64
		if rng.IntN(2) == 0 {
			base = ptr(uint64(rng.IntN(n)))
		}
		p := put(hlc, base)
		p.OpID = fmt.Sprintf("op-%d", i)
		p.Value = []byte(fmt.Sprintf(`{"i":%d}`, i))
		if rng.IntN(4) == 0 {
			p.Op, p.Value = syncproto.OpDelete, nil
		}
		ps = append(ps, p)
	}
	return ps
}

// TestLWWConvergesOnMaxHLC applies random writes to one key in random
// orders through Resolve and checks that, whatever the order, the key ends
// as the write with the highest HLC, every version step is +1, and every
// write that did not end up as the state is accounted for: superseded with
// a conflict row, or applied and later overwritten.
func TestLWWConvergesOnMaxHLC(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		writes := randomWrites(rng, 2+rng.IntN(12))
		for i := range writes {
			// Unconditional writes: a conditional one with a stale base is
			// refused whatever its HLC (TestResolve covers that).
			writes[i].BaseVersion = nil
		}
		maxW := writes[0]
		for _, w := range writes[1:] {
			if w.HLC.Compare(maxW.HLC) > 0 {
				maxW = w
			}
		}
		for range 3 {
			order := rng.Perm(len(writes))
			var (
				cur     r.Record
				exists  bool
				applied int
			)
			for _, i := range order {
				p := writes[i]
				d, err := r.Resolve(syncproto.PolicyLWW, cur, exists, p)
				require.NoError(t, err, "seed %d", seed)
				switch d.Outcome {
				case r.OutcomeApplied:
					require.Equal(t, cur.Version+1, d.Record.Version, "seed %d: version gap", seed)
					require.Positive(t, p.HLC.Compare(cur.HLC), "seed %d: applied a write not newer than the state", seed)
					cur, exists = d.Record, true
					applied++
				case r.OutcomeSuperseded:
					require.NotNil(t, d.Conflict, "seed %d: superseded without a conflict row", seed)
					require.Equal(t, p.OpID, d.Conflict.Loser.OpID, "seed %d", seed)
					require.Equal(t, cur, d.Winner, "seed %d", seed)
				default:
					t.Fatalf("seed %d: LWW decided %s", seed, d.Outcome)
				}
			}
			require.Equal(t, maxW.OpID, cur.OpID, "seed %d: final state is not the max-HLC write", seed)
			require.Equal(t, maxW.HLC, cur.HLC, "seed %d", seed)
			require.Equal(t, maxW.Value, cur.Value, "seed %d", seed)
			require.Equal(t, maxW.Op == syncproto.OpDelete, cur.Deleted, "seed %d", seed)
			require.Equal(t, uint64(applied), cur.Version, "seed %d: versions are not gap-free", seed)
		}
	}
}

// TestOptimisticVersionsGapFree runs clients that each write on top of the
// version they last saw (sometimes stale) and rebase on conflict: a write
// applies exactly when its base is current, and versions count the applied
// writes with no gap.
func TestOptimisticVersionsGapFree(t *testing.T) {
	for seed := range uint64(100) {
		rng := rand.New(rand.NewPCG(seed, 0x0971))
		var (
			cur     r.Record
			exists  bool
			applied uint64
		)
		seen := make([]uint64, 4) // each client's last known version
		for i := range 60 {
			c := rng.IntN(len(seen))
			p := put(ts(int64(i+1), 0, "c"), ptr(seen[c]))
			p.OpID = fmt.Sprintf("op-%d", i)
			if exists && rng.IntN(5) == 0 {
				p.Op, p.Value = syncproto.OpDelete, nil
			}
			d, err := r.Resolve(syncproto.PolicyOptimistic, cur, exists, p)
			require.NoError(t, err, "seed %d", seed)
			if seen[c] == cur.Version {
				require.Equal(t, r.OutcomeApplied, d.Outcome, "seed %d step %d", seed, i)
				require.Equal(t, cur.Version+1, d.Record.Version, "seed %d step %d", seed, i)
				cur, exists = d.Record, true
				applied++
				seen[c] = cur.Version
				continue
			}
			require.Equal(t, r.OutcomeConflict, d.Outcome, "seed %d step %d", seed, i)
			require.Equal(t, cur.Version, d.Winner.Version, "seed %d step %d", seed, i)
			seen[c] = d.Winner.Version // rebase
		}
		require.Equal(t, applied, cur.Version, "seed %d", seed)
	}
}

// FuzzResolve checks the invariants every decision keeps, for arbitrary
// current records and proposals: an error decides nothing; an applied
// write gets the next version and the proposal's content; LWW supersedes
// only a write whose HLC is not newer, optimistic refuses only a stale
// base; every loser is the proposal (or, for an LWW overwrite, the
// current state).
func FuzzResolve(f *testing.F) {
	f.Add(true, false, true, uint64(3), int64(1000), uint32(0), "b", int64(2000), uint32(0), "a", true, false, uint64(0))
	f.Add(false, true, true, uint64(3), int64(1000), uint32(0), "b", int64(500), uint32(1), "a", false, true, uint64(3))
	f.Add(true, false, false, uint64(0), int64(0), uint32(0), "", int64(1), uint32(0), "c", true, true, uint64(0))
	f.Add(true, true, true, uint64(7), int64(10), uint32(2), "x", int64(10), uint32(2), "x", true, true, uint64(6))
	f.Fuzz(func(t *testing.T, lww, curDeleted, exists bool, curVersion uint64, curWall int64, curLogical uint32, curOrigin string,
		wall int64, logical uint32, origin string, isPut, hasBase bool, base uint64) {
		policy := syncproto.PolicyOptimistic
		if lww {
			policy = syncproto.PolicyLWW
		}
		cur := r.Record{Tenant: "t1", Model: "notes", Key: "k", Version: curVersion, HLC: ts(curWall, curLogical, curOrigin), Deleted: curDeleted, OpID: "op-cur"}
		if !curDeleted {
			cur.Value = []byte(`1`)
		}
		var p r.Proposal
		if isPut {
			p = put(ts(wall, logical, origin), nil)
		} else {
			p = del(ts(wall, logical, origin), nil)
		}
		if hasBase {
			p.BaseVersion = &base
		}
		d, err := r.Resolve(policy, cur, exists, p)
		if err != nil {
			require.Equal(t, r.Decision{}, d)
			return
		}
		if !exists {
			cur = r.Record{}
		}
		switch d.Outcome {
		case r.OutcomeApplied:
			require.Equal(t, applied(p, cur.Version), d.Record)
			require.Nil(t, d.Conflict, "an applied write overwrote nothing it did not see")
			if p.BaseVersion != nil {
				require.Equal(t, cur.Version, *p.BaseVersion)
			}
		case r.OutcomeSuperseded:
			require.Equal(t, syncproto.PolicyLWW, policy)
			require.True(t, exists)
			require.LessOrEqual(t, p.HLC.Compare(cur.HLC), 0)
			require.Equal(t, cur, d.Winner)
			require.Equal(t, p.OpID, d.Conflict.Loser.OpID)
		case r.OutcomeConflict:
			require.NotNil(t, p.BaseVersion, "only a conditional write can conflict")
			require.NotEqual(t, cur.Version, *p.BaseVersion)
			require.Equal(t, cur, d.Winner)
			require.Equal(t, p.OpID, d.Conflict.Loser.OpID)
		default:
			t.Fatalf("unknown outcome %q", d.Outcome)
		}
	})
}
