package syncproto

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Decode parses one frame into its message and validates it.
//
// Checks, in order: the frame is at most MaxFrameBytes (CodeFrameTooLarge);
// it is UTF-8 text holding one JSON object nesting at most MaxFrameDepth
// levels (CodeMalformed); "type" is a string (CodeBadRequest) naming a
// known type (CodeUnknownType); every field has its JSON type
// (CodeBadRequest; in hello and in a push's mutations a member of the
// wrong type is instead reported by Validate, with its member's code and
// in member order); then the message's Validate. Unknown fields are
// ignored, so a newer peer may add fields; unknown types are refused. The
// "type" member's name is exact and, if duplicated, the first one counts;
// other member names match case-insensitively and the last of duplicates
// counts (leniencies of the Go JSON decoder; senders must send each member
// once, under its exact lowercase name).
//
// Every failure is an *Error ready to send back: its ID echoes the frame's
// "id" whenever the frame is one JSON object with a well-formed id. A
// CodeMalformed or CodeFrameTooLarge error never carries an id, even when
// the frame begins with a well-formed one (PROTOCOL.md 5.12).
func Decode(frame []byte) (Message, error) {
	return decode(frame, false)
}

// DecodeRequest is Decode for a server: a message type that only a server
// sends is refused with CodeUnknownType.
func DecodeRequest(frame []byte) (Message, error) {
	return decode(frame, true)
}

func decode(frame []byte, requestsOnly bool) (Message, error) {
	if len(frame) > MaxFrameBytes {
		return nil, Errorf(CodeFrameTooLarge, "frame holds %d bytes, more than %d", len(frame), MaxFrameBytes)
	}
	if !utf8.Valid(frame) {
		return nil, Errorf(CodeMalformed, "frame is not UTF-8 text")
	}
	rawType, rawID, err := envelope(frame)
	if err != nil {
		return nil, err
	}
	id := envelopeID(rawID)
	if len(rawType) == 0 {
		return nil, Errorf(CodeBadRequest, "type is required").WithID(id)
	}
	var typ Type
	if err := json.Unmarshal(rawType, &typ); err != nil || typ == "" {
		return nil, Errorf(CodeBadRequest, "type must be a non-empty string").WithID(id)
	}
	msg := newMessage(typ)
	if msg == nil || (requestsOnly && !typ.IsRequest()) {
		return nil, Errorf(CodeUnknownType, "unknown message type %q", truncate(string(typ))).WithID(id)
	}
	if err := unmarshal(frame, msg); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			// Not JSON after all, though it began with a type and an id:
			// nothing in the frame is trusted, its id included.
			return nil, Errorf(CodeMalformed, "%s: %s", typ, describeJSONError(err))
		}
		code := CodeBadRequest
		if errors.Is(err, ErrInvalidTimestamp) {
			code = CodeInvalidHLC
		}
		return nil, Errorf(code, "%s: %s", typ, describeJSONError(err)).WithID(id)
	}
	if err := msg.Validate(); err != nil {
		pe := AsError(err)
		if pe.ID == "" {
			pe = pe.WithID(id)
		}
		return nil, pe
	}
	return msg, nil
}

// unmarshal decodes frame into msg. A push is first read by scanPush (the
// plain form every client writes, in one pass); failing that, decoded by
// encoding/json with its mutations as plain structs; only when that fails,
// or a key holds U+FFFD (which a lone surrogate escape decodes to), is it
// decoded again with Mutation's lenient member-by-member decoding, which
// scans each mutation twice more and checks the key's escapes.
func unmarshal(frame []byte, msg Message) error {
	if c, ok := msg.(*Changes); ok && scanChanges(frame, c) {
		return nil // as a push: every device reads every change
	}
	p, ok := msg.(*Push)
	if !ok {
		return json.Unmarshal(frame, msg)
	}
	if scanPush(frame, p) || unmarshalPlainPush(frame, p) {
		return nil
	}
	return json.Unmarshal(frame, p)
}

// unmarshalPlainPush decodes frame into p with encoding/json, its mutations
// as plain structs, and reports false (p unspecified) when that fails or a
// key holds U+FFFD.
func unmarshalPlainPush(frame []byte, p *Push) bool {
	type mutationFields Mutation // the fields without the lenient method
	var fast struct {
		ID        string           `json:"id"`
		Mutations []mutationFields `json:"mutations"`
	}
	if json.Unmarshal(frame, &fast) != nil {
		return false
	}
	for i := range fast.Mutations {
		if strings.ContainsRune(fast.Mutations[i].Key, utf8.RuneError) {
			return false
		}
	}
	*p = Push{ID: fast.ID}
	if fast.Mutations != nil {
		p.Mutations = make([]Mutation, len(fast.Mutations))
		for i := range fast.Mutations {
			p.Mutations[i] = Mutation(fast.Mutations[i])
		}
	}
	return true
}

// envelope returns the raw "type" and "id" members of the frame's top-level
// object, reading members only until it has both (senders put them first),
// so that it costs next to nothing on a large push. The full decoding that
// follows checks the rest of the frame.
func envelope(frame []byte) (rawType, rawID json.RawMessage, err error) {
	if rawType, rawID, ok := envelopePrefix(frame); ok {
		return rawType, rawID, nil
	}
	return decodeEnvelope(frame)
}

// decodeEnvelope is envelope for any frame, with a JSON decoder.
func decodeEnvelope(frame []byte) (rawType, rawID json.RawMessage, err error) {
	notObject := func() error { return Errorf(CodeMalformed, "frame is not one JSON object") }
	dec := json.NewDecoder(bytes.NewReader(frame))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, notObject()
	}
	for dec.More() && (rawType == nil || rawID == nil) {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, notObject()
		}
		key, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, nil, notObject()
		}
		switch {
		case key == "type" && rawType == nil:
			rawType = value
		case key == "id" && rawID == nil:
			rawID = value
		}
	}
	return rawType, rawID, nil
}

// envelopePrefix reads the envelope of a frame that begins as the encoders
// write one, {"type":"…","id":"…" then a comma or the object's end, both
// strings plain (printable ASCII, no escape; plainString): what envelope's
// decoder would read there, without one. ok is false for any other
// beginning.
func envelopePrefix(frame []byte) (rawType, rawID json.RawMessage, ok bool) {
	const typePrefix, idPrefix = `{"type":`, `,"id":`
	if !bytes.HasPrefix(frame, []byte(typePrefix)) {
		return nil, nil, false
	}
	i := len(typePrefix)
	_, end, ok := plainString(frame, i)
	if !ok || !bytes.HasPrefix(frame[end:], []byte(idPrefix)) {
		return nil, nil, false
	}
	rawType, i = frame[i:end], end+len(idPrefix)
	if _, end, ok = plainString(frame, i); !ok || end == len(frame) || (frame[end] != ',' && frame[end] != '}') {
		return nil, nil, false
	}
	return rawType, frame[i:end], true
}

// envelopeID returns the frame's "id" when it is a well-formed request id,
// so that refusals can echo it; "" otherwise.
func envelopeID(raw json.RawMessage) string {
	var id string
	if len(raw) == 0 || json.Unmarshal(raw, &id) != nil || !validRequestID(id) {
		return ""
	}
	return id
}

// describeJSONError names the offending field of a decoding error without
// quoting the frame.
func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "message"
		}
		return fmt.Sprintf("field %s must be %s, not JSON %s", field, jsonKind(te.Type.String()), te.Value)
	}
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Sprintf("JSON syntax error at byte %d", syn.Offset)
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Message
	}
	return err.Error()
}

// jsonKind names the JSON shape a Go type decodes from.
func jsonKind(goType string) string {
	switch goType {
	case "string", "syncproto.Type", "syncproto.Op", "syncproto.Code", "syncproto.Status", "syncproto.Policy":
		return "a string"
	case "bool":
		return "a boolean"
	case "uint64", "uint32", "int", "int64", "float64":
		return "a number of that range"
	}
	if len(goType) > 2 && goType[:2] == "[]" {
		return "an array"
	}
	return "an object"
}

// AsError returns err as an *Error, wrapping a foreign error as
// CodeBadRequest. The validation functions of this package already return
// *Error; AsError is for callers that hold a plain error.
func AsError(err error) *Error {
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	return Errorf(CodeBadRequest, "%v", err)
}

// Encode validates msg and returns its frame: one JSON object whose first
// member is "type". HTML characters are not escaped. An invalid message, or
// a frame over MaxFrameBytes, is an error wrapping an *Error, and nothing is
// returned to send.
func Encode(msg Message) ([]byte, error) {
	frame, err := encodeUnbounded(msg)
	if err != nil {
		return nil, err
	}
	if len(frame) > MaxFrameBytes {
		return nil, frameTooLarge(msg.Type(), len(frame), MaxFrameBytes)
	}
	return frame, nil
}

// frameTooLarge is Encode's error for a frame of n bytes over limit.
func frameTooLarge(typ Type, n, limit int) error {
	return fmt.Errorf("encode %s: %w", typ, Errorf(CodeFrameTooLarge, "frame would hold %d bytes, more than %d", n, limit))
}

// encodeUnbounded is Encode without the frame size check.
func encodeUnbounded(msg Message) ([]byte, error) {
	if msg == nil {
		return nil, errors.New("encode message: nil message")
	}
	typ := msg.Type()
	if err := msg.Validate(); err != nil {
		return nil, fmt.Errorf("encode %s: %w", typ, err)
	}
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(withEmptyCollections(msg)); err != nil {
		return nil, fmt.Errorf("encode %s: %w", typ, err)
	}
	obj := bytes.TrimRight(body.Bytes(), "\n")
	frame := make([]byte, 0, len(obj)+len(typ)+10)
	frame = append(frame, `{"type":"`...)
	frame = append(frame, typ...)
	frame = append(frame, '"')
	if len(obj) > 2 {
		frame = append(frame, ',')
	}
	frame = append(frame, obj[1:]...)
	return frame, nil
}

// withEmptyCollections returns msg, or a copy of it whose nil collections
// are empty, so that they encode as [] and {} rather than null.
func withEmptyCollections(msg Message) Message {
	switch m := msg.(type) {
	case *Changes:
		if m.Entries == nil {
			c := *m
			c.Entries = []Change{}
			return &c
		}
	case *Welcome:
		if m.Models == nil {
			c := *m
			c.Models = map[string]ModelAccess{}
			return &c
		}
	}
	return msg
}
