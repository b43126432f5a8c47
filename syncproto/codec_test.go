package syncproto_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/syncproto"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, msg := range sampleMessages() {
		t.Run(string(msg.Type()), func(t *testing.T) {
			frame, err := syncproto.Encode(msg)
			require.NoError(t, err)
			require.True(t, bytes.HasPrefix(frame, []byte(`{"type":"`+string(msg.Type())+`"`)), "type comes first: %s", frame)
			got, err := syncproto.Decode(frame)
			require.NoError(t, err)
			require.Equal(t, normalized(t, msg), got)
			again, err := syncproto.Encode(got)
			require.NoError(t, err)
			require.Equal(t, string(frame), string(again), "encoding is deterministic")
		})
	}
}

// normalized returns msg as Decode returns it: nil collections empty.
func normalized(t *testing.T, msg syncproto.Message) syncproto.Message {
	t.Helper()
	switch m := msg.(type) {
	case *syncproto.Changes:
		if m.Entries == nil {
			c := *m
			c.Entries = []syncproto.Change{}
			return &c
		}
	}
	return msg
}

func TestEncodeShape(t *testing.T) {
	frame, err := syncproto.Encode(&syncproto.Changes{ID: "s1", Cursor: 5, Head: 5})
	require.NoError(t, err)
	require.Equal(t, `{"type":"changes","id":"s1","entries":[],"cursor":5,"head":5,"more":false}`, string(frame))

	frame, err = syncproto.Encode(&syncproto.Push{ID: "p1", Mutations: []syncproto.Mutation{
		{OpID: opA, Model: "m", Key: "k", Op: syncproto.OpPut, Value: json.RawMessage(`{ "a" : "<&>" }`), HLC: ts(5, 0, "c")},
	}})
	require.NoError(t, err)
	require.Equal(t, `{"type":"push","id":"p1","mutations":[{"op_id":"`+opA+`","model":"m","key":"k","op":"put","value":{"a":"<&>"},"hlc":"5.0.c"}]}`, string(frame),
		"values are compacted, HTML is not escaped, absent base_version is omitted")

	frame, err = syncproto.Encode(&syncproto.Welcome{ID: "h", NodeID: "n", ServerHLC: ts(1, 0, "n"), ServerTime: 1, DatabaseID: "db", Limits: syncproto.DefaultLimits()})
	require.NoError(t, err)
	require.Contains(t, string(frame), `"models":{}`)
}

func TestEncodeRefusesInvalid(t *testing.T) {
	tests := []struct {
		msg  syncproto.Message
		code syncproto.Code
	}{
		{&syncproto.Ping{}, syncproto.CodeBadRequest},
		{&syncproto.Push{ID: "p"}, syncproto.CodeBadRequest},
		{&syncproto.Hello{ID: "h", ClientID: "a", HLC: ts(1, 0, "b")}, syncproto.CodeInvalidHLC},
		{&syncproto.Changes{ID: "c", Cursor: 9, Head: 8}, syncproto.CodeBadRequest},
	}
	for _, tt := range tests {
		_, err := syncproto.Encode(tt.msg)
		var pe *syncproto.Error
		require.ErrorAs(t, err, &pe, "%T", tt.msg)
		require.Equal(t, tt.code, pe.Code, "%T: %v", tt.msg, err)
	}
	_, err := syncproto.Encode(nil)
	require.Error(t, err)
}

func TestEncodeRefusesOversizeFrame(t *testing.T) {
	entries := make([]syncproto.Change, syncproto.MaxPullLimit)
	value := json.RawMessage(`"` + strings.Repeat("x", 8<<10) + `"`)
	for i := range entries {
		entries[i] = syncproto.Change{Seq: uint64(i + 1), OpID: opA, Model: "m", Key: "k", Op: syncproto.OpPut, Value: value, Version: 1, HLC: ts(1, 0, "c")}
	}
	_, err := syncproto.Encode(&syncproto.Changes{ID: "s", Entries: entries, Cursor: syncproto.MaxPullLimit, Head: syncproto.MaxPullLimit})
	var pe *syncproto.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, syncproto.CodeFrameTooLarge, pe.Code)
}

func TestDecodeFrameLimit(t *testing.T) {
	pad := strings.Repeat(" ", syncproto.MaxFrameBytes)
	at := []byte(`{"type":"ping","id":"k"` + pad[:syncproto.MaxFrameBytes-len(`{"type":"ping","id":"k"}`)] + `}`)
	require.Len(t, at, syncproto.MaxFrameBytes)
	_, err := syncproto.Decode(at)
	require.NoError(t, err, "a frame of exactly MaxFrameBytes is accepted")

	over := append([]byte(`{"type":"ping","id":"k"`+pad[:syncproto.MaxFrameBytes-len(`{"type":"ping","id":"k"}`)]), ' ', '}')
	_, err = syncproto.Decode(over)
	requireCode(t, err, syncproto.CodeFrameTooLarge, "")
}

// A frame that is not JSON is malformed without an id, even when its type
// and a well-formed id come before the fault (PROTOCOL.md 5.12): the id
// of a frame that does not parse is not trusted.
func TestMalformedFramesCarryNoID(t *testing.T) {
	for _, frame := range []string{
		`{"type":"push","id":"p1","mutations":[`,
		`{"type":"ping","id":"k1"} x`,
		`{"type":"ping","id":"k1"}{"type":"ping","id":"k2"}`,
		`{"type":"hello","id":"h1","client_id":"phone",}`,
		`{"id":"k1","type":"ping"`,
	} {
		_, err := syncproto.DecodeRequest([]byte(frame))
		requireCode(t, err, syncproto.CodeMalformed, "")
	}
}

func TestDecodeRequestRefusesServerTypes(t *testing.T) {
	for _, msg := range sampleMessages() {
		frame, err := syncproto.Encode(msg)
		require.NoError(t, err)
		_, err = syncproto.DecodeRequest(frame)
		if msg.Type().IsRequest() {
			require.NoError(t, err, "%s", msg.Type())
			continue
		}
		requireCode(t, err, syncproto.CodeUnknownType, msg.RequestID())
	}
}

// TestMutationDecodeIsolation checks that a mutation whose JSON does not fit
// is refused alone, with its field's code, while its push still decodes.
func TestMutationDecodeIsolation(t *testing.T) {
	good := `{"op_id":"` + opA + `","model":"m","key":"k","op":"put","value":1,"hlc":"5.0.c"}`
	frame := `{"type":"push","id":"p","mutations":[` + good + `,
		{"op_id":"` + opB + `","model":"m","key":"k","op":"put","value":1,"hlc":"5.0"},
		{"op_id":7},
		{"op_id":"` + opC + `","model":["m"]},
		{"op_id":"` + opC + `","model":"m","key":1},
		{"op_id":"` + opC + `","model":"m","key":"k","op":true},
		{"op_id":"` + opC + `","model":"m","key":"k","op":"put","value":1,"hlc":"5.0.c","base_version":-1},
		"not an object", null]}`
	msg, err := syncproto.DecodeRequest([]byte(frame))
	require.NoError(t, err)
	push := msg.(*syncproto.Push)
	want := []struct {
		code syncproto.Code
		opID string
	}{
		{"", opA},
		{syncproto.CodeInvalidHLC, opB},
		{syncproto.CodeInvalidOpID, ""},
		{syncproto.CodeInvalidModel, opC},
		{syncproto.CodeInvalidKey, opC},
		{syncproto.CodeInvalidOp, opC},
		{syncproto.CodeBadRequest, opC},
		{syncproto.CodeBadRequest, ""},
		{syncproto.CodeInvalidOpID, ""},
	}
	require.Len(t, push.Mutations, len(want))
	for i, w := range want {
		m := push.Mutations[i]
		require.Equal(t, w.opID, m.OpID, "mutation %d", i)
		err := m.Validate()
		if w.code == "" {
			require.NoError(t, err, "mutation %d", i)
			continue
		}
		requireCode(t, err, w.code, "")
	}
}

// TestPushDecodePathsAgree checks that the fast path Decode takes for a
// well-formed push gives exactly what the lenient per-mutation decoding
// gives.
func TestPushDecodePathsAgree(t *testing.T) {
	for _, msg := range sampleMessages() {
		if msg.Type() != syncproto.TypePush {
			continue
		}
		frame, err := syncproto.Encode(msg)
		require.NoError(t, err)
		fast, err := syncproto.Decode(frame)
		require.NoError(t, err)
		var lenient syncproto.Push
		require.NoError(t, json.Unmarshal(frame, &lenient))
		require.Equal(t, &lenient, fast)
	}
}

func TestErrorMeaning(t *testing.T) {
	retryable := map[syncproto.Code]bool{
		syncproto.CodeRateLimited: true, syncproto.CodeServerBusy: true,
		syncproto.CodeShuttingDown: true, syncproto.CodeInternal: true, syncproto.CodeIdleTimeout: true, syncproto.CodeTokenExpired: true,
	}
	for _, c := range syncproto.Codes {
		e := syncproto.Errorf(c, "x")
		require.Equal(t, retryable[c], e.Retryable, c)
		require.Equal(t, retryable[c], c.Retryable(), c)
		wantAction := syncproto.ActionCharge
		if retryable[c] {
			wantAction = syncproto.ActionResend
		}
		require.Equal(t, wantAction, e.Action(), c)
		require.NoError(t, e.Validate(), c)
	}
	require.False(t, syncproto.Code("from_the_future").Retryable(), "unknown codes are not retryable")

	e := syncproto.Errorf(syncproto.CodeInvalidKey, "key is empty")
	require.Equal(t, "syncproto: invalid_key: key is empty", e.Error())
	require.Equal(t, "p9", e.WithID("p9").ID)
	require.Empty(t, e.ID, "WithID copies")
	require.Equal(t, "syncproto: internal", (&syncproto.Error{Code: syncproto.CodeInternal}).Error())

	// A received error keeps the sender's retryable flag, even for a code
	// this package does not know.
	msg, err := syncproto.Decode([]byte(`{"type":"error","code":"new_code","retryable":true,"retry_after_ms":1500}`))
	require.NoError(t, err)
	got := msg.(*syncproto.Error)
	require.True(t, got.Retryable)
	require.Equal(t, syncproto.ActionResend, got.Action())
	require.Equal(t, "1.5s", got.RetryAfter().String())
}

func TestCloseFor(t *testing.T) {
	tests := map[syncproto.Code]syncproto.CloseCode{
		syncproto.CodeUnauthorized:  1008,
		syncproto.CodeWrongClientID: 1008,
		syncproto.CodeFrameTooLarge: 1009,
		syncproto.CodeShuttingDown:  1001,
		syncproto.CodeServerBusy:    1013,
		syncproto.CodeRateLimited:   1013,
		syncproto.CodeInternal:      1011,
		syncproto.CodeHelloRequired: 1002,
		syncproto.CodeMalformed:     1002,
		syncproto.CodeBadRequest:    1002,
	}
	for code, want := range tests {
		require.Equal(t, want, syncproto.CloseFor(code), code)
	}
}

// requireCode asserts that err is an *Error with code and request id.
func requireCode(t *testing.T, err error, code syncproto.Code, id string) {
	t.Helper()
	var pe *syncproto.Error
	require.True(t, errors.As(err, &pe), "want *Error %s, got %v", code, err)
	require.Equal(t, code, pe.Code, "error: %v", err)
	require.Equal(t, id, pe.ID, "error: %v", err)
}

func TestErrorMessagesFitTheLimit(t *testing.T) {
	long := strings.Repeat("é", syncproto.MaxMessageBytes)
	e := syncproto.Errorf(syncproto.CodeBadRequest, "%s", long)
	require.LessOrEqual(t, len(e.Message), syncproto.MaxMessageBytes)
	require.True(t, utf8.ValidString(e.Message), "cut on a rune boundary")
	require.NoError(t, e.Validate())
}

// A hello with several wrong members is refused for the first of them in
// PROTOCOL.md 5.1's member order (id, client_id, cursor, hlc), whatever
// their order in the frame, a member of the wrong JSON type getting its
// member's code.
func TestHelloCodePrecedenceIgnoresMemberOrder(t *testing.T) {
	for _, tc := range []struct {
		members []string
		code    syncproto.Code
	}{
		{[]string{`"client_id":7`, `"hlc":"yesterday"`, `"cursor":0`}, syncproto.CodeInvalidClientID},
		{[]string{`"client_id":"client a"`, `"cursor":"5"`, `"hlc":"1.0.client a"`}, syncproto.CodeInvalidClientID},
		{[]string{`"client_id":"client-a"`, `"cursor":"5"`, `"hlc":5`}, syncproto.CodeBadRequest},
		{[]string{`"client_id":"client-a"`, `"cursor":0`, `"hlc":5`}, syncproto.CodeInvalidHLC},
	} {
		forward := `{"type":"hello","id":"h1",` + strings.Join(tc.members, ",") + `}`
		backward := `{"type":"hello","id":"h1",` + tc.members[2] + "," + tc.members[1] + "," + tc.members[0] + `}`
		for _, frame := range []string{forward, backward} {
			_, err := syncproto.DecodeRequest([]byte(frame))
			requireCode(t, err, tc.code, "h1")
		}
	}
}
