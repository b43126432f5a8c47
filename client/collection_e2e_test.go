package client_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/server"
)

type todo struct {
	Title string `json:"title"`
	Done  bool   `json:"done"`
}

// A typed collection writes, reads, lists and watches Go values through a
// real server; a foreign value is a *DecodeError that hides nothing else.
func TestCollectionRoundTrip(t *testing.T) {
	s := startSyncd(t, server.Config{})
	phone := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-1", deviceOptions{})
	laptop := openDevice(t, s, s.proxy(t), t.TempDir(), "laptop-1", deviceOptions{})
	mine := client.NewCollection[todo](phone.Client, "todos")
	theirs := client.NewCollection[todo](laptop.Client, "todos")
	require.Equal(t, "todos", mine.Model())
	laptop.waitSynced(t)
	watch := theirs.Watch(t.Context())

	op, err := mine.Put(t.Context(), "milk", todo{Title: "buy milk"})
	require.NoError(t, err)
	doc, found, err := mine.Get(t.Context(), "milk")
	require.NoError(t, err)
	require.True(t, found)
	// Read your write, typed: pending until its answer comes, which on
	// loopback may already have come.
	want := client.Doc[todo]{Key: "milk", Value: todo{Title: "buy milk"}, Pending: true}
	if !doc.Pending {
		want.Pending, want.Version = false, 1
	}
	require.Equal(t, want, doc, "read your write, typed")
	require.Equal(t, client.StatusApplied, phone.await(t, op).Status)

	ch := <-watch
	require.NoError(t, ch.Err)
	require.Equal(t, client.Change[todo]{Key: "milk", Doc: client.Doc[todo]{Key: "milk", Value: todo{Title: "buy milk"}, Version: 1}}, ch)

	// Another device (an older app version, say) writes a value that is
	// not a todo.
	require.Equal(t, client.StatusApplied, phone.await(t, phone.put(t, "todos", "odd", `["not","a","todo"]`)).Status)
	ch = <-watch
	var de *client.DecodeError
	require.ErrorAs(t, ch.Err, &de)
	require.Equal(t, "odd", de.Key)
	require.JSONEq(t, `["not","a","todo"]`, string(de.Value))

	_, found, err = theirs.Get(t.Context(), "odd")
	require.True(t, found)
	require.ErrorAs(t, err, &de)
	docs, err := theirs.List(t.Context(), client.ListOptions{})
	require.ErrorAs(t, err, &de, "List says which record did not decode")
	require.Equal(t, []client.Doc[todo]{{Key: "milk", Value: todo{Title: "buy milk"}, Version: 1}}, docs, "and still returns the others")

	del, err := mine.DeleteIfVersion(t.Context(), "milk", 1)
	require.NoError(t, err)
	require.Equal(t, client.StatusApplied, phone.await(t, del).Status)
	ch = <-watch
	require.Equal(t, client.Change[todo]{Key: "milk", Deleted: true}, ch)
	_, found, err = theirs.Get(t.Context(), "milk")
	require.NoError(t, err)
	require.False(t, found)

	_, err = client.NewCollection[chan int](phone.Client, "todos").Put(t.Context(), "c", make(chan int))
	require.Error(t, err, "a value encoding/json cannot encode fails at the call")
}

// Ending the context closes a Watch channel nobody reads.
func TestCollectionWatchEndsWithContext(t *testing.T) {
	s := startSyncd(t, server.Config{})
	d := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-1", deviceOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	watch := client.NewCollection[todo](d.Client, "todos").Watch(ctx)
	cancel()
	for range watch { // ends: the channel is closed
	}
	closedWatch := client.NewCollection[todo](d.Client, "todos").Watch(t.Context())
	require.NoError(t, d.Close())
	for range closedWatch {
	}
}
