package server

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// blockingWriter's writes say they began on entered, then wait until
// release is closed.
type blockingWriter struct{ entered, release chan struct{} }

func (w blockingWriter) Write(p []byte) (int, error) {
	w.entered <- struct{}{}
	<-w.release
	return len(p), nil
}

// A write to a slow reader gives its place up, so the writes of the
// others go on; a write waiting for a place ends with its context.
func TestSnapshotSenderSlowWritesGiveTheirPlaceUp(t *testing.T) {
	s := newSnapshotSender(1)
	slow := blockingWriter{entered: make(chan struct{}, 1), release: make(chan struct{})}
	slowDone := make(chan error, 1)
	go func() { slowDone <- s.write(context.Background(), slow, []byte("x")) }()
	<-slow.entered // the slow write took the only place

	fastDone := make(chan error, 1)
	go func() { fastDone <- s.write(context.Background(), io.Discard, []byte("y")) }()
	select {
	case err := <-fastDone:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a slow write held the only place")
	}
	close(slow.release)
	require.NoError(t, <-slowDone)

	// Every place taken by writes that have not yet given it up: a write
	// waiting for one ends with its context.
	s.slots <- struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.write(ctx, io.Discard, []byte("z")), context.Canceled)
}
