package cluster

import (
	"testing"

	"github.com/stretchr/testify/require"
)

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
			require.Equal(t, tc.want, disagreement(tc.mine, []map[string]string{older, older}, absent))
		})
	}
	// Without absent values a part no peer publishes is not compared.
	require.Nil(t, disagreement(map[string]string{"tokens": "t1", "scopes": "s1"}, []map[string]string{older, older}, nil))
	// Among nodes that publish a part, the majority's value stands.
	newer := map[string]string{"tokens": "t1", "models": "m1", "scopes": "s1", "jwt": "j2"}
	require.Equal(t, []string{"jwt", "scopes"}, disagreement(map[string]string{"tokens": "t1", "models": "m1", "scopes": "none", "jwt": "j1"},
		[]map[string]string{newer, newer, older}, absent))
}
