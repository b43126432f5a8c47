package faultproxy_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/soak/faultproxy"
)

// TestWebsocketAckLost shows the fault the soak harness needs most: on a live
// websocket session, the server receives and commits a message, and its
// acknowledgement never reaches the client, which sees the session fail.
func TestWebsocketAckLost(t *testing.T) {
	committed := make(chan string, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer func() { _ = ws.CloseNow() }()
		for {
			_, msg, err := ws.Read(r.Context())
			if err != nil {
				return
			}
			committed <- string(msg)
			if err := ws.Write(r.Context(), websocket.MessageText, append([]byte("ack "), msg...)); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	p := newProxy(t, srv.Listener.Addr().String())

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+p.Addr(), nil)
	require.NoError(t, err)
	defer func() { _ = ws.CloseNow() }()

	require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte("op1")))
	_, ack, err := ws.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, "ack op1", string(ack))
	require.Equal(t, "op1", <-committed)

	p.CutAfter(faultproxy.Down, 0)
	require.NoError(t, ws.Write(ctx, websocket.MessageText, []byte("op2")))
	select {
	case got := <-committed:
		require.Equal(t, "op2", got, "the server must receive the write")
	case <-time.After(waitLimit):
		t.Fatal("the server never received op2")
	}
	_, _, err = ws.Read(ctx)
	require.Error(t, err, "the acknowledgement must be lost")
	require.NoError(t, ctx.Err(), "the session must fail, not time out")
	require.Equal(t, int64(1), p.Stats().Cuts)
}
