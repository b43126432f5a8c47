package syncproto

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/syncd-dev/syncd/internal/jsonscan"
)

// Op is a mutation's operation.
type Op string

// Operations.
const (
	OpPut    Op = "put"    // create or replace the record's value
	OpDelete Op = "delete" // delete the record (a tombstone; its version still counts)
	// OpEvict appears only in change-feed entries (never in a mutation): the
	// row moved to a scope value the device does not hold; drop it.
	OpEvict Op = "evict"
)

// Mutation is one write, as pushed by a client.
type Mutation struct {
	// OpID is the write's idempotency key: a UUID in canonical lowercase
	// form, UUIDv7 recommended (NewOpID). Resends of the write reuse it.
	OpID string `json:"op_id"`
	// Model names the record's model (ModelPattern).
	Model string `json:"model"`
	// Key names the record within the model (ValidateKey).
	Key string `json:"key"`
	// Op is put or delete.
	Op Op `json:"op"`
	// Value is the record's new value, any JSON value; required on put
	// (JSON null is a value), absent on delete. At most MaxPayloadBytes as
	// sent.
	Value json.RawMessage `json:"value,omitempty"`
	// HLC is the client's clock reading when the write was made (or
	// re-stamped after CodeClockSkew); its origin is the client id.
	HLC Timestamp `json:"hlc"`
	// BaseVersion, when present, is the record version the write was based
	// on; 0 means the key must never have been written. Required for
	// models with PolicyOptimistic; checked under every policy when present.
	BaseVersion *uint64 `json:"base_version,omitempty"`
	// SeenVersion, when present, is the record version the device had
	// seen when it made the write (0: none). It is information, not a
	// condition: the write is decided as without it, but when it wins over
	// a version the device had not seen, the overwritten state is logged as
	// the loser. It is not part of the digest.
	SeenVersion *uint64 `json:"seen_version,omitempty"`
	// ValueVersion is the version of the model's value shape the write was
	// made in (PROTOCOL.md 5.3), 1..MaxValueVersion; 0 (absent) means 1.
	// A server that does not accept it answers CodeNeedsUpgrade; one that
	// accepts it by upcasting applies the value in its current shape.
	ValueVersion uint64 `json:"value_version,omitempty"`

	// decodeErrs holds, by member name, why a member's JSON did not fit
	// its field (and under "" why the mutation is not a JSON object), set
	// by UnmarshalJSON and reported by Validate in the member's place, so
	// that one broken mutation is refused alone rather than failing its
	// whole push.
	decodeErrs memberErrors
}

// UnmarshalJSON decodes a mutation leniently: a member of the wrong JSON
// type or an unparsable hlc does not fail the decoding (and so the push
// holding it); it is remembered and Validate reports it with the member's
// code, in the member's place. The op id is kept whenever it was a
// string, for the result to echo.
func (m *Mutation) UnmarshalJSON(b []byte) error {
	if scanMutation(b, 1, m) {
		return nil // the plain form every client writes, read in one pass
	}
	type plain Mutation // the fields without this method
	var p plain
	if json.Unmarshal(b, &p) == nil && !strings.ContainsRune(p.Key, utf8.RuneError) {
		*m = Mutation(p) // every member fits: the common case, decoded once
		return nil
	}
	*m = Mutation{}
	var raw struct {
		OpID         json.RawMessage `json:"op_id"`
		Model        json.RawMessage `json:"model"`
		Key          json.RawMessage `json:"key"`
		Op           json.RawMessage `json:"op"`
		Value        json.RawMessage `json:"value"`
		HLC          json.RawMessage `json:"hlc"`
		BaseVersion  json.RawMessage `json:"base_version"`
		SeenVersion  json.RawMessage `json:"seen_version"`
		ValueVersion json.RawMessage `json:"value_version"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		m.decodeErrs = m.decodeErrs.with("", Errorf(CodeBadRequest, "mutation: %s", describeJSONError(err)))
		return nil
	}
	m.Value = raw.Value
	m.decodeErrs = decodeFields([]field{
		{"op_id", raw.OpID, &m.OpID, CodeInvalidOpID},
		{"model", raw.Model, &m.Model, CodeInvalidModel},
		{"key", raw.Key, &m.Key, CodeInvalidKey},
		{"op", raw.Op, &m.Op, CodeInvalidOp},
		{"hlc", raw.HLC, &m.HLC, CodeInvalidHLC},
		{"base_version", raw.BaseVersion, &m.BaseVersion, CodeBadRequest},
		{"seen_version", raw.SeenVersion, &m.SeenVersion, CodeBadRequest},
		{"value_version", raw.ValueVersion, &m.ValueVersion, CodeBadRequest},
	})
	if strings.ContainsRune(m.Key, utf8.RuneError) && keyHasLoneSurrogate(raw.Key) {
		m.decodeErrs = m.decodeErrs.with("key", Errorf(CodeInvalidKey, "key holds an ill-formed UTF-16 escape (a lone surrogate); keys are compared as exact UTF-8 bytes"))
	}
	return nil
}

// NewOpID returns a fresh op id: a UUIDv7 in canonical lowercase form, so
// ids sort by creation time.
func NewOpID() (string, error) {
	u, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("new op id: %w", err)
	}
	return u.String(), nil
}

// ValidateOpID reports whether id is a UUID in canonical lowercase form
// (36 characters, hyphenated). The error is an *Error with CodeInvalidOpID.
func ValidateOpID(id string) error {
	if !isCanonicalUUID(id) {
		return Errorf(CodeInvalidOpID, "op_id %q is not a canonical lowercase UUID", truncate(id))
	}
	return nil
}

// isCanonicalUUID reports whether id is what uuid.UUID.String returns:
// 32 lowercase hex digits grouped 8-4-4-4-12 by hyphens. It runs for every
// mutation and result, without parsing and formatting the UUID again.
func isCanonicalUUID(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}

// ValidateKey reports whether key is 1..MaxKeyBytes bytes of valid UTF-8
// without control characters (Unicode category Cc). The error is an *Error
// with CodeInvalidKey.
func ValidateKey(key string) error {
	if key == "" {
		return Errorf(CodeInvalidKey, "key is empty")
	}
	if len(key) > MaxKeyBytes {
		return Errorf(CodeInvalidKey, "key holds %d bytes, more than %d", len(key), MaxKeyBytes)
	}
	if !utf8.ValidString(key) {
		return Errorf(CodeInvalidKey, "key %q is not valid UTF-8", truncate(key))
	}
	for _, r := range key {
		if unicode.IsControl(r) {
			return Errorf(CodeInvalidKey, "key %q holds control character %U", truncate(key), r)
		}
	}
	return nil
}

// Validate checks the members of m one by one in a fixed order, and
// returns the first refusal as an *Error: op_id, model, key, op with the
// value's presence, the value's size, the value's JSON and nesting, hlc,
// base_version, seen_version, value_version (PROTOCOL.md 5.3). A member that did not
// decode (UnmarshalJSON) is refused in its place in that order, so the
// answer does not depend on the order of the members in the frame. It
// does not check what needs server state: that the model exists and the
// token may write it, that the hlc's origin is the session's client id
// and within the skew bound, or base_version against the record.
func (m *Mutation) Validate() error {
	if err := m.decodeErrs.err(""); err != nil {
		return err
	}
	return m.decodeErrs.firstWrong([]check{
		{"op_id", func() error { return ValidateOpID(m.OpID) }},
		{"model", func() error { return ValidateModel(m.Model) }},
		{"key", func() error { return ValidateKey(m.Key) }},
		{"op", m.validateOp},
		{"value", m.validateValue},
		{"hlc", func() error { return validateStamp("hlc", m.HLC) }},
		{"base_version", func() error { return validateOptionalSeq("base_version", m.BaseVersion) }},
		{"seen_version", func() error { return validateOptionalSeq("seen_version", m.SeenVersion) }},
		{"value_version", func() error { return validateValueVersion(m.ValueVersion) }},
	})
}

// validateOp checks op and that a value comes with a put and not with a
// delete.
func (m *Mutation) validateOp() error {
	switch m.Op {
	case OpPut:
		if len(m.Value) == 0 {
			return Errorf(CodeInvalidOp, "put requires a value")
		}
	case OpDelete:
		if len(m.Value) != 0 {
			return Errorf(CodeInvalidOp, "delete must not carry a value")
		}
	default:
		return Errorf(CodeInvalidOp, "op %q is not put or delete", truncate(string(m.Op)))
	}
	return nil
}

// validateValue checks the value's size, then that it is JSON nesting at
// most MaxValueDepth levels.
func (m *Mutation) validateValue() error {
	if len(m.Value) > MaxPayloadBytes {
		return Errorf(CodePayloadTooLarge, "value holds %d bytes, more than %d", len(m.Value), MaxPayloadBytes)
	}
	if len(m.Value) != 0 && !json.Valid(m.Value) {
		return Errorf(CodeBadRequest, "value is not JSON")
	}
	if d := valueDepth(m.Value); d > MaxValueDepth {
		return Errorf(CodeBadRequest, "value nests %d levels deep, more than %d", d, MaxValueDepth)
	}
	return nil
}

// validateOptionalSeq checks an optional integer member: absent, or within
// MaxSafeInteger.
func validateOptionalSeq(name string, v *uint64) error {
	if v == nil {
		return nil
	}
	return validateSeq(name, *v)
}

// Digest returns a fingerprint of what m asks for: SHA-256 over model, key,
// op, the compacted value bytes, base_version and a value_version above 1
// (so the digest of every unversioned write is what it always was), as 64 lowercase hex
// digits. The server's ledger stores it with the decision and answers
// CodeOpIDReused when the same op id comes back with a different digest.
//
// The hlc and op id are excluded: a client re-stamps a write refused for
// CodeClockSkew under the same op id, and that is the same write. Whitespace
// in the value does not count, but the bytes otherwise do (a string escaped
// differently is different content): resend the value exactly as first
// sent.
func (m *Mutation) Digest() string {
	value := m.Value
	if hasSpaceOutsideStrings(value) {
		var compact bytes.Buffer
		if json.Compact(&compact, value) == nil {
			value = compact.Bytes()
		}
	}
	h := sha256.New()
	var n [binary.MaxVarintLen64 + 1]byte
	field := func(b []byte) {
		h.Write(binary.AppendUvarint(n[:0], uint64(len(b))))
		h.Write(b)
	}
	h.Write([]byte("syncproto.v1 mutation digest\x00"))
	field([]byte(m.Model))
	field([]byte(m.Key))
	field([]byte(m.Op))
	field(value)
	if m.BaseVersion == nil {
		h.Write([]byte{0})
	} else {
		h.Write(binary.BigEndian.AppendUint64(append(n[:0], 1), *m.BaseVersion))
	}
	if m.ValueVersion > 1 {
		h.Write(binary.BigEndian.AppendUint64(append(n[:0], 'v'), m.ValueVersion))
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}

// hasSpaceOutsideStrings reports whether the JSON text v may hold
// whitespace that json.Compact would remove: a space, tab, CR or LF
// outside a string. When it reports false, compacting v (valid or not)
// changes nothing, so Digest skips the compaction and its validating scan.
// Strings are skipped as valueDepth skips them; on text that is not JSON
// the answer may be wrong only towards true, which costs a Compact.
func hasSpaceOutsideStrings(v []byte) bool {
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case ' ', '\t', '\r', '\n':
			return true
		case '"':
			end, ok := jsonscan.StringEnd(v, i)
			if !ok {
				return true
			}
			i = end - 1
		}
	}
	return false
}

// valueDepth returns how deeply the JSON text v nests arrays and objects (0
// for a scalar). v is valid JSON. Strings are skipped quote to quote, so a
// large string value costs little to check (a byte-by-byte scan took
// about half a second per 4 MiB under the race detector, on every push and
// every client-side validation).
func valueDepth(v []byte) int {
	_, depth, _ := jsonscan.ValueEnd(v, jsonscan.SkipSpace(v, 0))
	return depth
}

// keyHasLoneSurrogate reports whether the JSON text k (a mutation's "key"
// member as sent) writes a surrogate half without its pair (\ud800 alone):
// the JSON decoder turns it into U+FFFD, so two different keys would
// collapse into one.
func keyHasLoneSurrogate(k json.RawMessage) bool {
	hex4 := func(i int) (uint64, bool) {
		if i+6 > len(k) || k[i] != '\\' || k[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(k[i+2:i+6]), 16, 16)
		return v, err == nil
	}
	for i := 0; i < len(k); i++ {
		if k[i] != '\\' {
			continue
		}
		v, ok := hex4(i)
		if !ok {
			i++ // an escaped character: skip it
			continue
		}
		switch {
		case v >= 0xD800 && v <= 0xDBFF:
			if w, ok := hex4(i + 6); ok && w >= 0xDC00 && w <= 0xDFFF {
				i += 11
				continue
			}
			return true
		case v >= 0xDC00 && v <= 0xDFFF:
			return true
		}
		i += 5
	}
	return false
}
