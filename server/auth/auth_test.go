package auth_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/fakeclock"
	"github.com/syncd-dev/syncd/server/auth"
)

var alice = auth.Principal{Tenant: "acme", ClientID: "alice-phone", Read: []string{"*"}, Write: []string{"notes"}}

func TestIssueThenAuthenticate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	tok, err := auth.Issue(path, alice, time.Unix(100, 0))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(tok, "sdk_"))

	a, err := auth.NewAuthenticator(path, nil)
	require.NoError(t, err)
	p, err := a.Authenticate(tok)
	require.NoError(t, err)
	require.Equal(t, "acme", p.Tenant)
	require.Equal(t, "alice-phone", p.ClientID)
	require.NotEmpty(t, p.TokenID)
	require.True(t, p.CanRead("anything"))
	require.True(t, p.CanWrite("notes"))
	require.False(t, p.CanWrite("todos"))

	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	_, secret, _ := strings.Cut(strings.TrimPrefix(tok, "sdk_"), "_")
	require.NotContains(t, string(raw), secret, "the file must never hold a secret")
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
}

func TestAuthenticateRefusesBadTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	tok, err := auth.Issue(path, alice, time.Now())
	require.NoError(t, err)
	a, err := auth.NewAuthenticator(path, nil)
	require.NoError(t, err)
	id := strings.SplitN(tok, "_", 3)[1]
	for _, bad := range []string{"", "sdk_", "sdk__", "nope", tok + "x", "sdk_" + id + "_wrong", "sdk_ffffffffffff_" + strings.SplitN(tok, "_", 3)[2]} {
		_, err := a.Authenticate(bad)
		require.ErrorIs(t, err, auth.ErrUnauthorized, "token %q", bad)
	}
}

func TestRevocationTakesEffectAfterReloadInterval(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	tok, err := auth.Issue(path, alice, time.Now())
	require.NoError(t, err)
	clock := fakeclock.New(time.Unix(1000, 0))
	a, err := auth.NewAuthenticator(path, clock.Now)
	require.NoError(t, err)
	p, err := a.Authenticate(tok)
	require.NoError(t, err)

	require.NoError(t, auth.Revoke(path, p.TokenID))
	require.ErrorIs(t, auth.Revoke(path, p.TokenID), auth.ErrNoSuchToken)
	clock.Advance(2 * time.Second)
	_, err = a.Authenticate(tok)
	require.ErrorIs(t, err, auth.ErrUnauthorized)
}

func TestBrokenFileKeepsLastGoodTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	tok, err := auth.Issue(path, alice, time.Now())
	require.NoError(t, err)
	clock := fakeclock.New(time.Unix(1000, 0))
	a, err := auth.NewAuthenticator(path, clock.Now)
	require.NoError(t, err)

	require.NoError(t, os.WriteFile(path, []byte("{not json"), 0o600))
	clock.Advance(2 * time.Second)
	_, err = a.Authenticate(tok)
	require.NoError(t, err, "a broken edit must not lock everyone out")
	require.ErrorContains(t, a.ReloadError(), "not a token file")
}

func TestIssueValidatesPrincipal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	for name, p := range map[string]auth.Principal{
		"no tenant":          {ClientID: "c", Read: []string{"*"}},
		"bad client id":      {Tenant: "t", ClientID: "has space"},
		"bad model":          {Tenant: "t", ClientID: "c", Write: []string{"Bad-Model"}},
		"admin with tenant":  {Admin: true, Tenant: "t"},
		"admin with a model": {Admin: true, Read: []string{"notes"}},
	} {
		_, err := auth.Issue(path, p, time.Now())
		require.Error(t, err, name)
	}
	require.NoFileExists(t, path, "a refused issue writes nothing")
	_, err := auth.Issue(path, auth.Principal{Admin: true}, time.Now())
	require.NoError(t, err)
}

func TestReadFileRejectsForeignFiles(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"not json":      "hello",
		"wrong version": `{"version":9,"tokens":[]}`,
		"bad hash":      `{"version":1,"tokens":[{"id":"a","tenant":"t","client_id":"c","secret_sha256":"zz"}]}`,
		"duplicate id": `{"version":1,"tokens":[
			{"id":"a","tenant":"t","client_id":"c","secret_sha256":"` + strings.Repeat("0", 64) + `"},
			{"id":"a","tenant":"t","client_id":"d","secret_sha256":"` + strings.Repeat("0", 64) + `"}]}`,
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
		_, err := auth.ReadFile(path)
		require.Error(t, err, name)
		_, err = auth.NewAuthenticator(path, nil)
		require.Error(t, err, name)
	}
	_, err := auth.NewAuthenticator(filepath.Join(dir, "missing"), nil)
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestIssuedTokenWorksAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	_, err := auth.Issue(path, auth.Principal{Admin: true}, time.Now())
	require.NoError(t, err)
	clock := fakeclock.New(time.Unix(1000, 0))
	a, err := auth.NewAuthenticator(path, clock.Now)
	require.NoError(t, err)
	tok, err := auth.Issue(path, alice, time.Now())
	require.NoError(t, err)
	_, err = a.Authenticate(tok)
	require.NoError(t, err, "no reload interval has passed, yet the new token must work")
}

// TestAdminTokensHaveTheirOwnPrefix: an admin token is "sda_...", a client
// token "sdk_..."; an admin token of the older "sdk_" form is still
// accepted, and a client token given the admin prefix is not.
func TestAdminTokensHaveTheirOwnPrefix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	admin, err := auth.Issue(path, auth.Principal{Admin: true}, time.Unix(100, 0))
	require.NoError(t, err)
	member, err := auth.Issue(path, alice, time.Unix(100, 0))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(admin, "sda_"), admin)
	require.True(t, strings.HasPrefix(member, "sdk_"), member)
	require.True(t, auth.IsFileToken(admin) && auth.IsFileToken(member))
	require.Equal(t, strings.SplitN(admin, "_", 3)[1], auth.TokenIDOf(admin))
	require.Empty(t, auth.TokenIDOf("eyJhbGciOi.x.y"))

	a, err := auth.NewAuthenticator(path, nil)
	require.NoError(t, err)
	p, err := a.Authenticate(admin)
	require.NoError(t, err)
	require.True(t, p.Admin)
	p, err = a.Authenticate("sdk_" + strings.TrimPrefix(admin, "sda_"))
	require.NoError(t, err, "an admin token issued before the prefix is still accepted")
	require.True(t, p.Admin)
	_, err = a.Authenticate("sda_" + strings.TrimPrefix(member, "sdk_"))
	require.ErrorIs(t, err, auth.ErrUnauthorized, "the admin prefix on a client token")
}
