package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// badEnv is what the bad-input cases share: one server, a client "phone" of
// tenant acme that may write notes and accounts (optimistic) but not
// audit, another tenant's client, and one op already applied.
type badEnv struct {
	t          *testing.T
	ts         *testServer
	phone      string // token
	globex     string // token of another tenant
	clock      *syncproto.Clock
	takenOp    string // applied as notes/taken = "v1"
	globexKey  string // written by globex in notes
	globexHead uint64 // the seq of globex's write
}

// wsFrame is one frame a case sends.
type wsFrame struct {
	typ  websocket.MessageType
	data []byte
}

func text(s string) wsFrame { return wsFrame{typ: websocket.MessageText, data: []byte(s)} }

// badInput is one refused input and the answer PROTOCOL.md documents for it.
type badInput struct {
	name string
	// dial is the upgrade request; nil means phone's token and the
	// subprotocol.
	dial func(e *badEnv) *websocket.DialOptions
	// noHello skips the valid hello that otherwise opens the session.
	noHello bool
	frames  func(e *badEnv) []wsFrame
	// Expected answer: an HTTP status for a refused upgrade (with code in
	// its JSON body unless code is empty); else an error frame with code
	// and id, or, when result, a push_result whose every result is rejected
	// with code. close is the close code that follows, 0 when the
	// connection stays open.
	status int
	code   syncproto.Code
	id     string
	result bool
	close  syncproto.CloseCode
	// check, when set, replaces every expectation above and the final
	// check that the connection stays open; answer then says in words
	// what it checks, as PROTOCOL.md section 17 does.
	check  func(e *badEnv, c *wsClient)
	answer string
}

// documentedAnswer is the answer tc expects, in the words of PROTOCOL.md
// section 17's rows.
func (tc badInput) documentedAnswer() string {
	switch {
	case tc.check != nil:
		return tc.answer
	case tc.status != 0:
		return fmt.Sprintf("HTTP %d, JSON `error` `%s`; no upgrade", tc.status, tc.code)
	case tc.result:
		return fmt.Sprintf("result `rejected`, `%s`", tc.code)
	}
	id := "without `id`"
	if tc.id != "" {
		id = fmt.Sprintf("with `id` `%s`", tc.id)
	}
	if tc.close != 0 {
		return fmt.Sprintf("`error` `%s` %s, then close %d with reason `%s`", tc.code, id, tc.close, tc.code)
	}
	return fmt.Sprintf("`error` `%s` %s; the connection stays open", tc.code, id)
}

// mutation returns a valid put by phone as a JSON object, changed by edit
// (a nil value in edit removes the member).
func (e *badEnv) mutation(edit map[string]any) map[string]any {
	m := map[string]any{
		"op_id": newOpID(e.t), "model": "notes", "key": "k", "op": "put",
		"value": json.RawMessage(`{"n":1}`), "hlc": e.clock.Now().String(),
	}
	for k, v := range edit {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	return m
}

// push returns a push frame (id p1) holding muts.
func (e *badEnv) push(muts ...map[string]any) []wsFrame {
	return []wsFrame{e.frame(map[string]any{"type": "push", "id": "p1", "mutations": muts})}
}

func (e *badEnv) frame(v any) wsFrame {
	b, err := json.Marshal(v)
	require.NoError(e.t, err)
	return wsFrame{typ: websocket.MessageText, data: b}
}

func (e *badEnv) tokenDial(token string) *websocket.DialOptions { return dialOptions(token) }

func TestBadInputsGetTheirDocumentedAnswerAndApplyNothing(t *testing.T) {
	ts := startServer(t, server.Config{Policies: replication.Config{"accounts": syncproto.PolicyOptimistic},
		Scopes: projectScopes(t), MaxScopeValues: 3})
	e := &badEnv{
		t: t, ts: ts,
		phone:  ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "phone", Read: []string{"*"}, Write: []string{"notes", "accounts"}}),
		globex: ts.Member(t, "globex", "intruder"),
		clock:  syncproto.NewClock("phone", nil),
	}
	c, _ := session(t, ts, e.phone, "phone")
	taken := put(t, e.clock, "notes", "taken", `"v1"`)
	requireApplied(t, c.push("setup", taken))
	e.takenOp = taken.OpID
	g, gClock := session(t, ts, e.globex, "intruder")
	secret := put(t, gClock, "notes", "secret-of-globex", `"classified"`)
	res := g.push("setup", secret)
	requireApplied(t, res)
	e.globexKey, e.globexHead = secret.Key, res[0].Seq

	bigValue := `"` + strings.Repeat("x", syncproto.MaxPayloadBytes) + `"`
	deepValue := strings.Repeat("[", syncproto.MaxValueDepth+1) + strings.Repeat("]", syncproto.MaxValueDepth+1)
	// Inside the push object, its mutations array and the mutation object.
	frameDeepValue := strings.Repeat("[", syncproto.MaxFrameDepth-2) + strings.Repeat("]", syncproto.MaxFrameDepth-2)
	tooMany := make([]map[string]any, syncproto.MaxBatch+1)
	for i := range tooMany {
		tooMany[i] = e.mutation(map[string]any{"key": fmt.Sprintf("k%d", i)})
	}
	helloFrame := func(edit map[string]any) func(*badEnv) []wsFrame {
		return func(e *badEnv) []wsFrame {
			h := map[string]any{"type": "hello", "id": "h1", "client_id": "phone", "cursor": 0, "hlc": e.clock.Now().String()}
			for k, v := range edit {
				h[k] = v
			}
			return []wsFrame{e.frame(h)}
		}
	}
	frames := func(fs ...string) func(*badEnv) []wsFrame {
		return func(*badEnv) []wsFrame {
			out := make([]wsFrame, len(fs))
			for i, f := range fs {
				out[i] = text(f)
			}
			return out
		}
	}
	pushOf := func(edit map[string]any) func(*badEnv) []wsFrame {
		return func(e *badEnv) []wsFrame { return e.push(e.mutation(edit)) }
	}
	// inOrder is a push of one mutation whose members are sent in the
	// order given (JSON text after each name), after a fresh op_id.
	inOrder := func(members ...string) func(*badEnv) []wsFrame {
		return func(e *badEnv) []wsFrame {
			m := `{"op_id":"` + newOpID(e.t) + `",` + strings.Join(members, ",") + `}`
			return frames(`{"type":"push","id":"p1","mutations":[` + m + `]}`)(e)
		}
	}
	validHLC := func() string { return `"hlc":"` + e.clock.Now().String() + `"` }

	cases := []badInput{
		// Refused before the upgrade (PROTOCOL.md section 1).
		{name: "no subprotocol", status: http.StatusBadRequest, code: syncproto.CodeBadRequest,
			dial: func(e *badEnv) *websocket.DialOptions {
				o := e.tokenDial(e.phone)
				o.Subprotocols = nil
				return o
			}},
		{name: "wrong subprotocol", status: http.StatusBadRequest, code: syncproto.CodeBadRequest,
			dial: func(e *badEnv) *websocket.DialOptions {
				o := e.tokenDial(e.phone)
				o.Subprotocols = []string{"syncproto.v0"}
				return o
			}},
		{name: "no token", status: http.StatusUnauthorized, code: syncproto.CodeUnauthorized,
			dial: func(*badEnv) *websocket.DialOptions {
				return &websocket.DialOptions{Subprotocols: []string{syncproto.Subprotocol}}
			}},
		{name: "wrong token", status: http.StatusUnauthorized, code: syncproto.CodeUnauthorized,
			dial: func(e *badEnv) *websocket.DialOptions { return e.tokenDial(e.phone + "x") }},
		{name: "token not as bearer", status: http.StatusUnauthorized, code: syncproto.CodeUnauthorized,
			dial: func(e *badEnv) *websocket.DialOptions {
				o := e.tokenDial(e.phone)
				o.HTTPHeader.Set("Authorization", "Basic "+e.phone)
				return o
			}},
		{name: "admin token on the sync endpoint", status: http.StatusUnauthorized, code: syncproto.CodeUnauthorized,
			dial: func(e *badEnv) *websocket.DialOptions { return e.tokenDial(e.ts.adminToken) }},
		{name: "browser origin not allowed", status: http.StatusForbidden, code: syncproto.CodeForbiddenOrigin,
			dial: func(e *badEnv) *websocket.DialOptions {
				o := e.tokenDial(e.phone)
				o.HTTPHeader.Set("Origin", "https://evil.example")
				return o
			}},

		// The session's first message (PROTOCOL.md section 4).
		{name: "request before hello", noHello: true, frames: frames(`{"type":"ping","id":"k1"}`),
			code: syncproto.CodeHelloRequired, id: "k1", close: syncproto.CloseProtocolError},
		{name: "push before hello", noHello: true, frames: pushOf(nil),
			code: syncproto.CodeHelloRequired, id: "p1", close: syncproto.CloseProtocolError},
		{name: "malformed JSON before hello", noHello: true, frames: frames(`{"type":"hello",`),
			code: syncproto.CodeMalformed, close: syncproto.CloseProtocolError},
		{name: "hello as another client id", noHello: true, frames: helloFrame(map[string]any{"client_id": "laptop", "hlc": "1733140000000.0.laptop"}),
			code: syncproto.CodeWrongClientID, id: "h1", close: syncproto.ClosePolicyViolation},
		{name: "hello with an invalid client id", noHello: true, frames: helloFrame(map[string]any{"client_id": "no spaces"}),
			code: syncproto.CodeInvalidClientID, id: "h1", close: syncproto.CloseProtocolError},
		{name: "hello hlc origin not the client id", noHello: true, frames: helloFrame(map[string]any{"hlc": "1733140000000.0.laptop"}),
			code: syncproto.CodeInvalidHLC, id: "h1", close: syncproto.CloseProtocolError},
		{name: "hello with a client id of the wrong type before an unparsable hlc", noHello: true, frames: frames(`{"type":"hello","id":"h1","hlc":"yesterday","cursor":0,"client_id":7}`),
			code: syncproto.CodeInvalidClientID, id: "h1", close: syncproto.CloseProtocolError},
		{name: "hello cursor from the future", noHello: true, frames: helloFrame(map[string]any{"cursor": 1 << 40}),
			code: syncproto.CodeCursorAhead, id: "h1", close: syncproto.CloseProtocolError},
		{name: "second hello", frames: helloFrame(map[string]any{"id": "h2"}),
			code: syncproto.CodeHelloRequired, id: "h2", close: syncproto.CloseProtocolError},

		// Framing (PROTOCOL.md section 2).
		{name: "malformed JSON", frames: frames(`{"type":"push","mutations":[`),
			code: syncproto.CodeMalformed, close: syncproto.CloseProtocolError},
		{name: "malformed JSON after the id", frames: frames(`{"type":"push","id":"p1","mutations":[`),
			code: syncproto.CodeMalformed, close: syncproto.CloseProtocolError},
		{name: "data after the object", frames: frames(`{"type":"ping","id":"k1"} x`),
			code: syncproto.CodeMalformed, close: syncproto.CloseProtocolError},
		{name: "not an object", frames: frames(`["push"]`),
			code: syncproto.CodeMalformed, close: syncproto.CloseProtocolError},
		{name: "not UTF-8", frames: func(*badEnv) []wsFrame {
			return []wsFrame{{typ: websocket.MessageText, data: []byte("{\"type\":\"ping\",\"id\":\"\xff\"}")}}
		}, code: syncproto.CodeMalformed, close: syncproto.CloseProtocolError},
		{name: "binary frame", frames: func(*badEnv) []wsFrame {
			return []wsFrame{{typ: websocket.MessageBinary, data: []byte(`{"type":"ping","id":"k1"}`)}}
		}, code: syncproto.CodeMalformed, close: syncproto.CloseProtocolError},
		{name: "oversize frame", frames: func(*badEnv) []wsFrame {
			pad := strings.Repeat(" ", syncproto.MaxFrameBytes)
			return []wsFrame{text(`{"type":"ping","id":"k1"}` + pad)}
		}, code: syncproto.CodeFrameTooLarge, close: syncproto.CloseMessageTooBig},

		// Requests the server refuses and keeps the connection.
		{name: "unknown message type", frames: frames(`{"type":"frobnicate","id":"x1"}`),
			code: syncproto.CodeUnknownType, id: "x1"},
		{name: "a server-to-client type", frames: frames(`{"type":"welcome","id":"x1"}`),
			code: syncproto.CodeUnknownType, id: "x1"},
		{name: "missing type", frames: frames(`{"id":"x1"}`), code: syncproto.CodeBadRequest, id: "x1"},
		{name: "type not a string", frames: frames(`{"type":7,"id":"x1"}`), code: syncproto.CodeBadRequest, id: "x1"},
		{name: "request id too long", frames: frames(`{"type":"ping","id":"` + strings.Repeat("i", syncproto.MaxRequestIDBytes+1) + `"}`),
			code: syncproto.CodeBadRequest},
		{name: "push without id", frames: func(e *badEnv) []wsFrame {
			return []wsFrame{e.frame(map[string]any{"type": "push", "mutations": []any{e.mutation(nil)}})}
		}, code: syncproto.CodeBadRequest},
		{name: "mutations of the wrong type", frames: frames(`{"type":"push","id":"p1","mutations":{"op_id":"x"}}`),
			code: syncproto.CodeBadRequest, id: "p1"},
		{name: "empty push", frames: frames(`{"type":"push","id":"p1","mutations":[]}`), code: syncproto.CodeBadRequest, id: "p1"},
		{name: "oversize batch", frames: func(e *badEnv) []wsFrame { return e.push(tooMany...) },
			code: syncproto.CodeBatchTooLarge, id: "p1"},
		{name: "pull cursor of the wrong type", frames: frames(`{"type":"pull","id":"q1","cursor":"0"}`),
			code: syncproto.CodeBadRequest, id: "q1"},
		{name: "pull cursor above 2^53-1", frames: frames(`{"type":"pull","id":"q1","cursor":9007199254740992}`),
			code: syncproto.CodeBadRequest, id: "q1"},
		{name: "pull limit above the maximum", frames: frames(`{"type":"pull","id":"q1","cursor":0,"limit":1001}`),
			code: syncproto.CodeBadRequest, id: "q1"},
		{name: "pull with a cursor from the future", frames: frames(`{"type":"pull","id":"q1","cursor":1000000}`),
			code: syncproto.CodeCursorAhead, id: "q1"},
		{name: "subscribe with a cursor from the future", frames: frames(`{"type":"subscribe","id":"s1","cursor":1000000}`),
			code: syncproto.CodeCursorAhead, id: "s1"},

		// Scope requests (PROTOCOL.md 19.3): refused, no feed started.
		{name: "subscribe naming an undeclared scope", frames: frames(`{"type":"subscribe","id":"s1","cursor":0,"scopes":{"team":["a"]}}`),
			code: syncproto.CodeInvalidScope, id: "s1"},
		{name: "subscribe holding a value of an undeclared scope", frames: frames(`{"type":"subscribe","id":"s1","cursor":0,"scopes":{},"have":{"team":["a"]}}`),
			code: syncproto.CodeInvalidScope, id: "s1"},
		{name: "subscribe with more scope values than max_scope_values", frames: frames(`{"type":"subscribe","id":"s1","cursor":0,"scopes":{"project":["a","b","c","d"]}}`),
			code: syncproto.CodeTooManyScopeValues, id: "s1"},
		{name: "subscribe holding the value *", frames: frames(`{"type":"subscribe","id":"s1","cursor":0,"scopes":{"project":["*"]},"have":{"project":["*"]}}`),
			code: syncproto.CodeInvalidScope, id: "s1"},
		{name: "subscribe with * beside other values", frames: frames(`{"type":"subscribe","id":"s1","cursor":0,"scopes":{"project":["*","a"]}}`),
			code: syncproto.CodeInvalidScope, id: "s1"},
		{name: "subscribe with a scope value holding a control character", frames: frames(`{"type":"subscribe","id":"s1","cursor":0,"scopes":{"project":["a\u0007b"]}}`),
			code: syncproto.CodeInvalidScopeValue, id: "s1"},
		{name: "subscribe with scope values of the wrong type", frames: frames(`{"type":"subscribe","id":"s1","cursor":0,"scopes":{"project":"a"}}`),
			code: syncproto.CodeBadRequest, id: "s1"},
		{name: "pull naming an undeclared scope", frames: frames(`{"type":"pull","id":"q1","cursor":0,"scopes":{"team":["a"]}}`),
			code: syncproto.CodeInvalidScope, id: "q1"},

		// Mutations refused alone, as rejected results (PROTOCOL.md 5.3).
		{name: "empty key", frames: pushOf(map[string]any{"key": ""}), result: true, code: syncproto.CodeInvalidKey},
		{name: "overlong key", frames: pushOf(map[string]any{"key": strings.Repeat("k", syncproto.MaxKeyBytes+1)}), result: true, code: syncproto.CodeInvalidKey},
		{name: "key with a control character", frames: pushOf(map[string]any{"key": "a\u0007b"}), result: true, code: syncproto.CodeInvalidKey},
		{name: "key of the wrong type", frames: pushOf(map[string]any{"key": 42}), result: true, code: syncproto.CodeInvalidKey},
		{name: "key with a lone surrogate escape", frames: inOrder(`"model":"notes"`, `"key":"a\ud800b"`, `"op":"put"`, `"value":1`, validHLC()),
			result: true, code: syncproto.CodeInvalidKey},
		{name: "key and base_version of the wrong type, key first", frames: inOrder(`"model":"notes"`, `"key":42`, `"op":"put"`, `"value":1`, validHLC(), `"base_version":"3"`),
			result: true, code: syncproto.CodeInvalidKey},
		{name: "key and base_version of the wrong type, base_version first", frames: inOrder(`"base_version":"3"`, validHLC(), `"value":1`, `"op":"put"`, `"key":42`, `"model":"notes"`),
			result: true, code: syncproto.CodeInvalidKey},
		{name: "malformed hlc before a key of the wrong type", frames: inOrder(`"hlc":"yesterday"`, `"model":"notes"`, `"key":42`, `"op":"put"`, `"value":1`),
			result: true, code: syncproto.CodeInvalidKey},
		{name: "bad model name", frames: pushOf(map[string]any{"model": "Bad-Model"}), result: true, code: syncproto.CodeInvalidModel},
		{name: "missing op id", frames: pushOf(map[string]any{"op_id": nil}), result: true, code: syncproto.CodeInvalidOpID},
		{name: "non-canonical op id", frames: pushOf(map[string]any{"op_id": strings.ToUpper(newOpID(t))}), result: true, code: syncproto.CodeInvalidOpID},
		{name: "op id reused with a different payload", frames: func(e *badEnv) []wsFrame {
			return e.push(e.mutation(map[string]any{"op_id": e.takenOp, "key": "taken", "value": json.RawMessage(`"v2"`)}))
		}, result: true, code: syncproto.CodeOpIDReused},
		{name: "model the token may not write", frames: pushOf(map[string]any{"model": "audit"}), result: true, code: syncproto.CodeForbiddenModel},
		{name: "hlc origin not the client's", frames: pushOf(map[string]any{"hlc": "1733140000000.0.laptop"}), result: true, code: syncproto.CodeInvalidHLC},
		{name: "malformed hlc", frames: pushOf(map[string]any{"hlc": "yesterday"}), result: true, code: syncproto.CodeInvalidHLC},
		{name: "missing hlc", frames: pushOf(map[string]any{"hlc": nil}), result: true, code: syncproto.CodeInvalidHLC},
		{name: "hlc beyond the skew bound", frames: pushOf(map[string]any{"hlc": "253402300799999.0.phone"}), result: true, code: syncproto.CodeClockSkew},
		{name: "put without value", frames: pushOf(map[string]any{"value": nil}), result: true, code: syncproto.CodeInvalidOp},
		{name: "delete with value", frames: pushOf(map[string]any{"op": "delete"}), result: true, code: syncproto.CodeInvalidOp},
		{name: "unknown op", frames: pushOf(map[string]any{"op": "upsert"}), result: true, code: syncproto.CodeInvalidOp},
		{name: "missing base_version on an optimistic model", frames: pushOf(map[string]any{"model": "accounts"}), result: true, code: syncproto.CodeMissingBaseVersion},
		{name: "base_version of the wrong type", frames: pushOf(map[string]any{"base_version": "3"}), result: true, code: syncproto.CodeBadRequest},
		{name: "value over MaxPayloadBytes", frames: pushOf(map[string]any{"value": json.RawMessage(bigValue)}), result: true, code: syncproto.CodePayloadTooLarge},
		{name: "value nested deeper than MaxValueDepth", frames: pushOf(map[string]any{"value": json.RawMessage(deepValue)}), result: true, code: syncproto.CodeBadRequest},
		{name: "value_version above MaxValueVersion", frames: pushOf(map[string]any{"value_version": syncproto.MaxValueVersion + 1}), result: true, code: syncproto.CodeBadRequest},
		{name: "value_version of the wrong type", frames: pushOf(map[string]any{"value_version": "2"}), result: true, code: syncproto.CodeBadRequest},
		{name: "frame nested deeper than MaxFrameDepth", frames: pushOf(map[string]any{"value": json.RawMessage(frameDeepValue)}),
			code: syncproto.CodeMalformed, close: syncproto.CloseProtocolError},

		// Another tenant's data is not there to read.
		{name: "another tenant's key", frames: frames(`{"type":"pull","id":"q1","cursor":0,"limit":1000}`),
			answer: "`changes` without the other tenant's entries (its seqs are gaps in the cursor); nothing else",
			check: func(e *badEnv, c *wsClient) {
				ch := expect[*syncproto.Changes](c)
				require.Greater(e.t, ch.Head, e.globexHead-1, "the head counts every tenant")
				for _, entry := range ch.Entries {
					require.NotEqual(e.t, e.globexKey, entry.Key)
					require.NotEqual(e.t, e.globexHead, entry.Seq)
				}
				require.Empty(e.t, c.barrier())
			}},
		{name: "another tenant's key in the snapshot", frames: func(*badEnv) []wsFrame { return nil },
			answer: "the snapshot holds only the token's tenant's records",
			check: func(e *badEnv, _ *wsClient) {
				_, recs := e.ts.Snapshot(e.t, e.phone)
				require.NotEmpty(e.t, recs)
				for _, r := range recs {
					require.NotEqual(e.t, e.globexKey, r.Key)
				}
			}},
	}
	require.GreaterOrEqual(t, len(cases), 25)
	requireConformanceChecklist(t, cases)

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.t = t
			head := ts.head(t)
			runBadInput(t, e, tc)
			require.Equal(t, head, ts.head(t), "nothing applied")
		})
	}
	e.t = t

	// The setup writes are the only ones: nothing the cases sent reached
	// the oplog.
	require.Len(t, ts.Oplog(t, ""), 2)
}

func runBadInput(t *testing.T, e *badEnv, tc badInput) {
	opts := dialOptions(e.phone)
	if tc.dial != nil {
		opts = tc.dial(e)
	}
	if tc.status != 0 {
		resp := refusal(t, e.ts, opts, tc.status)
		defer resp.Body.Close()
		if tc.code != "" {
			body := httpErrorBody(t, resp)
			require.Equal(t, tc.code, body.Code)
			require.Equal(t, tc.code.Retryable(), body.Retryable)
		}
		return
	}
	c := dialWith(t, e.ts, opts)
	if !tc.noHello {
		c.hello("phone", 0, e.clock)
	}
	for _, f := range tc.frames(e) {
		c.write(f.typ, f.data)
	}
	switch {
	case tc.check != nil:
		tc.check(e, c)
		return
	case tc.result:
		pr := expect[*syncproto.PushResult](c)
		require.Equal(t, "p1", pr.ID)
		for _, r := range pr.Results {
			require.Equal(t, syncproto.StatusRejected, r.Status, "%+v", r)
			require.Equal(t, tc.code, r.Code, "%+v", r)
			if tc.code == syncproto.CodeInvalidOpID {
				require.Empty(t, r.OpID, "an invalid op id is not echoed (section 5.4)")
			}
			if r.OpID != "" && r.OpID != e.takenOp {
				_, found := e.ts.Decided(t, "acme", r.OpID)
				require.False(t, found, "a rejection is not recorded")
			}
		}
	case tc.code != "":
		c.recvError(tc.id, tc.code)
	}
	if tc.close != 0 {
		require.Equal(t, tc.close, syncproto.CloseFor(tc.code))
		require.Empty(t, c.expectClosing(tc.code), "nothing after the error but the close")
		return
	}
	require.Empty(t, c.barrier(), "the connection stays open and quiet")
}

// A message over the frame limit sent as fragments is refused like one
// frame (PROTOCOL.md section 2): error frame_too_large, then close 1009,
// and the session applied nothing.
func TestOversizeFragmentedMessageIsRefused(t *testing.T) {
	ts := startServer(t, server.Config{})
	c, _ := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	head := ts.head(t)
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	w, err := c.conn.Writer(ctx, websocket.MessageText)
	require.NoError(t, err)
	chunk := []byte(strings.Repeat(" ", 1<<20))
	for range syncproto.MaxFrameBytes/len(chunk) + 1 {
		if _, err := w.Write(chunk); err != nil {
			break // the server closed after the limit: expected
		}
	}
	w.Close()
	c.expectRefusalClose(syncproto.CodeFrameTooLarge)
	require.Equal(t, head, ts.head(t))
}

// requireConformanceChecklist requires PROTOCOL.md section 17 to list
// exactly the cases tested: every bad-input case by name with the answer
// the case expects, in the row's words, and every other row a test
// function of this package.
func requireConformanceChecklist(t *testing.T, cases []badInput) {
	t.Helper()
	doc, err := os.ReadFile("../PROTOCOL.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "\n## 17. Conformance checklist\n")
	require.True(t, ok, "PROTOCOL.md has no section 17")
	section, _, _ = strings.Cut(section, "\n## 18.")
	answers := map[string]string{}
	for _, tc := range cases {
		answers[tc.name] = tc.documentedAnswer()
	}
	tests := testFunctions(t)
	documented := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| case |") || strings.HasPrefix(line, "| --- |") {
			continue
		}
		cells := strings.Split(line, " | ")
		require.Len(t, cells, 2, "a row of two cells: %s", line)
		row, answer := strings.TrimPrefix(cells[0], "| "), strings.TrimSuffix(cells[1], " |")
		documented[row] = true
		if name, ok := strings.CutPrefix(row, "`"); ok {
			name = strings.TrimSuffix(name, "`")
			require.True(t, tests[name], "section 17 names %s, which is no test of package server", name)
			continue
		}
		want, ok := answers[row]
		require.True(t, ok, "section 17 lists %q, which is no bad-input case", row)
		require.Equal(t, want, answer, "section 17's answer for %q is not what the case expects", row)
	}
	for _, tc := range cases {
		require.True(t, documented[tc.name], "bad-input case %q is missing from PROTOCOL.md section 17", tc.name)
	}
}

// testFunctions returns the names of this package's test functions.
func testFunctions(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	names := map[string]bool{}
	re := regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range re.FindAllStringSubmatch(string(src), -1) {
			names[m[1]] = true
		}
	}
	return names
}
