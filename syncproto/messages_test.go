package syncproto_test

import (
	"encoding/json"

	"github.com/syncd-dev/syncd/syncproto"
)

// Fixed values shared by the tests.
const (
	opA = "01938a5e-7b2c-7cde-8f01-23456789abcd"
	opB = "01938a5e-7b2c-7cde-8f01-23456789abce"
	opC = "01938a5e-7b2c-7cde-8f01-23456789abcf"
)

func u64(v uint64) *uint64 { return &v }

// sampleMessages returns one valid message of every type, with every
// optional field set somewhere.
func sampleMessages() []syncproto.Message {
	hlcA := ts(1733140000000, 0, "client-a")
	srv := ts(1733140000100, 2, "node-1")
	return []syncproto.Message{
		&syncproto.Hello{ID: "h1", ClientID: "client-a", Cursor: 41, HLC: hlcA},
		&syncproto.Welcome{
			ID: "h1", NodeID: "node-1", ServerHLC: srv, ServerTime: 1733140000090, DatabaseID: "0193a1f0-5c1e-7a4b-9d2e-6f3c8b1a2e4d", Head: 57,
			Limits: syncproto.DefaultLimits(),
			Models: map[string]syncproto.ModelAccess{
				"todos": {Policy: syncproto.PolicyLWW, Read: true, Write: true},
				"docs":  {Policy: syncproto.PolicyOptimistic, Read: true},
			},
		},
		&syncproto.Push{ID: "p1", Mutations: []syncproto.Mutation{
			{OpID: opA, Model: "todos", Key: "t/1", Op: syncproto.OpPut, Value: json.RawMessage(`{"title":"milk <&>","done":false}`), HLC: hlcA},
			{OpID: opB, Model: "docs", Key: "readme", Op: syncproto.OpPut, Value: json.RawMessage(`"v2"`), HLC: ts(1733140000000, 1, "client-a"), BaseVersion: u64(3)},
			{OpID: opC, Model: "todos", Key: "t/2", Op: syncproto.OpDelete, HLC: ts(1733140000000, 2, "client-a")},
		}},
		&syncproto.PushResult{ID: "p1", Results: []syncproto.Result{
			{OpID: opA, Status: syncproto.StatusApplied, Version: 1, Seq: 58, HLC: hlcA},
			{OpID: opB, Status: syncproto.StatusConflict, Winner: &syncproto.Winner{Version: 4, Value: json.RawMessage(`"v2-by-b"`), HLC: ts(1733139999000, 0, "client-b")}},
			{OpID: opC, Status: syncproto.StatusRejected, Code: syncproto.CodeForbiddenModel, Message: "token may not write todos"},
		}},
		&syncproto.PushResult{ID: "p2", Results: []syncproto.Result{
			{OpID: opA, Status: syncproto.StatusDuplicate, OriginalStatus: syncproto.StatusApplied, Version: 1, Seq: 58, HLC: hlcA},
			{OpID: opB, Status: syncproto.StatusSuperseded, Winner: &syncproto.Winner{Version: 9, HLC: ts(1733140000500, 0, "client-b"), Deleted: true}},
			{OpID: opC, Status: syncproto.StatusExpired, Message: "older than the replay ledger"},
		}},
		&syncproto.Pull{ID: "q1", Cursor: 41, Limit: 2},
		&syncproto.Subscribe{ID: "s1", Cursor: 58},
		&syncproto.Unsubscribe{ID: "u1"},
		&syncproto.Ping{ID: "k1"},
		&syncproto.Pong{ID: "k1"},
		&syncproto.Changes{ID: "q1", Cursor: 44, Head: 58, More: true, Entries: []syncproto.Change{
			{Seq: 42, OpID: opA, Model: "todos", Key: "t/1", Op: syncproto.OpPut, Value: json.RawMessage(`{"title":"milk"}`), Version: 1, HLC: hlcA},
			{Seq: 44, OpID: opC, Model: "todos", Key: "t/2", Op: syncproto.OpDelete, Version: 2, HLC: ts(1733140000000, 2, "client-a"), Deleted: true},
		}},
		&syncproto.Changes{ID: "s1", Cursor: 58, Head: 58},
		&syncproto.Resync{ID: "s1", Reason: syncproto.ResyncCursorExpired, SnapshotURL: syncproto.SnapshotPath, Head: 58},
		&syncproto.Error{ID: "p3", Code: syncproto.CodeRateLimited, Message: "slow down", Retryable: true, RetryAfterMS: 250},
		&syncproto.Error{Code: syncproto.CodeHelloRequired, Message: "hello must come first"},
	}
}
