package replication_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// applyRequested applies, in one transaction of s, one batch per set in
// sets, each recording the set for its client id at its time.
func applyRequested(t *testing.T, s *replication.Store, bs ...replication.Batch) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.DB.BeginTx(ctx, nil)
	require.NoError(t, err)
	st := s.In(tx)
	for i := range bs {
		fx, err := replication.Apply(ctx, st, &bs[i])
		require.NoError(t, err)
		require.Empty(t, fx.Entries, "a requested set appends nothing to the oplog")
	}
	require.NoError(t, tx.Commit())
}

func requestedBatch(client string, at time.Time, scopes syncproto.ScopeSet) replication.Batch {
	return replication.Batch{Tenant: "acme", ClientID: client, At: at, Writes: []replication.Write{},
		Requested: &replication.Requested{User: "u", Scopes: scopes}}
}

func TestRequestedSetsAreRecordedOnlyWhenChangedAndBounded(t *testing.T) {
	ctx := context.Background()
	s, err := replication.OpenStore(ctx, openDB(t), replication.StoreOptions{})
	require.NoError(t, err)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

	applyRequested(t, s, requestedBatch("phone", at(0), syncproto.ScopeSet{"project": {"p2", "p1"}, "site": {}}))
	got, found, err := s.RequestedSet(ctx, "acme", "phone")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, replication.RequestedSet{Tenant: "acme", ClientID: "phone", User: "u", Scopes: syncproto.ScopeSet{"project": {"p1", "p2"}, "site": {}}, At: t0}, got)

	// The same values in another order, an empty scope dropped: nothing
	// changes, not even the time.
	applyRequested(t, s, requestedBatch("phone", at(5), syncproto.ScopeSet{"project": {"p1", "p2", "p1"}}))
	again, _, err := s.RequestedSet(ctx, "acme", "phone")
	require.NoError(t, err)
	require.Equal(t, got, again)

	applyRequested(t, s, requestedBatch("tablet", at(6), syncproto.ScopeSet{"project": {syncproto.AllValues}}))
	counts, err := s.RequestedCounts(ctx, "acme", "project", []string{"p1", "p2", "p3"})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"p1": 2, "p2": 2, "p3": 1}, counts, "the tablet requests every value")

	// A changed set replaces the values; a cleared one is gone.
	applyRequested(t, s, requestedBatch("phone", at(7), syncproto.ScopeSet{"project": {"p3"}}))
	counts, err = s.RequestedCounts(ctx, "acme", "project", []string{"p1", "p3"})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"p1": 1, "p3": 2}, counts)
	clear := requestedBatch("tablet", at(8), nil)
	clear.Requested.Clear = true
	applyRequested(t, s, clear)
	_, found, err = s.RequestedSet(ctx, "acme", "tablet")
	require.NoError(t, err)
	require.False(t, found)
	counts, err = s.RequestedCounts(ctx, "acme", "project", []string{"p1", "p3"})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"p1": 0, "p3": 1}, counts)

	// MaxRequestedDevices per tenant: the next new device drops the set
	// recorded longest ago (the phone's, at(7)); another tenant is not
	// counted.
	var bs []replication.Batch
	for i := range replication.MaxRequestedDevices - 1 {
		bs = append(bs, requestedBatch(fmt.Sprintf("d%05d", i), at(100+i), syncproto.ScopeSet{"project": {"p9"}}))
	}
	other := requestedBatch("phone", at(1), syncproto.ScopeSet{"project": {"p9"}})
	other.Tenant = "globex"
	bs = append(bs, other)
	applyRequested(t, s, bs...)
	_, found, err = s.RequestedSet(ctx, "acme", "phone")
	require.NoError(t, err)
	require.True(t, found, "exactly MaxRequestedDevices sets: all kept")
	applyRequested(t, s, requestedBatch("late", at(1_000_000), syncproto.ScopeSet{"project": {"p9"}}))
	_, found, err = s.RequestedSet(ctx, "acme", "phone")
	require.NoError(t, err)
	require.False(t, found, "the oldest set was dropped")
	counts, err = s.RequestedCounts(ctx, "acme", "project", []string{"p3", "p9"})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"p3": 0, "p9": replication.MaxRequestedDevices}, counts, "its values went with it")
	_, found, err = s.RequestedSet(ctx, "globex", "phone")
	require.NoError(t, err)
	require.True(t, found)
}

func TestRecheckRefusesAMalformedRequestedSet(t *testing.T) {
	for name, r := range map[string]*replication.Requested{
		"bad scope name":   {Scopes: syncproto.ScopeSet{"Project!": {"p1"}}},
		"* among values":   {Scopes: syncproto.ScopeSet{"project": {"*", "p1"}}},
		"control in value": {Scopes: syncproto.ScopeSet{"project": {"a\x01"}}},
		"bad user":         {User: "a\x01", Scopes: syncproto.ScopeSet{}},
	} {
		t.Run(name, func(t *testing.T) {
			b := replication.Batch{Tenant: "acme", ClientID: "phone", At: time.Now(), Requested: r}
			err := b.Recheck(replication.Config{}, time.Minute)
			require.Error(t, err)
			require.True(t, errors.Is(err, replication.ErrMalformedBatch), "%v", err)
		})
	}
}
