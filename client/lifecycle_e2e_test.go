package client_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncproto"
)

// After Close, every method says ErrClosed and every subscription's
// channel is closed, so `for ev := range sub.C` ends.
func TestEveryMethodAfterCloseIsErrClosed(t *testing.T) {
	s := startSyncd(t, server.Config{})
	d := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-1", deviceOptions{})
	sub := d.Changes()
	op := d.put(t, "notes", "a", `{"n":1}`)
	require.NoError(t, d.Close())

	for range sub.C { // drains what was published, then ends
	}
	late := d.Changes()
	_, open := <-late.C
	require.False(t, open, "a subscription made after Close is closed")

	ctx := t.Context()
	_, err := d.Put(ctx, "notes", "b", []byte(`{}`))
	require.ErrorIs(t, err, client.ErrClosed)
	_, err = d.DeleteIfVersion(ctx, "notes", "a", 1)
	require.ErrorIs(t, err, client.ErrClosed)
	_, _, err = d.Get(ctx, "notes", "a")
	require.ErrorIs(t, err, client.ErrClosed)
	_, err = d.List(ctx, "notes", client.ListOptions{})
	require.ErrorIs(t, err, client.ErrClosed)
	_, err = d.Await(ctx, op)
	require.ErrorIs(t, err, client.ErrClosed)
	_, _, err = d.Lookup(ctx, op)
	require.ErrorIs(t, err, client.ErrClosed)
	_, err = d.Status(ctx)
	require.ErrorIs(t, err, client.ErrClosed)
	require.ErrorIs(t, d.Sync(ctx), client.ErrClosed)
	require.NoError(t, d.Close(), "Close is idempotent")
}

// A delete on an optimistic model names the version it deletes: applied
// while current, a conflict once stale.
func TestDeleteIfVersion(t *testing.T) {
	const model = "docs"
	s := startSyncd(t, server.Config{Policies: replication.Config{model: syncproto.PolicyOptimistic}})
	d := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-1", deviceOptions{})
	ctx := t.Context()
	put, err := d.PutIfVersion(ctx, model, "a", []byte(`{"n":1}`), 0)
	require.NoError(t, err)
	require.Equal(t, client.StatusApplied, d.await(t, put).Status)

	stale, err := d.DeleteIfVersion(ctx, model, "a", 7)
	require.NoError(t, err)
	require.Equal(t, client.StatusConflict, d.await(t, stale).Status)

	del, err := d.DeleteIfVersion(ctx, model, "a", 1)
	require.NoError(t, err)
	o := d.await(t, del)
	require.Equal(t, client.StatusApplied, o.Status)
	require.Equal(t, uint64(2), o.Version)
	d.waitSynced(t)
	_, found, err := d.Get(ctx, model, "a")
	require.NoError(t, err)
	require.False(t, found)
}
