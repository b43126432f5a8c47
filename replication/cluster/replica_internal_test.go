package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// TestReplicaReaderReadsInOrder: a read returns the stream's messages from
// the asked seq on, in order, at most maxApplyGroup of them, with how many
// follow; past the end it returns none; a stream created without direct
// gets (by an earlier syncd) is given them when a node connects.
func TestReplicaReaderReadsInOrder(t *testing.T) {
	secret, err := NewSecret()
	require.NoError(t, err)
	ns, err := StartEmbedded(EmbeddedOptions{Name: "reader", Port: -1, StoreDir: t.TempDir(), Secret: secret})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc, err := ConnectEmbedded(ns, secret)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The stream as syncd created it before nodes read their replicas.
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: StreamName, Subjects: []string{Subject}, Storage: jetstream.FileStorage,
		MaxAge: DefaultStreamMaxAge, DenyDelete: true, DenyPurge: true, Metadata: map[string]string{metaCluster: "c1"}})
	require.NoError(t, err)
	c, err := Connect(ctx, nc, Options{Node: "reader", Replicas: 1, CommandKey: make([]byte, MinCommandKeyBytes)})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	s, err := js.Stream(ctx, StreamName)
	require.NoError(t, err)
	require.True(t, s.CachedInfo().Config.AllowDirect, "Connect allows direct gets of an older stream")
	require.Equal(t, "c1", c.ID())

	const total = maxApplyGroup + 10
	for i := range total {
		_, err := js.Publish(ctx, Subject, fmt.Appendf(nil, "m%d", i+1))
		require.NoError(t, err)
	}
	r, err := newReplicaReader(nc)
	require.NoError(t, err)
	defer r.close()

	first, err := r.read(ctx, 1)
	require.NoError(t, err)
	require.Len(t, first, maxApplyGroup)
	for i, m := range first {
		require.Equal(t, uint64(i+1), m.seq)
		require.Equal(t, fmt.Sprintf("m%d", i+1), string(m.data))
		require.False(t, m.at.IsZero())
	}
	require.Equal(t, uint64(total-maxApplyGroup), first[len(first)-1].pending)

	rest, err := r.read(ctx, maxApplyGroup+1)
	require.NoError(t, err)
	require.Len(t, rest, total-maxApplyGroup)
	require.Equal(t, uint64(total), rest[len(rest)-1].seq)
	require.Zero(t, rest[len(rest)-1].pending)

	none, err := r.read(ctx, total+1)
	require.NoError(t, err)
	require.Empty(t, none)
}
