package auth_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server/auth"
)

// TestTokenFileGenerationGrowsWithEveryChange: every issue and revocation
// writes the next generation; a file written before generations (none in
// it) is read as generation 0, its tokens admitted, and its next change is
// generation 1; data that is not a token file is generation 0; a file at
// the largest generation is refused a change.
func TestTokenFileGenerationGrowsWithEveryChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	gen := func() uint64 {
		t.Helper()
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		return auth.Generation(data)
	}
	now := time.Now()
	member := auth.Principal{Tenant: "acme", ClientID: "phone", Read: []string{auth.Wildcard}}
	_, err := auth.Issue(path, member, now)
	require.NoError(t, err)
	require.Equal(t, uint64(1), gen(), "a new file")
	bearers, err := auth.IssueMany(path, []auth.Principal{member, member}, now)
	require.NoError(t, err)
	require.Equal(t, uint64(2), gen(), "one rewrite, one generation")
	require.NoError(t, auth.Revoke(path, auth.TokenIDOf(bearers[0])))
	require.Equal(t, uint64(3), gen())
	require.ErrorIs(t, auth.Revoke(path, auth.TokenIDOf(bearers[0])), auth.ErrNoSuchToken)
	require.Equal(t, uint64(3), gen(), "a refused change writes nothing")

	// A file of a release before generations.
	old := `{"version":1,"tokens":[{"token_id":"0a0b0c0d0e0f","tenant":"acme","client_id":"tablet","read":["*"],` +
		`"secret_sha256":"0000000000000000000000000000000000000000000000000000000000000000","created_at":"2026-01-01T00:00:00Z"}]}`
	require.NoError(t, os.WriteFile(path, []byte(old), 0o600))
	require.Equal(t, uint64(0), gen())
	tokens, err := auth.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, tokens, 1)
	_, err = auth.Issue(path, member, now)
	require.NoError(t, err)
	require.Equal(t, uint64(1), gen())
	tokens, err = auth.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, tokens, 2, "the old file's token is kept")

	for _, data := range []string{"", "not json", `{"generation":-1}`, `{"generation":"7"}`} {
		require.Zero(t, auth.Generation([]byte(data)), "%q", data)
	}

	// A file edited by hand to the largest generation is refused a change,
	// not wrapped to 0 (which every node would take for the oldest).
	last := strings.Replace(old, `{"version":1,`, `{"version":1,"generation":18446744073709551615,`, 1)
	require.NoError(t, os.WriteFile(path, []byte(last), 0o600))
	_, err = auth.Issue(path, member, now)
	require.ErrorContains(t, err, "largest there is")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, last, string(data), "a refused change writes nothing")
}

// TestDenyListGenerationGrowsWithEveryChange: every denial and every
// allow that removes an entry writes the next generation, which
// auth.Generation reads from the file's bytes as it reads the token
// file's; a refused change writes nothing; a deny list written before
// generations (none in it) loads with its entries as generation 0 and its
// next change is generation 1; a file at the largest generation is
// refused a change, not wrapped to 0.
func TestDenyListGenerationGrowsWithEveryChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deny.json")
	gen := func() uint64 {
		t.Helper()
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		return auth.Generation(data)
	}
	now := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	l, err := auth.Deny(path, auth.Denial{JTI: "t-1"}, now)
	require.NoError(t, err)
	require.Equal(t, uint64(1), l.Generation, "a new file")
	require.Equal(t, uint64(1), gen())
	require.NoError(t, auth.DenyUser(path, "alice", now))
	require.Equal(t, uint64(2), gen())
	_, err = auth.Allow(path, "", "alice", now)
	require.NoError(t, err)
	require.Equal(t, uint64(3), gen())
	_, err = auth.Allow(path, "", "alice", now)
	require.ErrorIs(t, err, auth.ErrNotDenied)
	_, err = auth.Deny(path, auth.Denial{}, now)
	require.ErrorIs(t, err, auth.ErrInvalidDenial)
	require.Equal(t, uint64(3), gen(), "a refused change writes nothing")
	read, err := auth.ReadDenyList(path)
	require.NoError(t, err)
	require.Equal(t, uint64(3), read.Generation)

	// A deny list of a release before generations.
	old := `{"version":1,"jtis":[{"jti":"t-0"}],"users":[]}`
	require.NoError(t, os.WriteFile(path, []byte(old), 0o600))
	require.Equal(t, uint64(0), gen())
	read, err = auth.ReadDenyList(path)
	require.NoError(t, err)
	require.Equal(t, []auth.DeniedJTI{{JTI: "t-0"}}, read.JTIs)
	require.NoError(t, auth.DenyJTI(path, "t-1", time.Time{}, now))
	require.Equal(t, uint64(1), gen())
	read, err = auth.ReadDenyList(path)
	require.NoError(t, err)
	require.Len(t, read.JTIs, 2, "the old file's entry is kept")

	top := `{"version":1,"generation":18446744073709551615,"jtis":[],"users":[]}`
	require.NoError(t, os.WriteFile(path, []byte(top), 0o600))
	_, err = auth.Deny(path, auth.Denial{JTI: "t-2"}, now)
	require.ErrorContains(t, err, "generation 18446744073709551615 is the largest")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, top, string(data), "nothing written")
}
