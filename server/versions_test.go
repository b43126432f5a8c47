package server_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncproto"
)

// renameTitle upcasts a notes value of version 1 ({"title"}) to version 2
// ({"name"}).
func renameTitle(v json.RawMessage) (json.RawMessage, error) {
	var m map[string]any
	if err := json.Unmarshal(v, &m); err != nil {
		return nil, err
	}
	m["name"] = m["title"]
	delete(m, "title")
	return json.Marshal(m)
}

// versioned is put with a value version.
func versioned(m syncproto.Mutation, v uint64) syncproto.Mutation {
	m.ValueVersion = v
	return m
}

func TestValueVersionsAreAnnouncedAndChecked(t *testing.T) {
	ts := startServer(t, server.Config{ValueVersions: map[string]server.ModelVersions{
		"notes": {Current: 3, Upcasters: map[uint64]server.Upcaster{2: renameTitle}},
	}})
	tok := ts.Member(t, "acme", "phone-1")
	c := dial(t, ts, tok)
	clock := syncproto.NewClock("phone-1", nil)
	w := c.hello("phone-1", 0, clock)
	require.Equal(t, map[string][]uint64{"notes": {2, 3}}, w.ValueVersions)

	res := c.push("p1",
		versioned(put(t, clock, "notes", "a", `{"name":"x"}`), 4),
		put(t, clock, "notes", "b", `{"title":"y"}`), // version 1: no upcaster from it
		put(t, clock, "todos", "t", `{"done":false}`),
	)
	require.Equal(t, syncproto.StatusRejected, res[0].Status)
	require.Equal(t, syncproto.CodeNeedsUpgrade, res[0].Code)
	require.Equal(t, []uint64{2, 3}, res[0].AcceptedVersions)
	require.Equal(t, syncproto.CodeNeedsUpgrade, res[1].Code)
	require.Equal(t, syncproto.ActionPause, res[1].Action())
	requireApplied(t, res[2:])
	// Paused for the session: even an accepted version waits behind it.
	res = c.push("p2", versioned(put(t, clock, "notes", "c", `{"name":"z"}`), 3))
	require.Equal(t, syncproto.CodeNeedsUpgrade, res[0].Code)
	require.Contains(t, res[0].Message, "paused on this connection")

	c2, clock2 := session(t, ts, tok, "phone-1")
	requireApplied(t, c2.push("p3", versioned(put(t, clock2, "notes", "c", `{"name":"z"}`), 3)))
}

func TestUpcastWriteIsAppliedInTheCurrentShape(t *testing.T) {
	ts := startServer(t, server.Config{ValueVersions: map[string]server.ModelVersions{
		"notes": {Current: 2, Upcasters: map[uint64]server.Upcaster{1: renameTitle}},
	}})
	c, clock := session(t, ts, ts.Member(t, "acme", "phone-1"), "phone-1")
	old := put(t, clock, "notes", "a", `{"title":"milk"}`)
	res := c.push("p1", old)
	requireApplied(t, res)
	require.True(t, res[0].Upcast)
	ch := c.pull("q1", 0)
	require.Len(t, ch.Entries, 1)
	require.JSONEq(t, `{"name":"milk"}`, string(ch.Entries[0].Value))
	again := c.push("p2", old)
	require.Equal(t, syncproto.StatusDuplicate, again[0].Status, "the ledger keeps the write as sent")

	// A losing upcast write is logged as the device sent it.
	loser := put(t, clock, "notes", "b", `{"title":"old"}`)
	requireApplied(t, c.push("p3", versioned(put(t, clock, "notes", "b", `{"name":"new"}`), 2)))
	res = c.push("p4", loser)
	require.Equal(t, syncproto.StatusSuperseded, res[0].Status)
	var conflicts []adminapi.Conflict
	ts.Admin(t, "/v1/admin/conflicts?tenant=acme", &conflicts)
	require.Len(t, conflicts, 1)
	require.JSONEq(t, `{"title":"old"}`, string(conflicts[0].Loser.Value))
	require.Equal(t, 3.0, ts.MetricValue(t, "syncd_upcasts_total"), "every upcast is counted: the write, its resend, the loser")
}

func TestFailingUpcasterRefusesTheWriteAlone(t *testing.T) {
	for name, up := range map[string]server.Upcaster{
		"error":   func(json.RawMessage) (json.RawMessage, error) { return nil, errors.New("no title") },
		"panic":   func(json.RawMessage) (json.RawMessage, error) { panic("upcaster bug") },
		"invalid": func(json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{"name":`), nil },
		"deep": func(json.RawMessage) (json.RawMessage, error) {
			return append(bytes.Repeat([]byte("["), syncproto.MaxValueDepth+1), bytes.Repeat([]byte("]"), syncproto.MaxValueDepth+1)...), nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			ts := startServer(t, server.Config{ValueVersions: map[string]server.ModelVersions{"notes": {Current: 2, Upcasters: map[uint64]server.Upcaster{1: up}}}})
			c, clock := session(t, ts, ts.Member(t, "acme", "phone-1"), "phone-1")
			res := c.push("p1", put(t, clock, "notes", "a", `{"title":"x"}`), put(t, clock, "todos", "t", `{"done":false}`))
			require.Equal(t, syncproto.StatusRejected, res[0].Status)
			require.Equal(t, syncproto.CodeUpcastFailed, res[0].Code)
			require.Equal(t, []uint64{1, 2}, res[0].AcceptedVersions)
			requireApplied(t, res[1:])
			require.Equal(t, 1.0, ts.MetricValue(t, `syncd_value_version_refusals_total{code="upcast_failed"}`))
			// The committer goes on: another session's writes of the model apply.
			c2, clock2 := session(t, ts, ts.Member(t, "acme", "phone-2"), "phone-2")
			requireApplied(t, c2.push("p2", versioned(put(t, clock2, "notes", "b", `{"name":"y"}`), 2)))
		})
	}
}

func TestUnknownMembersAndCodesAreIgnored(t *testing.T) {
	ts := startServer(t, server.Config{})
	c := dial(t, ts, ts.Member(t, "acme", "phone-1"))
	clock := syncproto.NewClock("phone-1", nil)
	c.write(websocket.MessageText, []byte(`{"type":"hello","id":"h1","client_id":"phone-1","cursor":0,"hlc":"`+clock.Now().String()+`","from_the_future":{"x":1}}`))
	expect[*syncproto.Welcome](c)
	m := put(t, clock, "notes", "a", `{"n":1}`)
	frame := `{"type":"push","id":"p1","mutations":[{"op_id":"` + m.OpID + `","model":"notes","key":"a","op":"put","value":{"n":1},"hlc":"` + m.HLC.String() + `","from_the_future":[1,2]}]}`
	c.write(websocket.MessageText, []byte(frame))
	requireApplied(t, c.pushResult("p1", 1))
	// A client reads a result with a code it does not know as a rejection.
	unknown := syncproto.Result{OpID: m.OpID, Status: syncproto.StatusRejected, Code: "from_the_future"}
	require.NoError(t, unknown.Validate())
	require.Equal(t, syncproto.ActionCharge, unknown.Action())
}
