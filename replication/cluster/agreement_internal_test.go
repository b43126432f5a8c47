package cluster

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/fakeclock"
)

// outvoted is compare's outvoted parts, without generations.
func outvoted(mine map[string]string, peers []map[string]string, absent map[string]string) []string {
	return compare(mine, peers, absent, nil).outvoted
}

// TestAPeerWithoutAPartCountsWithItsAbsentValue: a node of a release
// before a part of the agreement (it does not publish the part) counts
// with the value AgreementAbsent gives the part, so a newer node whose
// setting the older ones cannot share is outvoted by them; a part without
// such a value is compared only among the nodes that publish it.
func TestAPeerWithoutAPartCountsWithItsAbsentValue(t *testing.T) {
	older := map[string]string{"tokens": "t1", "models": "m1"} // publishes neither "scopes" nor "jwt"
	absent := map[string]string{"scopes": "none"}
	for _, tc := range []struct {
		name string
		mine map[string]string
		want []string
	}{
		{"declares no scopes, as the older nodes", map[string]string{"tokens": "t1", "models": "m1", "scopes": "none", "jwt": "j1"}, nil},
		{"declares scopes the older nodes cannot", map[string]string{"tokens": "t1", "models": "m1", "scopes": "s1", "jwt": "j1"}, []string{"scopes"}},
		{"another token file", map[string]string{"tokens": "t2", "models": "m1", "scopes": "none", "jwt": "j1"}, []string{"tokens"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, outvoted(tc.mine, []map[string]string{older, older}, absent))
		})
	}
	// Without absent values a part no peer publishes is not compared.
	require.Nil(t, outvoted(map[string]string{"tokens": "t1", "scopes": "s1"}, []map[string]string{older, older}, nil))
	// Among nodes that publish a part, the majority's value stands.
	newer := map[string]string{"tokens": "t1", "models": "m1", "scopes": "s1", "jwt": "j2"}
	require.Equal(t, []string{"jwt", "scopes"}, outvoted(map[string]string{"tokens": "t1", "models": "m1", "scopes": "none", "jwt": "j1"},
		[]map[string]string{newer, newer, older}, absent))
}

// tokensAt is the parts of a node whose token file has contents digest
// at generation gen ("" publishes no generation: a release before them).
func tokensAt(digest, gen string) map[string]string {
	parts := map[string]string{"tokens": digest, "models": "m1"}
	if gen != "" {
		parts[GenerationPart("tokens")] = gen
	}
	return parts
}

// TestAGenerationTellsWhichNodeIsBehind: with the token file's generation
// published beside its digest, a node of a lower generation than a live
// peer's is behind (not outvoted, whatever the majority), a node of the
// newest generation is never outvoted by nodes behind it, nodes of the
// same generation with other contents are compared by majority as
// before, and a peer of a release before generations is counted by its
// digest alone; with two files graded (the token file and the deny list),
// each is judged apart.
func TestAGenerationTellsWhichNodeIsBehind(t *testing.T) {
	graded := []string{"tokens", "jwt_deny"}
	for _, tc := range []struct {
		name         string
		mine         map[string]string
		peers        []map[string]string
		wantOutvoted []string
		wantBehind   map[string]generations
		wantDiffers  bool
	}{
		{"all alike", tokensAt("a", "5"), []map[string]string{tokensAt("a", "5"), tokensAt("a", "5")}, nil, map[string]generations{}, false},
		{"the newest, alone: both others behind it", tokensAt("b", "6"), []map[string]string{tokensAt("a", "5"), tokensAt("a", "5")}, nil, map[string]generations{}, true},
		{"behind the one that has the change", tokensAt("a", "5"), []map[string]string{tokensAt("b", "6"), tokensAt("a", "5")}, nil, map[string]generations{"tokens": {5, 6}}, true},
		{"behind by several", tokensAt("a", "1"), []map[string]string{tokensAt("b", "3"), tokensAt("c", "4")}, nil, map[string]generations{"tokens": {1, 4}}, true},
		{"same generation, other contents, outvoted", tokensAt("x", "6"), []map[string]string{tokensAt("b", "6"), tokensAt("b", "6")}, []string{"tokens"}, map[string]generations{}, true},
		{"same generation, other contents, a tie with one peer", tokensAt("x", "6"), []map[string]string{tokensAt("b", "6"), tokensAt("a", "5")}, []string{"tokens"}, map[string]generations{}, true},
		{"same generation, majority", tokensAt("b", "6"), []map[string]string{tokensAt("b", "6"), tokensAt("x", "6")}, nil, map[string]generations{}, true},
		{"older releases count by digest: outvoted", tokensAt("b", "6"), []map[string]string{tokensAt("a", ""), tokensAt("a", "")}, []string{"tokens"}, map[string]generations{}, true},
		{"older releases count by digest: agreed", tokensAt("a", "6"), []map[string]string{tokensAt("a", ""), tokensAt("b", "5")}, nil, map[string]generations{}, true},
		{"an older release with the same file", tokensAt("a", "6"), []map[string]string{tokensAt("a", ""), tokensAt("a", "6")}, nil, map[string]generations{}, false},
		{"a peer's unreadable generation counts as none", tokensAt("a", "6"), []map[string]string{tokensAt("a", "x"), tokensAt("a", "6")}, nil, map[string]generations{}, true},
		// With the deny list graded too (syncd's jwt_deny): a list
		// rewritten on one node first leaves it neither outvoted nor
		// behind; the nodes the copy has not reached are behind in that
		// part alone; each file is judged apart.
		{"the deny list rewritten here first", nodeAt("a", "5", "d2", "8"),
			[]map[string]string{nodeAt("a", "5", "d1", "7"), nodeAt("a", "5", "d1", "7")}, nil, map[string]generations{}, true},
		{"the deny list's copy has not reached this node", nodeAt("a", "5", "d1", "7"),
			[]map[string]string{nodeAt("a", "5", "d2", "8"), nodeAt("a", "5", "d1", "7")}, nil, map[string]generations{"jwt_deny": {7, 8}}, true},
		{"newest tokens, behind deny list", nodeAt("b", "6", "d1", "7"),
			[]map[string]string{nodeAt("a", "5", "d2", "8"), nodeAt("a", "5", "d2", "8")}, nil, map[string]generations{"jwt_deny": {7, 8}}, true},
		{"behind in both files", nodeAt("a", "5", "d1", "7"),
			[]map[string]string{nodeAt("b", "6", "d2", "8"), nodeAt("b", "6", "d2", "8")}, nil, map[string]generations{"tokens": {5, 6}, "jwt_deny": {7, 8}}, true},
		{"a deny list edited by hand: same generation, other contents", nodeAt("a", "5", "dx", "8"),
			[]map[string]string{nodeAt("a", "5", "d2", "8"), nodeAt("a", "5", "d2", "8")}, []string{"jwt_deny"}, map[string]generations{}, true},
		{"a peer that publishes no deny list part is not counted for it", nodeAt("a", "5", "d1", "0"),
			[]map[string]string{nodeAt("a", "5", "d1", "0"), tokensAt("a", "5")}, nil, map[string]generations{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := compare(tc.mine, tc.peers, nil, graded)
			require.Equal(t, tc.wantOutvoted, got.outvoted)
			require.Equal(t, tc.wantBehind, got.behind)
			require.Equal(t, tc.wantDiffers, got.differs)
		})
	}
	// A shared file rewritten again and again, each node having read
	// another version: by digest alone it is a three-way tie and every
	// node is outvoted (each would stop serving: the flap of issuing on a
	// cluster); by generation, the newest serves and the others are behind.
	three := []map[string]string{tokensAt("a", "5"), tokensAt("b", "6"), tokensAt("c", "7")}
	for i, mine := range three {
		peers := append(append([]map[string]string(nil), three[:i]...), three[i+1:]...)
		require.Equal(t, []string{"tokens", "tokens_generation"}, outvoted(mine, peers, nil), "by digest alone")
		got := compare(mine, peers, nil, graded)
		require.Nil(t, got.outvoted, "by generation")
		if i < 2 {
			require.Equal(t, map[string]generations{"tokens": {uint64(5 + i), 7}}, got.behind)
		} else {
			require.Empty(t, got.behind, "the newest")
		}
	}
	// Without generations declared, the generation is a part as any.
	require.Equal(t, []string{"tokens", "tokens_generation"}, outvoted(tokensAt("a", "5"), []map[string]string{tokensAt("b", "6"), tokensAt("b", "6")}, nil))
}

// graceNode is a Cluster with what checkAgreement reads: the generations
// and grace of its options, a fake clock, its metrics.
func graceNode(t *testing.T, grace time.Duration) (*Cluster, *fakeclock.Clock) {
	t.Helper()
	return graceNodeOf(t, grace, fakeclock.New(time.Unix(1_000_000, 0)), "tokens")
}

// graceNodeOf is graceNode with the parts that carry a generation, on
// clock.
func graceNodeOf(t *testing.T, grace time.Duration, clock *fakeclock.Clock, generations ...string) (*Cluster, *fakeclock.Clock) {
	t.Helper()
	reg := prometheus.NewRegistry()
	o := Options{Generations: generations, GenerationGrace: grace, Now: clock.Now}
	require.NoError(t, o.validateGenerations())
	c := &Cluster{opts: o, log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: newMetrics(nil), agr: newAgreementBook(o.Generations, reg)}
	return c, clock
}

// TestABehindNodeServesForTheGraceThenRefuses: a node behind a peer's
// generation serves (Ready nil) while the grace lasts, refuses naming the
// part and both generations once it is over, and serves again once it
// caught up; a spell ended within the grace counts as caught up, one that
// ran out as expired, and the refusal once.
func TestABehindNodeServesForTheGraceThenRefuses(t *testing.T) {
	c, clock := graceNode(t, 10*time.Second)
	mine := tokensAt("a", "5")
	behind := comparison{behind: map[string]generations{"tokens": {5, 6}}}

	c.checkAgreement(mine, behind)
	require.NoError(t, c.Ready(), "behind, within the grace")
	require.Equal(t, 1.0, testutil.ToFloat64(c.agr.behindG.WithLabelValues("tokens")))
	require.Equal(t, 5.0, testutil.ToFloat64(c.agr.generation.WithLabelValues("tokens")))
	clock.Advance(9 * time.Second)
	c.checkAgreement(mine, behind)
	require.NoError(t, c.Ready(), "still within the grace")
	clock.Advance(time.Second)
	c.checkAgreement(mine, comparison{})
	require.NoError(t, c.Ready(), "caught up")
	require.Equal(t, 0.0, testutil.ToFloat64(c.agr.behindG.WithLabelValues("tokens")))
	require.Equal(t, 1.0, testutil.ToFloat64(c.agr.graceEnds.WithLabelValues("tokens", graceCaughtUp)))

	c.checkAgreement(mine, behind)
	clock.Advance(10 * time.Second)
	c.checkAgreement(mine, behind)
	err := c.Ready()
	require.ErrorIs(t, err, ErrConfigMismatch, "the grace is over")
	var mm *MismatchError
	require.True(t, errors.As(err, &mm))
	require.Equal(t, []Behind{{Part: "tokens", Have: 5, Newest: 6, Grace: 10 * time.Second}}, mm.Behind)
	require.Contains(t, err.Error(), "tokens is at generation 5, behind a live peer's 6 for longer than the 10s grace")
	clock.Advance(2 * time.Second)
	c.checkAgreement(mine, behind)
	require.Error(t, c.Ready())
	require.Equal(t, 1.0, testutil.ToFloat64(c.agr.graceEnds.WithLabelValues("tokens", graceExpired)), "one spell, one expiry")
	require.Equal(t, 1.0, testutil.ToFloat64(c.agr.refusals), "one refusal")

	c.checkAgreement(tokensAt("b", "6"), comparison{})
	require.NoError(t, c.Ready(), "caught up after the grace")
	require.Equal(t, 6.0, testutil.ToFloat64(c.agr.generation.WithLabelValues("tokens")))
	require.Equal(t, 1.0, testutil.ToFloat64(c.agr.graceEnds.WithLabelValues("tokens", graceCaughtUp)), "an expired spell is not also caught up")
	require.Equal(t, 0.0, testutil.ToFloat64(c.metrics.configMismatch))
}

// TestAnOutvotedPartStillWaitsForARoundOfSurveys: a part outvoted (same
// generation, other contents; or a part without generation) refuses after
// mismatchSurveys surveys in a row, as before generations, whatever the
// grace.
func TestAnOutvotedPartStillWaitsForARoundOfSurveys(t *testing.T) {
	c, _ := graceNode(t, MaxGenerationGrace)
	out := comparison{outvoted: []string{"tokens"}}
	for range mismatchSurveys - 1 {
		c.checkAgreement(tokensAt("x", "6"), out)
		require.NoError(t, c.Ready())
	}
	c.checkAgreement(tokensAt("x", "6"), out)
	require.ErrorContains(t, c.Ready(), "tokens differ from the majority of the live nodes'")
}

// TestGenerationGraceIsBounded: 0 is the default, a negative grace or one
// above MaxGenerationGrace is refused.
func TestGenerationGraceIsBounded(t *testing.T) {
	o := Options{}
	require.NoError(t, o.validateGenerations())
	require.Equal(t, DefaultGenerationGrace, o.GenerationGrace)
	for _, bad := range []time.Duration{-time.Second, MaxGenerationGrace + time.Second} {
		o := Options{GenerationGrace: bad}
		require.ErrorContains(t, o.validateGenerations(), "generation grace")
	}
	o = Options{GenerationGrace: MaxGenerationGrace}
	require.NoError(t, o.validateGenerations())
}

// nodeAt is the parts of a node with two files that carry a generation, as
// syncd's: its token file (contents tokens at generation tokensGen) and
// its JWT deny list (deny at denyGen).
func nodeAt(tokens, tokensGen, deny, denyGen string) map[string]string {
	parts := tokensAt(tokens, tokensGen)
	parts["jwt_deny"], parts[GenerationPart("jwt_deny")] = deny, denyGen
	return parts
}

// TestADenyListRolledOutNodeByNode plays an operator's rollout of a new
// deny list (a revocation, generation 7 to 8) to three nodes that each
// read their own copy, surveying every node every 2 s of a fake clock
// with a 10 s grace: node-1, copied first, never refuses (by digest alone
// it would, outvoted two to one, until the copy reached another node);
// node-2, copied at 4 s, never refuses either; node-3, never copied,
// serves inside the grace and refuses once it is over, naming the deny
// list and both generations, and serves again at its first survey with
// the copy.
func TestADenyListRolledOutNodeByNode(t *testing.T) {
	const grace = 10 * time.Second
	clock := fakeclock.New(time.Unix(1_000_000, 0))
	graded := []string{"tokens", "jwt_deny"}
	nodes := make([]*Cluster, 3)
	for i := range nodes {
		nodes[i], _ = graceNodeOf(t, grace, clock, graded...)
	}
	parts := []map[string]string{nodeAt("a", "5", "d1", "7"), nodeAt("a", "5", "d1", "7"), nodeAt("a", "5", "d1", "7")}
	copied := map[int]time.Duration{0: 0, 1: 4 * time.Second, 2: 16 * time.Second}
	start := clock.Now()
	var refusedAt time.Duration
	for elapsed := time.Duration(0); elapsed <= 20*time.Second; elapsed += 2 * time.Second {
		for i, at := range copied {
			if elapsed >= at {
				parts[i] = nodeAt("a", "5", "d2", "8")
			}
		}
		for i, c := range nodes {
			var peers []map[string]string
			for j, p := range parts {
				if j != i {
					peers = append(peers, p)
				}
			}
			c.checkAgreement(parts[i], compare(parts[i], peers, nil, graded))
		}
		require.NoError(t, nodes[0].Ready(), "node-1, the first with the new list, at %s", elapsed)
		require.NoError(t, nodes[1].Ready(), "node-2, copied within the grace, at %s", elapsed)
		switch err := nodes[2].Ready(); {
		case elapsed < grace:
			require.NoError(t, err, "node-3 inside the grace, at %s", elapsed)
		case elapsed < copied[2]:
			require.ErrorIs(t, err, ErrConfigMismatch, "node-3 past the grace, at %s", elapsed)
			require.ErrorContains(t, err, "jwt_deny is at generation 7, behind a live peer's 8 for longer than the 10s grace")
			if refusedAt == 0 {
				refusedAt = elapsed
			}
		default:
			require.NoError(t, err, "node-3 with the copy, at %s", elapsed)
		}
		clock.Advance(2 * time.Second)
	}
	require.Equal(t, grace, refusedAt, "node-3 refused at the first survey past the grace")
	require.Equal(t, 20*time.Second+2*time.Second, clock.Now().Sub(start))
	for i, c := range nodes {
		require.Equal(t, 8.0, testutil.ToFloat64(c.agr.generation.WithLabelValues("jwt_deny")), "node-%d", i+1)
		require.Equal(t, 0.0, testutil.ToFloat64(c.agr.behindG.WithLabelValues("jwt_deny")), "node-%d", i+1)
		require.Equal(t, 0.0, testutil.ToFloat64(c.agr.behindG.WithLabelValues("tokens")), "node-%d: the token file was never behind", i+1)
	}
	require.Zero(t, testutil.ToFloat64(nodes[0].agr.refusals))
	require.Zero(t, testutil.ToFloat64(nodes[1].agr.refusals))
	require.Equal(t, 1.0, testutil.ToFloat64(nodes[1].agr.graceEnds.WithLabelValues("jwt_deny", graceCaughtUp)))
	require.Equal(t, 1.0, testutil.ToFloat64(nodes[2].agr.refusals))
	require.Equal(t, 1.0, testutil.ToFloat64(nodes[2].agr.graceEnds.WithLabelValues("jwt_deny", graceExpired)))

	// By digest alone (no generations), node-1 with the new list is
	// outvoted two to one until the copy reaches another node: the flap.
	require.Equal(t, []string{"jwt_deny", "jwt_deny_generation"},
		outvoted(nodeAt("a", "5", "d2", "8"), []map[string]string{nodeAt("a", "5", "d1", "7"), nodeAt("a", "5", "d1", "7")}, nil))
}
