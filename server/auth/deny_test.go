package auth_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/server/auth"
)

// TestAuthenticatorDenyIsInForceAtOnceAndLapses: Deny and Allow through
// the Authenticator take effect without waiting for the file's reload, an
// entry with Until lapses (and is pruned at the next change), and a jti
// denied twice keeps the later end.
func TestAuthenticatorDenyIsInForceAtOnceAndLapses(t *testing.T) {
	e := newJWTEnv(t, nil)
	tok := e.p.Sign("ES256", e.claims(map[string]any{"jti": "t-1"}))
	p, err := e.a.Authenticate(tok)
	require.NoError(t, err)

	_, err = e.a.Deny(auth.Denial{JTI: "t-1", Until: e.clock.Now().Add(time.Minute)})
	require.NoError(t, err)
	require.ErrorIs(t, e.a.Check(p), auth.ErrUnauthorized, "no reload interval to wait for")
	l, err := e.a.Deny(auth.Denial{JTI: "t-1", Until: e.clock.Now().Add(2 * time.Minute)})
	require.NoError(t, err)
	require.Len(t, l.JTIs, 1)
	require.Equal(t, e.clock.Now().Add(2*time.Minute).UTC(), l.JTIs[0].ExpiresAt, "the later end wins")

	l, err = e.a.Allow("t-1", "")
	require.NoError(t, err)
	require.Empty(t, l.JTIs)
	require.NoError(t, e.a.Check(p), "allowed again at once")
	_, err = e.a.Allow("t-1", "")
	require.ErrorIs(t, err, auth.ErrNotDenied)

	// A user denied until a time: refused until then, accepted after.
	_, err = e.a.Deny(auth.Denial{User: "alice", Until: e.clock.Now().Add(time.Minute)})
	require.NoError(t, err)
	require.ErrorContains(t, e.a.Check(p), "the user's tokens issued before")
	e.clock.Advance(61 * time.Second)
	q, err := e.a.Authenticate(e.p.Sign("ES256", e.claims(map[string]any{"iat": e.clock.Now().Add(-2 * time.Minute).Unix()})))
	require.NoError(t, err, "the entry lapsed")
	require.NoError(t, e.a.Check(q))
	l, err = e.a.Deny(auth.Denial{JTI: "t-2"})
	require.NoError(t, err)
	require.Empty(t, l.Users, "the lapsed entry was pruned")
	require.Equal(t, []auth.DeniedJTI{{JTI: "t-2"}}, l.JTIs)
	got, err := e.a.DenyList()
	require.NoError(t, err)
	require.Equal(t, l, got)

	for _, bad := range []auth.Denial{{}, {JTI: "a", User: "b"}, {User: "bad\x00user"}} {
		_, err := e.a.Deny(bad)
		require.ErrorIs(t, err, auth.ErrInvalidDenial, "%+v", bad)
	}
}

// TestDenyDatesAUserByTheRevokedAtGiven: a user's denial dated by the
// request is written with that instant on every list it is given to (the
// nodes of a cluster, at their own clocks), so their lists are equal; one
// dated more than MaxRevokedAtAhead after the clock, or a jti's, is
// refused and changes nothing.
func TestDenyDatesAUserByTheRevokedAtGiven(t *testing.T) {
	dir := t.TempDir()
	at := time.Date(2026, 12, 5, 8, 0, 0, 123, time.UTC)
	d := auth.Denial{User: "alice", RevokedAt: at}
	var lists []auth.DenyList
	for i, clock := range []time.Duration{0, 3 * time.Second, -time.Second} {
		l, err := auth.Deny(filepath.Join(dir, fmt.Sprint("node", i, ".json")), d, at.Add(clock))
		require.NoError(t, err)
		require.Equal(t, []auth.DeniedUser{{User: "alice", RevokedAt: at}}, l.Users)
		lists = append(lists, l)
	}
	require.Equal(t, lists[0], lists[1])
	require.Equal(t, lists[0], lists[2])

	path := filepath.Join(dir, "node0.json")
	for _, bad := range []auth.Denial{
		{User: "bob", RevokedAt: at.Add(adminapi.MaxRevokedAtAhead + time.Second)},
		{JTI: "t-1", RevokedAt: at},
	} {
		_, err := auth.Deny(path, bad, at)
		require.ErrorIs(t, err, auth.ErrInvalidDenial, "%+v", bad)
	}
	l, err := auth.ReadDenyList(path)
	require.NoError(t, err)
	require.Equal(t, lists[0], l, "a refused denial changes nothing")
}

func TestAuthenticatorWithoutDenyFile(t *testing.T) {
	a, err := auth.New(auth.Config{JWT: newJWTEnv(t, nil).p.Config()})
	require.NoError(t, err)
	defer a.Close()
	_, err = a.DenyList()
	require.ErrorIs(t, err, auth.ErrNoDenyFile)
	_, err = a.Deny(auth.Denial{JTI: "x"})
	require.ErrorIs(t, err, auth.ErrNoDenyFile)
}

// FuzzReadDenyList: any file content either loads as a valid deny list
// that a change writes back and reads again unchanged in kind, or is an
// error; it never panics and never reads as a list holding an invalid
// entry.
func FuzzReadDenyList(f *testing.F) {
	f.Add([]byte(`{"version":1,"jtis":[{"jti":"a","expires_at":"2030-01-01T00:00:00Z"}],"users":[{"user":"bob","revoked_at":"2026-01-01T00:00:00Z","until":"2031-01-01T00:00:00Z"}]}`))
	f.Add([]byte(`{"version":1,"jtis":[],"users":[]}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"users":[{"user":""}]}`))
	f.Add([]byte(`not json`))
	f.Add([]byte(`{"version":1,"generation":7,"jtis":[],"users":[]}`))
	f.Add([]byte(`{"version":1,"generation":18446744073709551615}`))
	now := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "deny.json")
		require.NoError(t, os.WriteFile(path, data, 0o600))
		d, err := auth.ReadDenyList(path)
		if err != nil {
			return
		}
		for _, e := range d.JTIs {
			require.NoError(t, auth.ValidateDenial(auth.Denial{JTI: e.JTI}))
		}
		for _, u := range d.Users {
			require.NoError(t, auth.ValidateDenial(auth.Denial{User: u.User}))
		}
		written, err := auth.Deny(path, auth.Denial{JTI: "fuzz"}, now)
		if d.Generation == math.MaxUint64 {
			require.Error(t, err, "the generation never wraps")
			return
		}
		require.NoError(t, err)
		require.Equal(t, d.Generation+1, written.Generation, "a change is the next generation")
		again, err := auth.ReadDenyList(path)
		require.NoError(t, err)
		require.Len(t, again.JTIs, len(written.JTIs))
		require.Len(t, again.Users, len(written.Users))
	})
}
