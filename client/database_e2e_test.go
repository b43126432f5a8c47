package client_test

import (
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
)

// A device whose server was replaced by another database (same address,
// same tokens, a head beyond the device's cursor, so hello is accepted)
// notices the new welcome.database_id and resyncs from a snapshot instead
// of resuming at a cursor that means nothing there; Status says which
// database the replica follows.
func TestOtherDatabaseResyncs(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.json")
	principal := func(id string) auth.Principal {
		return auth.Principal{Tenant: tenant, ClientID: id, Read: []string{auth.Wildcard}, Write: []string{auth.Wildcard}}
	}
	phone, err := auth.Issue(tokens, principal("phone-1"), time.Now())
	require.NoError(t, err)
	laptop, err := auth.Issue(tokens, principal("laptop-1"), time.Now())
	require.NoError(t, err)
	authn, err := auth.NewAuthenticator(tokens, nil)
	require.NoError(t, err)

	first := syncdtest.Start(t, server.Config{DataPath: filepath.Join(dir, "first.db"), Authenticator: authn})
	s1 := &syncd{first}
	d := openDevice(t, s1, s1.proxy(t), t.TempDir(), "phone-1", deviceOptions{token: phone})
	d.requireApplied(t, []string{d.put(t, "notes", "old", `{"n":0}`)})
	d.waitStatus(t, "the feed brought the write", func(st client.Status) bool { return st.Cursor >= 1 })
	before := d.status(t)
	require.NotEmpty(t, before.DatabaseID)
	require.EqualValues(t, 1, before.Cursor)

	d.offline()
	first.Stop(t)
	u, err := url.Parse(first.URL)
	require.NoError(t, err)
	second := syncdtest.StartAt(t, u.Host, server.Config{DataPath: filepath.Join(dir, "second.db"), Authenticator: authn})
	s2 := &syncd{second}
	other := openDevice(t, s2, s2.proxy(t), t.TempDir(), "laptop-1", deviceOptions{token: laptop})
	other.requireApplied(t, []string{
		other.put(t, "notes", "new-1", `{"n":1}`), other.put(t, "notes", "new-2", `{"n":2}`), other.put(t, "notes", "new-3", `{"n":3}`),
	})

	d.online()
	d.waitStatus(t, "following the new database", func(st client.Status) bool {
		return st.Connected && st.DatabaseID != "" && st.DatabaseID != before.DatabaseID
	})
	d.requireMatchesServer(t, s2, "notes")
	require.Equal(t, 1.0, metric(t, d.registry, "syncd_client_resyncs_total"), "one snapshot, for the new database")
}
