package client_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/server"
)

func TestParseCredential(t *testing.T) {
	const token = "sdk_0123456789ab_s3cr3t-s3cr3t"
	id, tok, err := client.ParseCredential(client.FormatCredential("phone-1.a:b_c", token))
	require.NoError(t, err)
	require.Equal(t, "phone-1.a:b_c", id)
	require.Equal(t, token, tok)

	for _, bad := range []string{
		"", token, "sdc_", "sdc_phone-1", "sdc_phone-1@", "sdc_@" + token,
		"sdc_phone 1@" + token, "sdc_phone-1@sdk_a@b", "sdc_phone-1@sdk_a b", "SDC_phone-1@" + token,
	} {
		_, _, err := client.ParseCredential(bad)
		require.ErrorIs(t, err, client.ErrInvalidCredential, "%q", bad)
		require.NotContains(t, err.Error(), "s3cr3t", "an error never quotes the token")
	}
}

// An app configures one thing: a client opened with only a credential
// syncs as the client id it carries; a malformed credential, or one that
// disagrees with ClientID, fails Open with the typed error (and Open closes
// the queue it was given).
func TestCredentialConfiguresTheClient(t *testing.T) {
	s := startSyncd(t, server.Config{})
	var credential string
	d := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-1", deviceOptions{tweak: func(c *client.Config) {
		credential = client.FormatCredential(c.ClientID, c.Token)
		c.Token, c.ClientID, c.Credential = "", "", credential
	}})
	op := d.put(t, "notes", "a", `{"n":1}`)
	o := d.await(t, op)
	require.Equal(t, client.StatusApplied, o.Status)
	require.Equal(t, "phone-1", s.oplog(t)[0].ClientID)

	for _, tc := range []struct {
		name string
		cfg  func(*client.Config)
	}{
		{"malformed", func(c *client.Config) { c.Credential = "phone-1:" + c.Token }},
		{"disagrees with ClientID", func(c *client.Config) { c.Credential = credential; c.ClientID = "phone-2" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
			require.NoError(t, err)
			cfg := client.Config{ServerURLs: []string{s.URL}, Token: "sdk_x_y", Queue: q, ReplicaPath: filepath.Join(dir, "replica.db")}
			tc.cfg(&cfg)
			_, err = client.Open(context.Background(), cfg)
			require.ErrorIs(t, err, client.ErrInvalidCredential)
			_, err = q.Stats(context.Background())
			require.Error(t, err, "Open closed the queue it owned")
		})
	}
}
