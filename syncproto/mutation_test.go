package syncproto_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/syncproto"
)

func validMutation() syncproto.Mutation {
	return syncproto.Mutation{OpID: opA, Model: "todos", Key: "t/1", Op: syncproto.OpPut, Value: json.RawMessage(`{"a":1}`), HLC: ts(1733140000000, 0, "client-a")}
}

func TestMutationValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(m *syncproto.Mutation)
		want syncproto.Code // "" = valid
	}{
		{"valid put", func(*syncproto.Mutation) {}, ""},
		{"valid delete", func(m *syncproto.Mutation) { m.Op, m.Value = syncproto.OpDelete, nil }, ""},
		{"put of JSON null", func(m *syncproto.Mutation) { m.Value = json.RawMessage(`null`) }, ""},
		{"base version 0", func(m *syncproto.Mutation) { m.BaseVersion = u64(0) }, ""},
		{"unicode key", func(m *syncproto.Mutation) { m.Key = "käse/🧀 with space" }, ""},
		{"key at the limit", func(m *syncproto.Mutation) { m.Key = strings.Repeat("k", syncproto.MaxKeyBytes) }, ""},
		{"value at the limit", func(m *syncproto.Mutation) {
			m.Value = json.RawMessage(`"` + strings.Repeat("v", syncproto.MaxPayloadBytes-2) + `"`)
		}, ""},
		{"random v4 op id", func(m *syncproto.Mutation) { m.OpID = "4f1c7e0a-2b3d-4e5f-8a9b-0c1d2e3f4a5b" }, ""},

		{"missing op id", func(m *syncproto.Mutation) { m.OpID = "" }, syncproto.CodeInvalidOpID},
		{"uppercase op id", func(m *syncproto.Mutation) { m.OpID = strings.ToUpper(opA) }, syncproto.CodeInvalidOpID},
		{"braced op id", func(m *syncproto.Mutation) { m.OpID = "{" + opA + "}" }, syncproto.CodeInvalidOpID},
		{"unhyphenated op id", func(m *syncproto.Mutation) { m.OpID = strings.ReplaceAll(opA, "-", "") }, syncproto.CodeInvalidOpID},
		{"urn op id", func(m *syncproto.Mutation) { m.OpID = "urn:uuid:" + opA }, syncproto.CodeInvalidOpID},
		{"empty model", func(m *syncproto.Mutation) { m.Model = "" }, syncproto.CodeInvalidModel},
		{"uppercase model", func(m *syncproto.Mutation) { m.Model = "Todos" }, syncproto.CodeInvalidModel},
		{"model starting with digit", func(m *syncproto.Mutation) { m.Model = "1todos" }, syncproto.CodeInvalidModel},
		{"model too long", func(m *syncproto.Mutation) { m.Model = "m" + strings.Repeat("x", syncproto.MaxModelBytes) }, syncproto.CodeInvalidModel},
		{"empty key", func(m *syncproto.Mutation) { m.Key = "" }, syncproto.CodeInvalidKey},
		{"key too long", func(m *syncproto.Mutation) { m.Key = strings.Repeat("k", syncproto.MaxKeyBytes+1) }, syncproto.CodeInvalidKey},
		{"key not UTF-8", func(m *syncproto.Mutation) { m.Key = "a\xffb" }, syncproto.CodeInvalidKey},
		{"key with NUL", func(m *syncproto.Mutation) { m.Key = "a\x00b" }, syncproto.CodeInvalidKey},
		{"key with newline", func(m *syncproto.Mutation) { m.Key = "a\nb" }, syncproto.CodeInvalidKey},
		{"key with DEL", func(m *syncproto.Mutation) { m.Key = "a\x7fb" }, syncproto.CodeInvalidKey},
		{"key with C1 control", func(m *syncproto.Mutation) { m.Key = "a\u0085b" }, syncproto.CodeInvalidKey},
		{"unknown op", func(m *syncproto.Mutation) { m.Op = "upsert" }, syncproto.CodeInvalidOp},
		{"put without value", func(m *syncproto.Mutation) { m.Value = nil }, syncproto.CodeInvalidOp},
		{"delete with value", func(m *syncproto.Mutation) { m.Op = syncproto.OpDelete }, syncproto.CodeInvalidOp},
		{"value over the limit", func(m *syncproto.Mutation) {
			m.Value = json.RawMessage(`"` + strings.Repeat("v", syncproto.MaxPayloadBytes-1) + `"`)
		}, syncproto.CodePayloadTooLarge},
		{"value not JSON", func(m *syncproto.Mutation) { m.Value = json.RawMessage(`{`) }, syncproto.CodeBadRequest},
		{"missing hlc", func(m *syncproto.Mutation) { m.HLC = syncproto.Timestamp{} }, syncproto.CodeInvalidHLC},
		{"hlc without origin", func(m *syncproto.Mutation) { m.HLC.Origin = "" }, syncproto.CodeInvalidHLC},
		{"base version beyond 2^53-1", func(m *syncproto.Mutation) { m.BaseVersion = u64(1 << 53) }, syncproto.CodeBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validMutation()
			tt.edit(&m)
			err := m.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			requireCode(t, err, tt.want, "")
		})
	}
}

func TestMutationDigest(t *testing.T) {
	base := validMutation()
	same := []func(m *syncproto.Mutation){
		func(m *syncproto.Mutation) { m.HLC = ts(9, 9, "other") },                 // re-stamped
		func(m *syncproto.Mutation) { m.OpID = opB },                              // the id is the lookup key, not content
		func(m *syncproto.Mutation) { m.Value = json.RawMessage(` { "a" : 1 }`) }, // whitespace
	}
	for i, edit := range same {
		m := validMutation()
		edit(&m)
		require.Equal(t, base.Digest(), m.Digest(), "edit %d keeps the digest", i)
	}
	different := []func(m *syncproto.Mutation){
		func(m *syncproto.Mutation) { m.Model = "todoz" },
		func(m *syncproto.Mutation) { m.Key = "t/2" },
		func(m *syncproto.Mutation) { m.Op, m.Value = syncproto.OpDelete, nil },
		func(m *syncproto.Mutation) { m.Value = json.RawMessage(`{"a":2}`) },
		func(m *syncproto.Mutation) { m.Value = json.RawMessage(`{"a":1.0}`) },
		func(m *syncproto.Mutation) { m.BaseVersion = u64(0) },
		func(m *syncproto.Mutation) { m.BaseVersion = u64(1) },
		// Field boundaries are unambiguous: moving bytes between model and
		// key changes the digest.
		func(m *syncproto.Mutation) { m.Model, m.Key = "todost", "/1" },
	}
	seen := map[string]int{base.Digest(): -1}
	for i, edit := range different {
		m := validMutation()
		edit(&m)
		d := m.Digest()
		require.Len(t, d, 64)
		prev, dup := seen[d]
		require.False(t, dup, "edit %d collides with %d", i, prev)
		seen[d] = i
	}
	// The digest is a stable contract (ledgers persist it); the value was
	// computed independently from the documented layout (PROTOCOL.md).
	require.Equal(t, "1d01ecb0a180a33de95818f48fbde4caaefacedd60eb1f53d90f6066674b50b4", base.Digest())
}

// TestMutationDigestSkipsCompactionOnlyWhenItChangesNothing: Digest
// compacts a value only when it may hold whitespace outside strings; for
// every value, the digest is the one over json.Compact's output (the raw
// bytes when the value is not JSON).
func TestMutationDigestSkipsCompactionOnlyWhenItChangesNothing(t *testing.T) {
	values := []string{
		`{"a":1}`, ` {"a":1}`, `{"a":1} `, "{\"a\":\n1}", "[1,\t2]", "\r\n1",
		`{"a":"x y"}`, `{"a":"x \" y"}`, `{"a":"x\\"}`, `{"a":"x\\" }`, `{"a":"x\\\" "}`,
		`"a b"`, `"\\\\" `, `"unterminated `, `{"a": }`, `not json`, `no json`, `{"a":"x\\\"}`,
		`null`, `12`, ``, `[{"k":["a b",{"c":" d "}]},"e f"]`, `[{"k":["a b",{"c":" d "}]}, "e f"]`,
	}
	for _, v := range values {
		m := validMutation()
		m.Value = json.RawMessage(v)
		want := m
		var compact bytes.Buffer
		if json.Compact(&compact, []byte(v)) == nil {
			want.Value = compact.Bytes()
		}
		// A value without whitespace outside strings digests as itself.
		require.Equal(t, want.Digest(), m.Digest(), "value %q", v)
		require.Equal(t, digestOver(t, want.Value), m.Digest(), "value %q", v)
	}
}

// digestOver is the documented digest layout (PROTOCOL.md) of
// validMutation with value v.
func digestOver(t *testing.T, v []byte) string {
	m := validMutation()
	require.Nil(t, m.BaseVersion)
	h := sha256.New()
	h.Write([]byte("syncproto.v1 mutation digest\x00"))
	for _, f := range [][]byte{[]byte(m.Model), []byte(m.Key), []byte(m.Op), v} {
		h.Write(binary.AppendUvarint(nil, uint64(len(f))))
		h.Write(f)
	}
	h.Write([]byte{0}) // no base_version
	return hex.EncodeToString(h.Sum(nil))
}

func TestNewOpID(t *testing.T) {
	a, err := syncproto.NewOpID()
	require.NoError(t, err)
	b, err := syncproto.NewOpID()
	require.NoError(t, err)
	require.NoError(t, syncproto.ValidateOpID(a))
	require.NotEqual(t, a, b)
	require.Equal(t, byte('7'), a[14], "version 7")
}

func TestValidateIDs(t *testing.T) {
	for _, id := range []string{"a", "client-a", "dev.phone:1_X-y", strings.Repeat("z", syncproto.MaxIDBytes)} {
		require.NoError(t, syncproto.ValidateID(id), id)
	}
	for _, id := range []string{"", "a b", "a/b", "é", strings.Repeat("z", syncproto.MaxIDBytes+1)} {
		requireCode(t, syncproto.ValidateID(id), syncproto.CodeInvalidClientID, "")
	}
	for _, name := range []string{"a", "todos", "todo_items2", "m" + strings.Repeat("x", syncproto.MaxModelBytes-1)} {
		require.NoError(t, syncproto.ValidateModel(name), name)
	}
}

func TestValueDepthLimit(t *testing.T) {
	nested := func(n int, open, close string) string {
		return strings.Repeat(open, n) + "1" + strings.Repeat(close, n)
	}
	id, err := syncproto.NewOpID()
	require.NoError(t, err)
	m := syncproto.Mutation{OpID: id, Model: "notes", Key: "k", Op: syncproto.OpPut, HLC: syncproto.NewClock("phone", nil).Now()}
	for _, tc := range []struct {
		value string
		ok    bool
	}{
		{nested(syncproto.MaxValueDepth, "[", "]"), true},
		{nested(syncproto.MaxValueDepth+1, "[", "]"), false},
		{strings.Repeat(`{"a":`, syncproto.MaxValueDepth+1) + "1" + strings.Repeat("}", syncproto.MaxValueDepth+1), false},
		{`"` + strings.Repeat("[", 100) + `"`, true},                          // brackets inside a string do not nest
		{`"\"` + strings.Repeat("{", 100) + `"`, true},                        // nor after an escaped quote
		{nested(9997, "[", "]"), false},                                       // the poisoned value of the attack review
		{`["\\\\",` + nested(syncproto.MaxValueDepth, "[", "]") + `]`, false}, // an escaped backslash ends no string
		{`["\\\"` + strings.Repeat("[", 100) + `"]`, true},                    // an escaped quote after one does not end it
	} {
		m.Value = []byte(tc.value)
		err := m.Validate()
		if tc.ok {
			require.NoError(t, err, "%.40s", tc.value)
			continue
		}
		require.Error(t, err, "%.40s", tc.value)
		require.Equal(t, syncproto.CodeBadRequest, syncproto.AsError(err).Code)
	}
}

// Keys are exact UTF-8 bytes: a key written with a lone surrogate escape is
// refused rather than collapsed into U+FFFD with every other such key; a
// surrogate pair, a raw U+FFFD and NFC/NFD spellings are ordinary,
// distinct keys.
func TestKeysWithLoneSurrogatesAreRefused(t *testing.T) {
	id, err := syncproto.NewOpID()
	require.NoError(t, err)
	frame := func(key string) []byte {
		return []byte(`{"op_id":"` + id + `","model":"notes","key":"` + key + `","op":"put","value":1,"hlc":"1733140000000.0.phone"}`)
	}
	for key, ok := range map[string]bool{
		`\ud800`:       false,
		`a\udc00b`:     false,
		`\ud800\u0041`: false,
		`\ud83d\ude00`: true, // a pair: U+1F600
		`\\ud800`:      true, // an escaped backslash, then text
		"\uFFFD":       true,
		"e\u0301":      true, // NFD
		"\u00e9":       true, // NFC, another key
	} {
		var m syncproto.Mutation
		require.NoError(t, json.Unmarshal(frame(key), &m))
		err := m.Validate()
		if ok {
			require.NoError(t, err, "%s", key)
			continue
		}
		require.Error(t, err, "%s", key)
		require.Equal(t, syncproto.CodeInvalidKey, syncproto.AsError(err).Code, "%s", key)
	}
}

// When several members of a mutation are wrong, the code is the first
// wrong member's in PROTOCOL.md 5.3's order, whatever the order of the
// members in the frame and whether a member is wrong by its JSON type or
// by its rule.
func TestMutationCodePrecedenceIgnoresMemberOrder(t *testing.T) {
	valid := [][2]string{
		{"op_id", `"` + opA + `"`}, {"model", `"todos"`}, {"key", `"t/1"`}, {"op", `"put"`},
		{"value", `{"a":1}`}, {"hlc", `"1733140000000.0.client-a"`}, {"base_version", `3`}, {"seen_version", `2`},
	}
	big := `"` + strings.Repeat("x", syncproto.MaxPayloadBytes) + `"`
	for _, tc := range []struct {
		broken map[string]string
		code   syncproto.Code
		names  string // the member the message must name, when the code is shared
	}{
		{map[string]string{"key": `42`, "base_version": `"3"`}, syncproto.CodeInvalidKey, ""},
		{map[string]string{"hlc": `"yesterday"`, "key": `42`}, syncproto.CodeInvalidKey, ""},
		{map[string]string{"hlc": `5`, "op": `true`}, syncproto.CodeInvalidOp, ""},
		{map[string]string{"op_id": `7`, "model": `["m"]`}, syncproto.CodeInvalidOpID, ""},
		{map[string]string{"model": `"Bad"`, "key": `42`}, syncproto.CodeInvalidModel, ""},
		{map[string]string{"value": big, "hlc": `"yesterday"`}, syncproto.CodePayloadTooLarge, ""},
		{map[string]string{"hlc": `"1.0.client-a"`, "base_version": `"3"`}, syncproto.CodeBadRequest, "base_version"},
		{map[string]string{"seen_version": `"x"`, "base_version": `-1`}, syncproto.CodeBadRequest, "base_version"},
		{map[string]string{"seen_version": `-1`, "value": strings.Repeat("[", syncproto.MaxValueDepth+1) + strings.Repeat("]", syncproto.MaxValueDepth+1)}, syncproto.CodeBadRequest, "nests"},
	} {
		var forward, backward []string
		for _, m := range valid {
			v := m[1]
			if b, ok := tc.broken[m[0]]; ok {
				v = b
			}
			member := `"` + m[0] + `":` + v
			forward = append(forward, member)
			backward = append([]string{member}, backward...)
		}
		for _, order := range [][]string{forward, backward} {
			frame := `{"type":"push","id":"p1","mutations":[{` + strings.Join(order, ",") + `}]}`
			msg, err := syncproto.DecodeRequest([]byte(frame))
			require.NoError(t, err, "a wrong mutation fails alone: %.120s", frame)
			err = msg.(*syncproto.Push).Mutations[0].Validate()
			requireCode(t, err, tc.code, "")
			require.Contains(t, err.Error(), tc.names, "%.120s", frame)
		}
	}
}

// A frame nesting deeper than MaxFrameDepth cannot be decoded: it is
// malformed, without an id, wherever the depth is (PROTOCOL.md 11). A push
// whose value nests as deeply as the frame limit allows still decodes, and
// its mutation is refused alone by MaxValueDepth.
func TestFrameDepthLimit(t *testing.T) {
	nested := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	push := func(valueDepth int) string { // push object, mutations array, mutation object: 3 levels
		return `{"type":"push","id":"p1","mutations":[{"op_id":"` + opA + `","model":"m","key":"k","op":"put","hlc":"5.0.c","value":` + nested(valueDepth) + `}]}`
	}
	msg, err := syncproto.DecodeRequest([]byte(push(syncproto.MaxFrameDepth - 3)))
	require.NoError(t, err, "a frame of exactly MaxFrameDepth levels decodes")
	requireCode(t, msg.(*syncproto.Push).Mutations[0].Validate(), syncproto.CodeBadRequest, "")

	for _, frame := range []string{
		push(syncproto.MaxFrameDepth - 2),
		`{"type":"ping","id":"k1","later":` + nested(syncproto.MaxFrameDepth) + `}`,
		`{"earlier":` + nested(syncproto.MaxFrameDepth) + `,"type":"ping","id":"k1"}`,
	} {
		_, err := syncproto.DecodeRequest([]byte(frame))
		requireCode(t, err, syncproto.CodeMalformed, "")
	}
}
