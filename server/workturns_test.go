package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncproto"
)

// workTurnTestWait bounds each wait of these tests for a state to come.
const workTurnTestWait = 30 * time.Second

// A push whose conflict hook keeps it waiting (a wait on I/O, after its
// admission) holds no work turn: with one turn on the whole server,
// another tenant's device still gets its push decoded, admitted and
// applied meanwhile, and the waiting push is answered once the hook
// answers.
func TestWorkTurnIsNotHeldAcrossAHookWait(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	hook := func(ctx context.Context, cur replication.Record, exists bool, p replication.Proposal) (replication.HookResult, error) {
		select {
		case entered <- struct{}{}:
		case <-ctx.Done():
			return replication.HookResult{}, ctx.Err()
		}
		select {
		case <-release:
		case <-ctx.Done():
			return replication.HookResult{}, ctx.Err()
		}
		return replication.Merge(p.Value), nil
	}
	ts := startServer(t, server.Config{
		SessionWorkTurns: 1,
		Policies:         replication.Config{"counters": syncproto.PolicyHook},
		Hook:             hook, HookTimeout: time.Minute,
	})
	phone, phoneClock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	other, otherClock := session(t, ts, ts.Member(t, "globex", "laptop"), "laptop")

	phone.send(&syncproto.Push{ID: "held", Mutations: []syncproto.Mutation{put(t, phoneClock, "counters", "c", `1`)}})
	select {
	case <-entered:
	case <-time.After(workTurnTestWait):
		t.Fatal("the hook was not asked")
	}
	require.Zero(t, ts.srv.WorkTurnsHeld(), "the push waiting for its hook holds no turn")
	requireApplied(t, other.push("w1", put(t, otherClock, "notes", "n", `{"n":1}`)))

	close(release)
	requireApplied(t, phone.pushResult("held", 1))
	require.Zero(t, ts.srv.WorkTurnsHeld())
	require.Equal(t, "2", ts.Metric(t, `syncd_work_turns_total{tenant="globex"}`), "its hello and its push")
	require.Equal(t, "2", ts.Metric(t, `syncd_work_turns_total{tenant="acme"}`))
	require.Equal(t, "0", ts.Metric(t, `syncd_work_turns_waiting{tenant="acme"}`))
}

// A session whose client stops reading its answers blocks its reader on
// a full outbox (backpressure); that reader holds no work turn, so with
// one turn on the whole server another tenant's device is still served,
// and the stalled one gets every answer once its client reads again.
func TestWorkTurnIsNotHeldAcrossAFullOutbox(t *testing.T) {
	ts := startServer(t, server.Config{SessionWorkTurns: 1, RetentionInterval: -1})
	reader, readerClock := session(t, ts, ts.Member(t, "acme", "stalled"), "stalled")
	// Values of 200 KB, a pull answering one: a few dozen unread answers
	// fill the sockets' buffers and the writer stops, and the outbox
	// (64 answers) fills behind it.
	big := `"` + strings.Repeat("x", 200<<10) + `"`
	var muts []syncproto.Mutation
	for i := range 5 {
		muts = append(muts, put(t, readerClock, "notes", fmt.Sprint("big", i), big))
	}
	requireApplied(t, reader.push("big", muts...))
	const pulls = 120
	for i := range pulls {
		reader.send(&syncproto.Pull{ID: fmt.Sprint("pull", i), Cursor: 0, Limit: 1})
	}
	require.Eventually(t, func() bool { return ts.srv.OutboxFull("stalled") }, workTurnTestWait, time.Millisecond,
		"the stalled session's outbox fills")

	other, otherClock := session(t, ts, ts.Member(t, "globex", "laptop"), "laptop")
	requireApplied(t, other.push("w1", put(t, otherClock, "notes", "n", `{"n":1}`)))
	require.True(t, ts.srv.OutboxFull("stalled"), "still stalled while the other was served")
	require.Zero(t, ts.srv.WorkTurnsHeld())

	for i := range pulls {
		c := expect[*syncproto.Changes](reader)
		require.Equal(t, fmt.Sprint("pull", i), c.ID)
		require.NotEmpty(t, c.Entries)
	}
	requireApplied(t, reader.push("after", put(t, readerClock, "notes", "k", `{"n":2}`)))
}

// A session parked for a work turn is released when the server cuts it
// (the shutdown's deadline cancels the sessions' context), and the turns
// stay whole: given back, they serve the next session at once.
func TestWorkTurnParkedReaderIsReleasedWhenTheSessionIsCut(t *testing.T) {
	ts := startServer(t, server.Config{SessionWorkTurns: 1})
	c, _ := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	giveBack := ts.srv.HoldWorkTurns("holder")
	c.send(&syncproto.Ping{ID: "parked"})
	require.Eventually(t, func() bool { return ts.MetricValue(t, `syncd_work_turns_waiting{tenant="acme"}`) == 1 }, workTurnTestWait, time.Millisecond,
		"the ping's reader parks")

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, ts.srv.Shutdown(ctx), context.DeadlineExceeded, "the parked session was cut at the deadline, and Shutdown returned")
	require.Equal(t, 0.0, ts.MetricValue(t, `syncd_work_turns_waiting{tenant="acme"}`))
	giveBack()
	require.Zero(t, ts.srv.WorkTurnsHeld())
}

// A subscription parked for a work turn (a commit woke it while every
// turn was held) is released when its session ends: the client leaves,
// the reader stops the subscription, and the session is gone, with no
// turn lost.
func TestWorkTurnParkedFeedIsReleasedWhenTheSessionEnds(t *testing.T) {
	ts := startServer(t, server.Config{SessionWorkTurns: 1, RetentionInterval: -1})
	c, _ := session(t, ts, ts.Member(t, "acme", "tablet"), "tablet")
	c.subscribe("s", 0)
	giveBack := ts.srv.HoldWorkTurns("holder")
	m := put(t, syncproto.NewClock("other", nil), "notes", "n", `{"n":1}`)
	require.NoError(t, ts.srv.CommitAs(context.Background(), "acme", "other", []syncproto.Mutation{m}))
	require.Eventually(t, func() bool { return ts.MetricValue(t, `syncd_work_turns_waiting{tenant="acme"}`) == 1 }, workTurnTestWait, time.Millisecond,
		"the woken feed parks")

	c.conn.CloseNow()
	require.Eventually(t, func() bool {
		return ts.MetricValue(t, `syncd_subscribers`) == 0 && ts.MetricValue(t, `syncd_work_turns_waiting{tenant="acme"}`) == 0
	}, workTurnTestWait, time.Millisecond, "the session ends and its feed leaves the line")
	giveBack()
	require.Zero(t, ts.srv.WorkTurnsHeld())

	// The turns are whole: another session is served.
	other, otherClock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	requireApplied(t, other.push("w1", put(t, otherClock, "notes", "m", `{"n":2}`)))
}
