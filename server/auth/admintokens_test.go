package auth_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server/auth"
)

// TestAuthenticatorIssuesAndRevokesAtOnce: a token issued through the
// Authenticator authenticates at once and is listed (by id, hash only);
// a revoked one fails Check from the return, with no reload interval to
// wait for; an unknown id is ErrNoSuchToken.
func TestAuthenticatorIssuesAndRevokesAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	_, err := auth.Issue(path, auth.Principal{Admin: true}, fixedNow())
	require.NoError(t, err)
	a, err := auth.NewAuthenticator(path, fixedNow)
	require.NoError(t, err)
	defer a.Close()

	bearer, tok, err := a.IssueToken(auth.Principal{Tenant: "acme", ClientID: "tablet", Read: []string{"*"}})
	require.NoError(t, err)
	require.Equal(t, auth.TokenIDOf(bearer), tok.TokenID)
	require.Equal(t, fixedNow().UTC(), tok.CreatedAt)
	p, err := a.Authenticate(bearer)
	require.NoError(t, err)
	require.Equal(t, "tablet", p.ClientID)
	tokens, err := a.Tokens()
	require.NoError(t, err)
	require.Len(t, tokens, 2)
	require.Less(t, tokens[0].TokenID, tokens[1].TokenID, "sorted by id")

	require.NoError(t, a.RevokeToken(tok.TokenID))
	require.ErrorIs(t, a.Check(p), auth.ErrUnauthorized, "revoked at once")
	_, err = a.Authenticate(bearer)
	require.ErrorIs(t, err, auth.ErrUnauthorized)
	require.ErrorIs(t, a.RevokeToken(tok.TokenID), auth.ErrNoSuchToken)
	_, _, err = a.IssueToken(auth.Principal{Tenant: "acme"})
	require.Error(t, err, "a device token needs a client id")
	tokens, err = a.Tokens()
	require.NoError(t, err)
	require.Len(t, tokens, 1)
}

// fixedNow is the clock of the token tests.
func fixedNow() time.Time { return time.Date(2026, 12, 4, 21, 0, 0, 0, time.UTC) }

func TestAuthenticatorWithoutTokenFile(t *testing.T) {
	a, err := auth.New(auth.Config{JWT: newJWTEnv(t, nil).p.Config()})
	require.NoError(t, err)
	defer a.Close()
	_, err = a.Tokens()
	require.ErrorIs(t, err, auth.ErrNoTokenFile)
	_, _, err = a.IssueToken(auth.Principal{Admin: true})
	require.ErrorIs(t, err, auth.ErrNoTokenFile)
	require.ErrorIs(t, a.RevokeToken("x"), auth.ErrNoTokenFile)
}
