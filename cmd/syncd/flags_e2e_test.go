package main

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/buildinfo"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// What a client author can exercise from outside with syncd's flags alone
// (issue: resync and strict models could only be reached by embedding the
// server): --default-policy none refuses a write to an undeclared model and
// welcome announces it; --oplog-max-entries with --retention-interval
// compacts the oplog, so a pull from an old cursor is answered resync.
func TestFlagsLetAClientMeetStrictModelsAndResync(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	token, err := auth.Issue(tokens, auth.Principal{Tenant: "acme", ClientID: "phone", Read: []string{auth.Wildcard}, Write: []string{auth.Wildcard}}, time.Now())
	require.NoError(t, err)
	logs := &syncdtest.Buffer{}
	addr, stop := startRun(t, []string{"--listen", "127.0.0.1:0", "--admin-listen", "", "--data", filepath.Join(t.TempDir(), "syncd.db"),
		"--tokens", tokens, "--model", "notes=lww", "--default-policy", "none",
		"--oplog-max-entries", "1", "--retention-interval", "20ms"}, logs)
	defer stop()

	dialCtx, dialCancel := context.WithTimeout(ctx, 10*time.Second)
	defer dialCancel()
	conn, _, err := websocket.Dial(dialCtx, "ws://"+addr+syncproto.SyncPath, &websocket.DialOptions{
		Subprotocols: []string{syncproto.Subprotocol},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + token}},
	})
	require.NoError(t, err)
	defer conn.CloseNow()
	conn.SetReadLimit(syncproto.MaxFrameBytes)
	roundTrip := func(req syncproto.Message) syncproto.Message {
		t.Helper()
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		defer rcancel()
		frame, err := syncproto.Encode(req)
		require.NoError(t, err)
		require.NoError(t, conn.Write(rctx, websocket.MessageText, frame))
		_, frame, err = conn.Read(rctx)
		require.NoError(t, err)
		msg, err := syncproto.Decode(frame)
		require.NoError(t, err, "frame %s", frame)
		return msg
	}

	clock := syncproto.NewClock("phone", nil)
	w, ok := roundTrip(&syncproto.Hello{ID: "h1", ClientID: "phone", HLC: clock.Now()}).(*syncproto.Welcome)
	require.True(t, ok)
	require.Equal(t, buildinfo.Read().String(), w.ServerBuild, "welcome names the build that answers")
	require.Equal(t, syncproto.PolicyNone, w.DefaultPolicy)
	require.Contains(t, w.Models, "notes")

	put := func(model, key string) syncproto.Mutation {
		id, err := syncproto.NewOpID()
		require.NoError(t, err)
		return syncproto.Mutation{OpID: id, Model: model, Key: key, Op: syncproto.OpPut, Value: []byte(`1`), HLC: clock.Now()}
	}
	pr, ok := roundTrip(&syncproto.Push{ID: "p1", Mutations: []syncproto.Mutation{put("notes", "a"), put("notes", "b"), put("notes", "c"), put("undeclared", "a")}}).(*syncproto.PushResult)
	require.True(t, ok)
	for _, r := range pr.Results[:3] {
		require.Equal(t, syncproto.StatusApplied, r.Status, "%+v", r)
	}
	require.Equal(t, syncproto.StatusRejected, pr.Results[3].Status)
	require.Equal(t, syncproto.CodeInvalidModel, pr.Results[3].Code)

	// The janitor compacts the oplog to its newest entry within a few
	// intervals; until then the pull is answered changes.
	for range 500 {
		switch m := roundTrip(&syncproto.Pull{ID: "q1", Cursor: 0}).(type) {
		case *syncproto.Resync:
			require.Equal(t, syncproto.ResyncCursorExpired, m.Reason)
			require.Equal(t, syncproto.SnapshotPath, m.SnapshotURL)
			return
		case *syncproto.Changes:
			time.Sleep(20 * time.Millisecond)
		default:
			t.Fatalf("pull answered %#v", m)
		}
	}
	t.Fatal("the oplog was not compacted within 500 pulls")
}
