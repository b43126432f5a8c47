package checker_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/soak/checker"
	"github.com/syncd-dev/syncd/soak/journal"
	"github.com/syncd-dev/syncd/syncproto"
)

// A scoped write refused forbidden_scope (its writer lost the value
// meanwhile) may be dead-lettered; the run stays accounted for.
func TestScopedWriteRefusedForbiddenScopeIsAccounted(t *testing.T) {
	s := fixture()
	a := client(s, "a")
	a.Journal[5].Class = journal.ClassScoped
	o := a.Replica.Outcomes[a.Journal[5].OpID]
	o.Reason = "forbidden_scope: scope project value p2 is not granted"
	a.Replica.Outcomes[a.Journal[5].OpID] = o
	for _, v := range checker.Check(s).Verdicts {
		require.True(t, v.Holds, "invariant %d: %v", int(v.Invariant), v.Evidence)
	}
}

// scopedFixture is the fixture with scope project declared over docs (and
// its membership model members): docs/d1 is in project p1, and a membership
// row of members grants p1 to user ua, whose device is client a (its token
// grants nothing) and holds both rows. b may not read docs.
func scopedFixture() *checker.State {
	s := fixture()
	s.Server.Scopes = []checker.Scope{{Name: "project", Models: []string{"docs", "members"}, Membership: "members"}}
	for i := range s.Server.Records {
		if r := &s.Server.Records[i]; r.Model == "docs" {
			r.ScopeValue = "p1"
		}
	}
	member := []byte(`{"user":"ua","project_id":"p1"}`)
	s.Server.Records = append(s.Server.Records, checker.Record{Tenant: tenant, Model: "members", Key: "m1", Value: member, Version: 1, ScopeValue: "p1", Member: "ua"})
	a := client(s, "a")
	a.User = "ua"
	a.Replica.Records = append(a.Replica.Records, checker.ReplicaRecord{Model: "members", Key: "m1", Value: member, Version: 1})
	return s
}

// converged returns the Converged verdict of s.
func converged(s *checker.State) checker.Verdict {
	for _, v := range checker.Check(s).Verdicts {
		if v.Invariant == checker.Converged {
			return v
		}
	}
	panic("no Converged verdict")
}

// The Converged invariant, in scoped models, expects exactly the rows of
// the values a client follows (token or membership grants, requested) and
// calls any other row a leak.
func TestConvergedFiltersScopedModelsByGrants(t *testing.T) {
	v := converged(scopedFixture())
	require.True(t, v.Holds, "membership grants p1 to a's user: %v", v.Evidence)

	for name, tc := range map[string]struct {
		doctor   func(s *checker.State)
		evidence string
	}{
		"the grant was revoked and the row stayed": {
			doctor: func(s *checker.State) {
				for i := range s.Server.Records {
					if r := &s.Server.Records[i]; r.Model == "members" {
						r.Deleted, r.Member = true, ""
					}
				}
			},
			evidence: `a holds docs/d1, whose scope value "p1" it does not follow (not granted, or not requested): a leak`,
		},
		"the row moved to a value not granted and stayed": {
			doctor: func(s *checker.State) {
				for i := range s.Server.Records {
					if r := &s.Server.Records[i]; r.Model == "docs" {
						r.ScopeValue = "p2"
					}
				}
			},
			evidence: `a holds docs/d1, whose scope value "p2" it does not follow`,
		},
		"a value granted but not requested": {
			doctor: func(s *checker.State) {
				client(s, "a").Want = syncproto.ScopeSet{"project": {"p2"}}
			},
			evidence: "a leak",
		},
		"a followed row missing from the replica": {
			doctor: func(s *checker.State) {
				a := client(s, "a")
				a.Grants = syncproto.ScopeSet{"project": {"*"}}
				a.User = ""
				a.Replica.Records = a.Replica.Records[:2:2]
				a.Replica.Records = append(a.Replica.Records, checker.ReplicaRecord{Model: "members", Key: "m1", Value: []byte(`{"user":"ua","project_id":"p1"}`), Version: 1})
			},
			evidence: "a: docs/d1 is version 2",
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := scopedFixture()
			tc.doctor(s)
			v := converged(s)
			require.False(t, v.Holds)
			require.True(t, strings.Contains(strings.Join(v.Evidence, "\n"), tc.evidence), "evidence: %v", v.Evidence)
		})
	}

	// A token grant stands in for the membership row, and a request of
	// every value follows every value granted.
	s := scopedFixture()
	a := client(s, "a")
	a.User, a.Grants, a.Want = "", syncproto.ScopeSet{"project": {"p1"}}, syncproto.ScopeSet{"project": {"*"}}
	require.True(t, converged(s).Holds)
}
