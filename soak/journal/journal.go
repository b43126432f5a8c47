// Package journal is the soak harness's record of every write a soak client
// made, kept beside the client's queue and replica so that the invariant
// checker can hold the system to account: a write the app was told was made
// must end applied, superseded, resolved by the app's conflict handler, or
// dead-lettered, and nothing the server applied may come from nowhere.
//
// A journal is an NDJSON file, one Entry per line, appended with O_APPEND.
// A client writes an intent line before it calls Put, Delete or PutIfVersion
// and a made line (with the op id) once the call returned; a failed call gets
// a failed line instead. The conflict handler writes a handler line before it
// answers. So after a SIGKILL the journal says, for every write, either that
// it was made (the op id is known), that it was not, or that the call was in
// flight (an intent without an answer): the crash window, in which the write
// may or may not be in the queue.
//
// A client that takes part in partial sync also journals what reaches it
// from the server in the models a scope covers (received lines: feed
// entries, backfill rows and evicted rows, each with the oplog seq at which
// the server read it and its scope value), so the checker can judge, at
// every position, that the client held the value of every row it was sent.
//
// Lines are written with one write(2) each and not fsynced: they survive the
// process crashes the harness causes (the kernel keeps the page cache), not a
// power cut, which the harness never simulates. A crash can tear the last
// line; Read drops a torn last line and refuses damage anywhere else.
package journal

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Kind says what a journal line records.
type Kind string

const (
	// KindIntent: the app is about to make a write (Put, Delete or
	// PutIfVersion); Write, Model, Key, Op, Base and ValueSHA describe it.
	KindIntent Kind = "intent"
	// KindMade: the call returned an op id; the write is made (durable in
	// the client's queue).
	KindMade Kind = "made"
	// KindFailed: the call returned an error; no write was made. Err says why.
	KindFailed Kind = "failed"
	// KindHandler: the app's conflict handler decided the conflict of OpID:
	// Decision is rebase (Write, Model, Key, Base and ValueSHA describe the
	// rebased write, whose op id the client derives) or drop.
	KindHandler Kind = "handler"
	// KindReceived: a change of a model a scope covers reached the client
	// from the server (a client.ChangeEvent not Local): Model, Key, Op
	// (put, delete, or evict for a row an eviction dropped), Version, Seq
	// (the oplog seq at which the server read it: ChangeEvent.At),
	// ScopeValue (the row's, or the one an evicted row had), Reason (an
	// eviction's) and ValueSHA (a put's value).
	KindReceived Kind = "received"
	// KindResync: the replica was replaced by a snapshot read at Seq; a
	// snapshot line for each of its rows follows.
	KindResync Kind = "resync"
	// KindSnapshot: a row of a model a scope covers the client held once
	// it loaded a snapshot read at Seq: Model, Key, Version, ScopeValue
	// (as its value names it). A row with the client's own write pending
	// over it is left out. The rows are read after the snapshot was
	// loaded, so one a later received line names at the same version came
	// with that line, not with the snapshot.
	KindSnapshot Kind = "snapshot"
	// KindLagged: the client's subscription to its changes fell behind and
	// dropped some: what reached it meanwhile is not journaled.
	KindLagged Kind = "lagged"
)

// Class is what kind of write the scenario meant to make.
type Class string

const (
	ClassLWW        Class = "lww"        // a put on a last-writer-wins model
	ClassDelete     Class = "delete"     // a delete on a last-writer-wins model
	ClassOptimistic Class = "optimistic" // a PutIfVersion on an optimistic model
	ClassPoison     Class = "poison"     // a write the server always refuses
	ClassRebase     Class = "rebase"     // a write the conflict handler made
	// ClassScoped is a put or delete in a model a scope covers (a task,
	// or a membership row granting or revoking a value): applied or
	// superseded, or refused forbidden_scope when the writer does not hold
	// the value (it lost it meanwhile) and dead-lettered.
	ClassScoped Class = "scoped"
)

// Decisions of a KindHandler line.
const (
	DecisionRebase = "rebase"
	DecisionDrop   = "drop"
)

// Entry is one journal line. Write is the write's id: unique per client
// run, it pairs an intent with its made or failed line, and it is carried
// in the write's value (field "w"), so a server entry can be traced to its
// intent even when a crash kept the op id from the journal. A made line
// repeats the intent's fields, so it describes the write on its own.
type Entry struct {
	Kind     Kind      `json:"kind"`
	At       time.Time `json:"at"` // by the client's clock (skewed clients included)
	Client   string    `json:"client"`
	Write    string    `json:"write,omitempty"`
	OpID     string    `json:"op_id,omitempty"`
	Class    Class     `json:"class,omitempty"`
	Model    string    `json:"model,omitempty"`
	Key      string    `json:"key,omitempty"`
	Op       string    `json:"op,omitempty"` // put or delete
	Base     *uint64   `json:"base,omitempty"`
	ValueSHA string    `json:"value_sha,omitempty"`
	Decision string    `json:"decision,omitempty"`
	Err      string    `json:"err,omitempty"`
	// Seq, ScopeValue, Version and Reason describe a received change
	// (KindReceived, KindResync, KindSnapshot).
	Seq        uint64 `json:"seq,omitempty"`
	ScopeValue string `json:"scope_value,omitempty"`
	Version    uint64 `json:"version,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// Writer appends entries to a journal file. It is safe for concurrent use.
type Writer struct {
	mu  sync.Mutex
	f   *os.File
	buf []byte
}

// Create opens the journal at path for appending, creating it if missing.
func Create(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	return &Writer{f: f}, nil
}

// Append writes one entry as one line, in one write call.
func (w *Writer) Append(e Entry) error {
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(append(w.buf[:0], line...), '\n')
	if _, err := w.f.Write(w.buf); err != nil {
		return fmt.Errorf("journal: append: %w", err)
	}
	return nil
}

// Close closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.f.Close()
}

// ErrCorrupt says a journal line other than the last one does not parse.
var ErrCorrupt = errors.New("journal: corrupt line")

// Read returns every entry of the journal at path in file order. A missing
// file is an empty journal (a client that never ran). A torn last line (no
// newline, as a crash mid-append leaves) is dropped; any other line that
// does not parse is ErrCorrupt.
func Read(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	defer f.Close()
	return Decode(f)
}

// Decode parses a journal from r, as Read does.
func Decode(r io.Reader) ([]Entry, error) {
	var out []Entry
	br := bufio.NewReader(r)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return out, nil // a torn tail, or nothing
		}
		if err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var e Entry
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("%w %d: %v", ErrCorrupt, n, err)
		}
		out = append(out, e)
	}
}

// Value is the JSON document every soak write puts. Write makes every
// value unique, so a server entry names the write it came from; Depth counts
// how many times the conflict handler rebased it; Pad varies the size.
type Value struct {
	Write string `json:"w"`
	Depth int    `json:"depth,omitempty"`
	Pad   string `json:"pad,omitempty"`
	// Project is a scoped write's scope value (the scope's member in
	// tasks and members), User a membership row's user.
	Project string `json:"project_id,omitempty"`
	User    string `json:"user,omitempty"`
}

// Encode returns v as the JSON a client puts.
func (v Value) Encode() json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // a struct of strings and an int always marshals
	}
	return b
}

// ParseValue reads a soak value; ok is false for anything else (a nil
// value of a delete, a foreign document).
func ParseValue(raw []byte) (v Value, ok bool) {
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil || v.Write == "" {
		return Value{}, false
	}
	return v, true
}

// ValueSHA is the hex SHA-256 of a value with insignificant whitespace
// removed, so the same document hashes the same wherever it was read.
func ValueSHA(raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	var compact bytes.Buffer
	if json.Compact(&compact, raw) == nil {
		raw = compact.Bytes()
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}
