package syncproto

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
)

// SnapshotContentType is the media type of a snapshot response body.
const SnapshotContentType = "application/x-ndjson"

// A snapshot (GET SnapshotPath) is NDJSON: one JSON object per line, each
// line ending in "\n":
//
//	{"head":N}                      the header: the snapshot holds exactly
//	                                the effect of every entry with seq <= N
//	{"model":...,"key":...,...}     one SnapshotRecord per live record
//	{"end":true,"records":M}        the trailer: M record lines were sent
//
// A body without the trailer, or whose count differs, is truncated and must
// be discarded.

// SnapshotRecord is one live record of a snapshot (deleted records are
// omitted, so Deleted is always false in v1).
type SnapshotRecord struct {
	Model   string          `json:"model"`
	Key     string          `json:"key"`
	Value   json.RawMessage `json:"value"`
	Version uint64          `json:"version"`
	HLC     Timestamp       `json:"hlc"`
	Deleted bool            `json:"deleted"`
	// ScopeValue, for a record of a model a scope covers, is its scope
	// value (PROTOCOL.md 19.6); absent otherwise.
	ScopeValue string `json:"scope_value,omitempty"`
}

// snapshotEnd is a snapshot's last line.
type snapshotEnd struct {
	End     bool   `json:"end"`
	Records uint64 `json:"records"`
}

// Validate checks every field of r.
func (r *SnapshotRecord) Validate() error { return r.validate(nil) }

// validate is Validate, except that a model or hlc origin equal to known's
// (a record checked before) is not matched against its pattern again: a
// snapshot repeats a few models and origins over many records, and the
// pattern match is most of the check's cost.
func (r *SnapshotRecord) validate(known *SnapshotRecord) error {
	if known == nil || r.Model != known.Model {
		if err := ValidateModel(r.Model); err != nil {
			return err
		}
	}
	if err := ValidateKey(r.Key); err != nil {
		return err
	}
	if len(r.Value) == 0 || r.Deleted {
		return Errorf(CodeBadRequest, "a snapshot record carries a value and is not deleted")
	}
	if len(r.Value) > MaxPayloadBytes {
		return Errorf(CodePayloadTooLarge, "value holds %d bytes, more than %d", len(r.Value), MaxPayloadBytes)
	}
	if r.Version == 0 {
		return Errorf(CodeBadRequest, "version must be positive")
	}
	if err := validateSeq("version", r.Version); err != nil {
		return err
	}
	if r.ScopeValue != "" {
		if err := ValidateScopeValue(r.ScopeValue); err != nil {
			return err
		}
	}
	if known != nil && r.HLC.Origin == known.HLC.Origin && !r.HLC.IsZero() && r.HLC.Wall >= 0 && r.HLC.Wall <= MaxWall {
		return nil
	}
	return validateStamp("hlc", r.HLC)
}

// ErrSnapshotTruncated is returned by SnapshotReader.Next when the body ends
// without a matching trailer: discard everything read and fetch again.
var ErrSnapshotTruncated = errors.New("snapshot truncated")

// SnapshotReader reads a snapshot body. It is not safe for concurrent use.
type SnapshotReader struct {
	sc     *bufio.Scanner
	head   uint64
	scopes ScopeSet
	count  uint64
	done   bool
}

// NewSnapshotReader reads and checks the header line of body.
func NewSnapshotReader(body io.Reader) (*SnapshotReader, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), MaxFrameBytes)
	sc.Split(scanWholeLines)
	r := &SnapshotReader{sc: sc}
	line, err := r.line()
	if err != nil {
		return nil, fmt.Errorf("read snapshot header: %w", err)
	}
	var h struct {
		Head   *uint64  `json:"head"`
		Scopes ScopeSet `json:"scopes"`
	}
	if err := json.Unmarshal(line, &h); err != nil || h.Head == nil {
		return nil, fmt.Errorf("read snapshot header: %w", Errorf(CodeMalformed, "first line is not {\"head\":N}"))
	}
	if err := validateSeq("head", *h.Head); err != nil {
		return nil, fmt.Errorf("read snapshot header: %w", err)
	}
	if err := h.Scopes.Validate("scopes", 0); err != nil {
		return nil, fmt.Errorf("read snapshot header: %w", err)
	}
	r.head, r.scopes = *h.Head, h.Scopes
	return r, nil
}

// Head returns the seq the snapshot is consistent with: subscribe from it
// once every record is applied.
func (r *SnapshotReader) Head() uint64 { return r.head }

// Scopes returns the scope values the snapshot holds complete (the
// header's scopes, PROTOCOL.md 19.6): the device's have once it is
// loaded. nil from a server that declares no scope.
func (r *SnapshotReader) Scopes() ScopeSet { return r.scopes }

// Next returns the next record. It returns io.EOF after the trailer, when
// the whole snapshot has been read and checked, and an error wrapping
// ErrSnapshotTruncated when the body ends early; any other error is a
// malformed line.
func (r *SnapshotReader) Next() (SnapshotRecord, error) {
	if r.done {
		return SnapshotRecord{}, io.EOF
	}
	line, err := r.line()
	if err != nil {
		return SnapshotRecord{}, fmt.Errorf("read snapshot record %d: %w", r.count+1, err)
	}
	// One decode serves both kinds of line: a record, or the trailer.
	var l struct {
		SnapshotRecord
		snapshotEnd
	}
	if err := json.Unmarshal(line, &l); err != nil {
		return SnapshotRecord{}, fmt.Errorf("read snapshot record %d: %w", r.count+1, Errorf(CodeMalformed, "%s", describeJSONError(err)))
	}
	if l.End {
		if l.Records != r.count {
			return SnapshotRecord{}, fmt.Errorf("read snapshot: %w: trailer counts %d records, read %d", ErrSnapshotTruncated, l.Records, r.count)
		}
		r.done = true
		return SnapshotRecord{}, io.EOF
	}
	rec := l.SnapshotRecord
	if err := rec.Validate(); err != nil {
		return SnapshotRecord{}, fmt.Errorf("read snapshot record %d: %w", r.count+1, err)
	}
	r.count++
	return rec, nil
}

// errPartialLine: the body ends inside a line (it was cut mid-write).
var errPartialLine = errors.New("the body ends inside a line")

// scanWholeLines is bufio.ScanLines, except that a last line without its
// newline is an error (errPartialLine), not a line: a body cut inside a
// line is truncated, not malformed.
func scanWholeLines(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, bytes.TrimSuffix(data[:i], []byte("\r")), nil
	}
	if atEOF && len(data) > 0 {
		return 0, nil, errPartialLine
	}
	return 0, nil, nil
}

// line returns the next line; a body that ends is truncated (only Next,
// having seen the trailer, may call the end expected).
func (r *SnapshotReader) line() ([]byte, error) {
	if !r.sc.Scan() {
		if err := r.sc.Err(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSnapshotTruncated, err)
		}
		return nil, ErrSnapshotTruncated
	}
	return r.sc.Bytes(), nil
}

// SnapshotWriter writes a snapshot body. It encodes records itself, into a
// buffer it writes out snapshotFlushBytes at a time, without allocating per
// record. It is not safe for concurrent use.
type SnapshotWriter struct {
	w     io.Writer
	buf   []byte
	count uint64
	last  SnapshotRecord // the last record written (validate's known)
	wrote bool
}

// snapshotFlushBytes is how much a SnapshotWriter buffers before writing
// to its io.Writer.
const snapshotFlushBytes = 64 << 10

// NewSnapshotWriter starts a snapshot body for head on w. The header line
// goes out with the first records (or Close).
func NewSnapshotWriter(w io.Writer, head uint64) (*SnapshotWriter, error) {
	return NewScopedSnapshotWriter(w, head, nil)
}

// NewScopedSnapshotWriter is NewSnapshotWriter for a server that declares
// scopes: scopes, when not nil, are the scope values the snapshot holds
// complete (the header's scopes, PROTOCOL.md 19.6).
func NewScopedSnapshotWriter(w io.Writer, head uint64, scopes ScopeSet) (*SnapshotWriter, error) {
	if err := validateSeq("head", head); err != nil {
		return nil, fmt.Errorf("write snapshot header: %w", err)
	}
	sw := &SnapshotWriter{w: w, buf: make([]byte, 0, snapshotFlushBytes+4<<10)}
	sw.buf = append(sw.buf, `{"head":`...)
	sw.buf = strconv.AppendUint(sw.buf, head, 10)
	if scopes != nil {
		b, err := json.Marshal(scopes)
		if err != nil {
			return nil, fmt.Errorf("write snapshot header: %w", err)
		}
		sw.buf = append(sw.buf, `,"scopes":`...)
		sw.buf = append(sw.buf, b...)
	}
	sw.buf = append(sw.buf, "}\n"...)
	return sw, nil
}

// Write validates rec and writes it as one line. rec is not retained: its
// value may be reused once Write returns.
func (sw *SnapshotWriter) Write(rec SnapshotRecord) error {
	var known *SnapshotRecord
	if sw.wrote {
		known = &sw.last
	}
	if err := rec.validate(known); err != nil {
		return fmt.Errorf("write snapshot record: %w", err)
	}
	mark := len(sw.buf)
	var err error
	if sw.buf, err = appendSnapshotRecord(sw.buf, &rec); err != nil {
		sw.buf = sw.buf[:mark]
		return fmt.Errorf("write snapshot record: %w", err)
	}
	sw.count++
	sw.last = SnapshotRecord{Model: rec.Model, HLC: Timestamp{Origin: rec.HLC.Origin}}
	sw.wrote = true
	if len(sw.buf) >= snapshotFlushBytes {
		if err := sw.flush(); err != nil {
			return fmt.Errorf("write snapshot record: %w", err)
		}
	}
	return nil
}

// Close writes the trailer and whatever is buffered. Until it returns nil
// the body is, to a reader, truncated. It does not close the underlying
// writer.
func (sw *SnapshotWriter) Close() error {
	sw.buf = append(sw.buf, `{"end":true,"records":`...)
	sw.buf = strconv.AppendUint(sw.buf, sw.count, 10)
	sw.buf = append(sw.buf, "}\n"...)
	if err := sw.flush(); err != nil {
		return fmt.Errorf("write snapshot trailer: %w", err)
	}
	return nil
}

func (sw *SnapshotWriter) flush() error {
	_, err := sw.w.Write(sw.buf)
	sw.buf = sw.buf[:0]
	return err
}

// appendSnapshotRecord appends rec as one line, byte for byte what
// encoding/json writes for it without HTML escaping.
func appendSnapshotRecord(dst []byte, rec *SnapshotRecord) ([]byte, error) {
	dst = append(dst, `{"model":`...)
	dst = appendJSONString(dst, rec.Model)
	dst = append(dst, `,"key":`...)
	dst = appendJSONString(dst, rec.Key)
	dst = append(dst, `,"value":`...)
	dst, err := appendCompactJSON(dst, rec.Value)
	if err != nil {
		return dst, err
	}
	dst = append(dst, `,"version":`...)
	dst = strconv.AppendUint(dst, rec.Version, 10)
	dst = append(dst, `,"hlc":"`...)
	dst = strconv.AppendInt(dst, rec.HLC.Wall, 10) // a valid hlc's text needs no escaping
	dst = append(dst, '.')
	dst = strconv.AppendUint(dst, uint64(rec.HLC.Logical), 10)
	dst = append(dst, '.')
	dst = append(dst, rec.HLC.Origin...)
	dst = append(dst, `","deleted":`...)
	dst = strconv.AppendBool(dst, rec.Deleted)
	if rec.ScopeValue != "" {
		dst = append(dst, `,"scope_value":`...)
		dst = appendJSONString(dst, rec.ScopeValue)
	}
	return append(dst, "}\n"...), nil
}

// appendJSONString appends s as a JSON string, as encoding/json writes it
// without HTML escaping. Printable ASCII without quotes or backslashes
// (every model, and most keys) is copied as is; anything else takes
// encoding/json's path.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' || c == '"' || c == '\\' {
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(s) // a string always encodes
			return append(dst, bytes.TrimSuffix(b.Bytes(), []byte("\n"))...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// errControlInValue: a value holds a control character inside a string,
// which valid JSON never does (and which would split its line).
var errControlInValue = Errorf(CodeMalformed, "value holds a control character inside a string")

// appendCompactJSON appends v, a valid JSON value, without insignificant
// whitespace: byte for byte what encoding/json writes for it as a
// json.RawMessage without HTML escaping, without rescanning it with the
// JSON state machine. A value with no byte at or below ' ' (no whitespace
// outside strings, none allowed inside) is copied as is. It does not
// validate v beyond this: it never emits a newline, so a record is always
// one line.
func appendCompactJSON(dst, v []byte) ([]byte, error) {
	if !slices.ContainsFunc(v, func(c byte) bool { return c <= ' ' }) {
		return append(dst, v...), nil
	}
	mark := len(dst)
	inString, escaped := false, false
	for _, c := range v {
		switch {
		case inString:
			switch {
			case c < ' ':
				return dst[:mark], errControlInValue
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			continue
		case c < ' ':
			return dst[:mark], errControlInValue
		case c == '"':
			inString = true
		}
		dst = append(dst, c)
	}
	return dst, nil
}
