package client_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/syncproto"
)

// nextEvent returns the next event of sub about model/key that pred
// accepts, bounded by waitFor; events of other rows are skipped.
func nextEvent(t *testing.T, sub *client.Subscription, model, key string, pred func(client.ChangeEvent) bool) client.ChangeEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	for {
		select {
		case ev, ok := <-sub.C:
			require.True(t, ok, "the subscription closed")
			require.False(t, ev.Lagged, "the subscriber lagged")
			if ev.Model == model && ev.Key == key && pred(ev) {
				return ev
			}
		case <-ctx.Done():
			t.Fatalf("no event of %s/%s within %v", model, key, waitFor)
		}
	}
}

// A ChangeEvent says where the server read it and the row's scope value:
// a feed entry at its own seq, a backfill row at its page's seq, an
// eviction moved at the moving write's seq with the value the row left, an
// eviction of a value at the frame's cursor; a local write at neither.
func TestChangeEventsSayWhereTheServerReadThem(t *testing.T) {
	s := scopedSyncd(t)
	writer := scopedDevice(t, s, "writer", "w", []string{syncproto.AllValues}, nil)
	t0, t1 := writer.put(t, "tasks", "t0", task("p1", 0)), writer.put(t, "tasks", "t1", task("p2", 1))
	writer.requireApplied(t, []string{t0, t1})
	seqT1 := writer.await(t, t1).Seq

	b := scopedDevice(t, s, "phone-b", "b", []string{"p1", "p2"}, func(c *client.Config) { c.Scopes = syncproto.ScopeSet{"project": {"p1"}} })
	require.NoError(t, waitScope(b, "project", "p1"))
	events := b.Changes()
	defer events.Close()
	ctx := t.Context()

	// A value added is backfilled: its rows were read at a seq at or past
	// their last write, and before anything written after.
	require.NoError(t, b.SetScopes(ctx, "project", "p1", "p2"))
	ev := nextEvent(t, events, "tasks", "t1", func(client.ChangeEvent) bool { return true })
	require.Equal(t, "p2", ev.ScopeValue)
	require.GreaterOrEqual(t, ev.At, seqT1, "a backfill row is read at or after its last write")
	require.NoError(t, waitScope(b, "project", "p2"))

	// A feed entry is read at its own seq.
	t2 := writer.put(t, "tasks", "t2", task("p1", 2))
	ev = nextEvent(t, events, "tasks", "t2", func(client.ChangeEvent) bool { return true })
	require.Equal(t, writer.await(t, t2).Seq, ev.At)
	require.Equal(t, "p1", ev.ScopeValue)
	require.Greater(t, ev.At, seqT1)

	// A row moved to a value b does not follow leaves at the moving
	// write's seq, naming the value it had.
	mv := writer.put(t, "tasks", "t2", task("p3", 3))
	ev = nextEvent(t, events, "tasks", "t2", func(ev client.ChangeEvent) bool { return ev.Evicted != "" })
	require.Equal(t, syncproto.EvictMoved, ev.Evicted)
	require.Equal(t, writer.await(t, mv).Seq, ev.At)
	require.Equal(t, "p1", ev.ScopeValue)

	// A value dropped leaves at the cursor of the frame that said so.
	cursor := b.status(t).Cursor
	require.NoError(t, b.SetScopes(ctx, "project", "p2"))
	ev = nextEvent(t, events, "tasks", "t0", func(ev client.ChangeEvent) bool { return ev.Evicted != "" })
	require.Equal(t, syncproto.EvictUnsubscribed, ev.Evicted)
	require.Equal(t, "p1", ev.ScopeValue)
	require.GreaterOrEqual(t, ev.At, cursor)

	// A local write was read by no server.
	b.put(t, "notes", "n", `{"x":1}`)
	ev = nextEvent(t, events, "notes", "n", func(ev client.ChangeEvent) bool { return ev.Local })
	require.Zero(t, ev.At)
	require.Empty(t, ev.ScopeValue)
}
