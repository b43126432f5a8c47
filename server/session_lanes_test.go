package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// laneTimeout bounds each read of the lane tests, so a broken writer fails
// the test instead of hanging it.
const laneTimeout = 10 * time.Second

// laneSession is a session of a real server on one end of a real
// websocket, with its writer not yet started, and the client's end.
func laneSession(t *testing.T) (*session, *websocket.Conn) {
	t.Helper()
	srv := bareServer(t)

	accepted := make(chan *websocket.Conn, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err == nil {
			accepted <- c
		}
	}))
	t.Cleanup(hs.Close)
	client, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(hs.URL, "http"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { client.CloseNow() })
	var conn *websocket.Conn
	select {
	case conn = <-accepted:
	case <-time.After(laneTimeout):
		t.Fatal("no connection accepted")
	}
	t.Cleanup(func() { conn.CloseNow() })
	return newSession(srv, conn, auth.Principal{ClientID: "dev", Tenant: "t1"}, "test"), client
}

// bareServer is a real server over a fresh database, serving nothing: its
// sessions and feed are driven directly. edits change its Config.
func bareServer(t testing.TB, edits ...func(*Config)) *Server {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.json")
	require.NoError(t, os.WriteFile(tokens, []byte(`{"version":1,"tokens":[]}`), 0o600))
	a, err := auth.NewAuthenticator(tokens, nil)
	require.NoError(t, err)
	cfg := Config{DataPath: filepath.Join(dir, "syncd.db"), Authenticator: a}
	for _, edit := range edits {
		edit(&cfg)
	}
	srv, err := New(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	return srv
}

// startWriter runs ss's writer until the test ends (the outbox closed).
func startWriter(t *testing.T, ss *session) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		ss.writeLoop(t.Context(), func() {})
	}()
	t.Cleanup(func() {
		close(ss.outbox)
		<-done
	})
}

// nextFrame reads one frame the writer sent: its type and id, and a
// changes frame's cursor.
func nextFrame(t *testing.T, c *websocket.Conn) (syncproto.Type, string, uint64) {
	t.Helper()
	msg, _ := readMessage(t, c)
	if ch, ok := msg.(*syncproto.Changes); ok {
		return msg.Type(), ch.ID, ch.Cursor
	}
	return msg.Type(), msg.RequestID(), 0
}

// fillFeed queues a full feed lane: feedPagesInFlight pages, cursors 1..n.
func fillFeed(ss *session) {
	for i := range feedPagesInFlight {
		ss.feedbox <- outbound{msg: &syncproto.Changes{ID: "feed", Entries: []syncproto.Change{}, Cursor: uint64(i + 1), Head: feedPagesInFlight}}
	}
}

// answeredPush is a push whose commit decided one write, its done channel
// still open.
func answeredPush(t *testing.T) *pushRequest {
	op, err := syncproto.NewOpID()
	require.NoError(t, err)
	r := newPushRequest(nil, time.Now())
	r.fx.Results = []syncproto.Result{{OpID: op, Status: syncproto.StatusApplied, Seq: 1, Version: 1, HLC: syncproto.NewClock("dev", nil).Now()}}
	return r
}

// A subscriber whose feed lane is full (a deep backlog) gets its answers
// (a pong, a push's result, an error) before any queued feed page, in the
// order asked; the feed pages follow in their own order.
func TestAnswersGoAheadOfQueuedFeedPages(t *testing.T) {
	ss, client := laneSession(t)
	fillFeed(ss)
	committed := answeredPush(t)
	close(committed.done)
	ss.pending.Add(1)
	ss.enqueue(outbound{msg: &syncproto.Pong{ID: "ping1"}})
	ss.enqueue(outbound{push: committed, pushID: "push1"})
	ss.enqueue(outbound{msg: syncproto.Errorf(syncproto.CodeRateLimited, "slow down").WithID("push2")})
	startWriter(t, ss)

	for _, want := range []struct {
		typ syncproto.Type
		id  string
	}{{syncproto.TypePong, "ping1"}, {syncproto.TypePushResult, "push1"}, {syncproto.TypeError, "push2"}} {
		typ, id, _ := nextFrame(t, client)
		require.Equal(t, want.typ, typ)
		require.Equal(t, want.id, id)
	}
	for i := range feedPagesInFlight {
		typ, _, cursor := nextFrame(t, client)
		require.Equal(t, syncproto.TypeChanges, typ)
		require.Equal(t, uint64(i+1), cursor, "feed pages keep their order")
	}
	require.Zero(t, ss.pending.Load())
}

// While a push waits for its commit, the writer keeps writing the feed:
// every queued page arrives before the commit ends, and the push's result
// right after it does.
func TestFeedFlowsWhileAPushAwaitsItsCommit(t *testing.T) {
	ss, client := laneSession(t)
	fillFeed(ss)
	waiting := answeredPush(t)
	ss.pending.Add(1)
	ss.enqueue(outbound{push: waiting, pushID: "push1"})
	startWriter(t, ss)

	for i := range feedPagesInFlight {
		typ, _, cursor := nextFrame(t, client)
		require.Equal(t, syncproto.TypeChanges, typ)
		require.Equal(t, uint64(i+1), cursor)
	}
	require.Equal(t, int64(1), ss.pending.Load(), "the push is still waiting for its commit")
	close(waiting.done)
	typ, id, _ := nextFrame(t, client)
	require.Equal(t, syncproto.TypePushResult, typ)
	require.Equal(t, "push1", id)
}
