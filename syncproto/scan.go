package syncproto

import (
	"bytes"
	"encoding/json"

	"github.com/syncd-dev/syncd/internal/jsonscan"
)

// scanMutation decodes b into m when b is a mutation in the plain form every
// client writes: one JSON object whose members are the mutation's own
// names, spelled exactly, string members holding printable ASCII without
// escapes, versions as plain unsigned integers or null, and a value that is
// valid JSON. It reports false, leaving m unspecified, for anything else;
// the caller then decodes with encoding/json, which gives the same result
// for everything scanMutation accepts (FuzzScanMutation holds it to that).
//
// A push of 500 mutations is decoded on every server for every push, and a
// queued write on every device for every replay: encoding/json scanned
// each byte four times (validating, skipping, validating again, decoding)
// through reflection; this reads the members once and validates only the
// value.
//
// levels is how deeply the mutation object sits in its document (1 when
// it is the document): a value nesting beyond MaxFrameDepth with it is
// left to encoding/json, which refuses it.
func scanMutation(b []byte, levels int, m *Mutation) bool {
	*m = Mutation{}
	end, ok := jsonscan.Object(b, jsonscan.SkipSpace(b, 0), func(key []byte, v int) (int, bool) { return scanMember(b, v, levels, key, m) })
	return ok && jsonscan.SkipSpace(b, end) == len(b)
}

// scanPush decodes a push frame into p when every member is one of type,
// id (plain strings) and mutations, an array of mutations scanMutation
// reads; false otherwise, leaving p unspecified.
func scanPush(frame []byte, p *Push) bool {
	*p = Push{}
	end, ok := jsonscan.Object(frame, jsonscan.SkipSpace(frame, 0), func(key []byte, v int) (int, bool) {
		switch string(key) {
		case "type", "id":
			s, end, ok := plainString(frame, v)
			if ok && key[0] == 'i' {
				p.ID = string(s)
			}
			return end, ok
		case "mutations":
			if p.Mutations != nil {
				return 0, false // twice: encoding/json would merge them
			}
			p.Mutations = []Mutation{}
			return jsonscan.Array(frame, v, func(e int) (int, bool) {
				end, _, ok := jsonscan.ValueEnd(frame, e)
				if !ok {
					return 0, false
				}
				p.Mutations = append(p.Mutations, Mutation{})
				return end, scanMutation(frame[e:end], 3, &p.Mutations[len(p.Mutations)-1])
			})
		}
		return 0, false
	})
	return ok && jsonscan.SkipSpace(frame, end) == len(frame)
}

// scanMember decodes the member named key whose value starts at b[i] into
// m, a mutation object levels deep, and returns the index past the value.
func scanMember(b []byte, i, levels int, key []byte, m *Mutation) (end int, ok bool) {
	switch string(key) {
	case "base_version":
		m.BaseVersion, end, ok = plainVersion(b, i)
	case "seen_version":
		m.SeenVersion, end, ok = plainVersion(b, i)
	case "value_version":
		m.ValueVersion, end, ok = jsonscan.Uint(b, i)
	default:
		w := writeMembers{opID: &m.OpID, model: &m.Model, key: &m.Key, op: &m.Op, hlc: &m.HLC, value: &m.Value}
		end, ok = w.scan(b, i, levels, key)
	}
	return end, ok
}

// writeMembers points at the members a mutation and a change share.
type writeMembers struct {
	opID, model, key *string
	op               *Op
	hlc              *Timestamp
	value            *json.RawMessage
}

// scan decodes the shared member named key whose value starts at b[i], in
// an object levels deep, and returns the index past the value; ok is false
// for any other member.
func (w writeMembers) scan(b []byte, i, levels int, key []byte) (end int, ok bool) {
	switch string(key) {
	case "op_id":
		*w.opID, end, ok = plainText(b, i)
	case "model":
		*w.model, end, ok = plainText(b, i)
	case "key":
		*w.key, end, ok = plainText(b, i)
	case "op":
		var op string
		op, end, ok = plainText(b, i)
		*w.op = Op(op)
	case "hlc":
		*w.hlc, end, ok = plainTimestamp(b, i)
	case "value":
		*w.value, end, ok = plainValue(b, i, levels)
	}
	return end, ok
}

// scanChanges decodes a changes frame into c when every member is one of
// type, id, entries (changes whose members are their own names, read as
// scanMutation reads a mutation's), cursor, head and more; false
// otherwise, leaving c unspecified. Every device reads every change of its
// scope this way, its own writes' echoes included.
func scanChanges(frame []byte, c *Changes) bool {
	*c = Changes{}
	end, ok := jsonscan.Object(frame, jsonscan.SkipSpace(frame, 0), func(key []byte, v int) (end int, ok bool) {
		switch string(key) {
		case "type":
			_, end, ok = plainText(frame, v)
		case "id":
			c.ID, end, ok = plainText(frame, v)
		case "cursor":
			c.Cursor, end, ok = jsonscan.Uint(frame, v)
		case "head":
			c.Head, end, ok = jsonscan.Uint(frame, v)
		case "more":
			c.More, end, ok = plainBool(frame, v)
		case "entries":
			if c.Entries != nil {
				return 0, false // twice: encoding/json would merge them
			}
			c.Entries = []Change{}
			return jsonscan.Array(frame, v, func(e int) (int, bool) {
				c.Entries = append(c.Entries, Change{})
				return scanChange(frame, e, &c.Entries[len(c.Entries)-1])
			})
		}
		return end, ok
	})
	return ok && jsonscan.SkipSpace(frame, end) == len(frame)
}

// scanChange reads the change object starting at b[i] (three levels deep
// in its frame) into ch and returns the index past it.
func scanChange(b []byte, i int, ch *Change) (int, bool) {
	w := writeMembers{opID: &ch.OpID, model: &ch.Model, key: &ch.Key, op: &ch.Op, hlc: &ch.HLC, value: &ch.Value}
	return jsonscan.Object(b, i, func(key []byte, v int) (end int, ok bool) {
		switch string(key) {
		case "seq":
			ch.Seq, end, ok = jsonscan.Uint(b, v)
		case "version":
			ch.Version, end, ok = jsonscan.Uint(b, v)
		case "deleted":
			ch.Deleted, end, ok = plainBool(b, v)
		default:
			end, ok = w.scan(b, v, 3, key)
		}
		return end, ok
	})
}

// plainText reads a plainString as a Go string.
func plainText(b []byte, i int) (string, int, bool) {
	s, end, ok := plainString(b, i)
	return string(s), end, ok
}

// plainTimestamp reads a plainString holding a timestamp in its text form.
func plainTimestamp(b []byte, i int) (Timestamp, int, bool) {
	s, end, ok := plainString(b, i)
	if !ok {
		return Timestamp{}, 0, false
	}
	ts, err := ParseTimestamp(string(s))
	return ts, end, err == nil
}

// plainValue reads a JSON value, copied, when it is valid and nests within
// MaxFrameDepth together with the levels around it (deeper ones are left
// to encoding/json, which refuses them).
func plainValue(b []byte, i, levels int) (json.RawMessage, int, bool) {
	end, depth, ok := jsonscan.ValueEnd(b, i)
	if !ok || levels+depth > MaxFrameDepth || !json.Valid(b[i:end]) {
		return nil, 0, false
	}
	return append(json.RawMessage(nil), b[i:end]...), end, true
}

// plainBool reads true or false.
func plainBool(b []byte, i int) (bool, int, bool) {
	for _, lit := range []string{"true", "false"} {
		if end := i + len(lit); bytes.HasPrefix(b[i:], []byte(lit)) && (end == len(b) || jsonscan.Delimiter(b[end])) {
			return lit == "true", end, true
		}
	}
	return false, 0, false
}

// plainString returns the contents of the JSON string starting at b[i]
// when they are printable ASCII without escapes, and the index past it.
func plainString(b []byte, i int) (s []byte, end int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// plainVersion reads null or a plain unsigned integer (jsonscan.Uint).
func plainVersion(b []byte, i int) (*uint64, int, bool) {
	if end := i + 4; bytes.HasPrefix(b[i:], []byte("null")) && (end == len(b) || jsonscan.Delimiter(b[end])) {
		return nil, end, true
	}
	v, end, ok := jsonscan.Uint(b, i)
	if !ok {
		return nil, 0, false
	}
	return &v, end, true
}
