package syncproto

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// snapshotHeader is a snapshot's first line.
type snapshotHeader struct {
	Head uint64 `json:"head"`
}

// SnapshotRecord is one live record of a snapshot (deleted records are
// omitted, so Deleted is always false in v1).
type SnapshotRecord struct {
	Model   string          `json:"model"`
	Key     string          `json:"key"`
	Value   json.RawMessage `json:"value"`
	Version uint64          `json:"version"`
	HLC     Timestamp       `json:"hlc"`
	Deleted bool            `json:"deleted"`
}

// snapshotEnd is a snapshot's last line.
type snapshotEnd struct {
	End     bool   `json:"end"`
	Records uint64 `json:"records"`
}

// Validate checks every field of r.
func (r *SnapshotRecord) Validate() error {
	if err := ValidateModel(r.Model); err != nil {
		return err
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
	return validateStamp("hlc", r.HLC)
}

// ErrSnapshotTruncated is returned by SnapshotReader.Next when the body ends
// without a matching trailer: discard everything read and fetch again.
var ErrSnapshotTruncated = errors.New("snapshot truncated")

// SnapshotReader reads a snapshot body. It is not safe for concurrent use.
type SnapshotReader struct {
	sc    *bufio.Scanner
	head  uint64
	count uint64
	done  bool
}

// NewSnapshotReader reads and checks the header line of body.
func NewSnapshotReader(body io.Reader) (*SnapshotReader, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), MaxFrameBytes)
	r := &SnapshotReader{sc: sc}
	line, err := r.line()
	if err != nil {
		return nil, fmt.Errorf("read snapshot header: %w", err)
	}
	var h struct {
		Head *uint64 `json:"head"`
	}
	if err := json.Unmarshal(line, &h); err != nil || h.Head == nil {
		return nil, fmt.Errorf("read snapshot header: %w", Errorf(CodeMalformed, "first line is not {\"head\":N}"))
	}
	if err := validateSeq("head", *h.Head); err != nil {
		return nil, fmt.Errorf("read snapshot header: %w", err)
	}
	r.head = *h.Head
	return r, nil
}

// Head returns the seq the snapshot is consistent with: subscribe from it
// once every record is applied.
func (r *SnapshotReader) Head() uint64 { return r.head }

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

// SnapshotWriter writes a snapshot body. It is not safe for concurrent use.
type SnapshotWriter struct {
	w     io.Writer
	count uint64
}

// NewSnapshotWriter writes the header line for head to w.
func NewSnapshotWriter(w io.Writer, head uint64) (*SnapshotWriter, error) {
	if err := validateSeq("head", head); err != nil {
		return nil, fmt.Errorf("write snapshot header: %w", err)
	}
	sw := &SnapshotWriter{w: w}
	if err := sw.writeLine(snapshotHeader{Head: head}); err != nil {
		return nil, fmt.Errorf("write snapshot header: %w", err)
	}
	return sw, nil
}

// Write validates rec and writes it as one line.
func (sw *SnapshotWriter) Write(rec SnapshotRecord) error {
	if err := rec.Validate(); err != nil {
		return fmt.Errorf("write snapshot record: %w", err)
	}
	if err := sw.writeLine(rec); err != nil {
		return fmt.Errorf("write snapshot record: %w", err)
	}
	sw.count++
	return nil
}

// Close writes the trailer. Until it returns nil the body is, to a reader,
// truncated. It does not close the underlying writer.
func (sw *SnapshotWriter) Close() error {
	if err := sw.writeLine(snapshotEnd{End: true, Records: sw.count}); err != nil {
		return fmt.Errorf("write snapshot trailer: %w", err)
	}
	return nil
}

func (sw *SnapshotWriter) writeLine(v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := sw.w.Write(buf.Bytes())
	return err
}
