package client_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// A write the server would refuse for good fails fast: queued before the
// client knew the server's models, it is dead-lettered at its first
// refusal with the code; once a welcome told the models, Put and Delete
// fail at the call with a typed error and queue nothing.
func TestWritesRefusedForGoodFailFast(t *testing.T) {
	s := startSyncd(t, server.Config{Policies: replication.Config{
		"notes": syncproto.PolicyLWW, "docs": syncproto.PolicyOptimistic, "secret": syncproto.PolicyLWW,
		replication.AnyModel: syncproto.PolicyNone,
	}})
	tok := s.Issue(t, auth.Principal{Tenant: tenant, ClientID: "phone-1", Read: []string{auth.Wildcard}, Write: []string{"notes", "docs"}})
	p := s.proxy(t)
	d := openDevice(t, s, p, t.TempDir(), "phone-1", deviceOptions{token: tok})
	d.offline()
	d.waitOffline(t)
	ctx := t.Context()

	// Before any welcome nothing is known: the writes are queued.
	unversioned, err := d.Delete(ctx, "docs", "d1")
	require.NoError(t, err)
	forbidden := d.put(t, "secret", "s1", `{"pin":1}`)
	d.online()
	for op, code := range map[string]syncproto.Code{unversioned: syncproto.CodeMissingBaseVersion, forbidden: syncproto.CodeForbiddenModel} {
		o := d.await(t, op)
		require.Equal(t, client.StatusDeadLettered, o.Status)
		require.Contains(t, o.Reason, string(code))
	}
	// An awaited dead-letter outcome is listed at once.
	dead, err := d.DeadLetters(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 2, "both writes are in the dead-letter store")
	for _, dl := range dead {
		require.Equal(t, 1, dl.Attempts, "dead-lettered at the first refusal")
	}

	// The client now knows the models: the same writes fail at the call.
	for _, tc := range []struct {
		name  string
		write func() (string, error)
		is    error
		code  syncproto.Code
	}{
		{"forbidden model", func() (string, error) { return d.Put(ctx, "secret", "s2", []byte(`{}`)) }, client.ErrForbiddenModel, syncproto.CodeForbiddenModel},
		{"optimistic put without a version", func() (string, error) { return d.Put(ctx, "docs", "d2", []byte(`{}`)) }, client.ErrVersionRequired, syncproto.CodeMissingBaseVersion},
		{"optimistic delete without a version", func() (string, error) { return d.Delete(ctx, "docs", "d2") }, client.ErrVersionRequired, syncproto.CodeMissingBaseVersion},
		{"undeclared model", func() (string, error) { return d.Put(ctx, "other", "o1", []byte(`{}`)) }, client.ErrUndeclaredModel, syncproto.CodeInvalidModel},
	} {
		op, err := tc.write()
		require.ErrorIs(t, err, tc.is, tc.name)
		var we *client.WriteRefusedError
		require.True(t, errors.As(err, &we), tc.name)
		require.Equal(t, tc.code, we.Code, tc.name)
		require.Empty(t, op, tc.name)
	}
	ok, err := d.PutIfVersion(ctx, "docs", "d3", []byte(`{"n":1}`), 0)
	require.NoError(t, err)
	require.Equal(t, client.StatusApplied, d.await(t, ok).Status)
	st := d.status(t)
	require.Zero(t, st.Pending, "nothing refused at the call was queued")
	require.Equal(t, 2, st.DeadLetters)
}
