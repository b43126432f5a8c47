package offlinequeue

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// The file queue's on-disk format, version 1.
//
// A queue file holds one JSON object per line, each line ending in '\n'.
// Line 1 is the header, which names the format and its version:
//
//	{"op":"header","format":"syncd-offlinequeue","version":1}
//
// Every later line is one record, replayed in order. Byte strings (payload,
// key, reason) are base64, so NUL bytes and invalid UTF-8 round-trip exactly;
// times are Unix nanoseconds.
//
//	put       {"op":"put","id":7,"payload":"aGk=","key":"azE=","attempts":2,"at":1700000000000000000}
//	done      {"op":"done","ids":[7,8]}
//	attempts  {"op":"attempts","id":7,"attempts":3}
//	dead      {"op":"dead","id":7,"reason":"cmVqZWN0ZWQ=","at":1700000000000000000}
//	requeue   {"op":"requeue","ids":[7],"new":[12],"drop":[9],"at":1700000000000000000}
//	purge     {"op":"purge","ids":[9]}
//	hw        {"op":"hw","id":12}
//
// put appends a pending item; its id exceeds every id the file has seen.
// done removes pending items; attempts sets a pending item's count; dead moves
// a pending item to the dead letters; requeue moves dead letters ids[i] back to
// the pending tail as new[i] (new ids exceed every id seen, increasing) and
// deletes the dead letters in drop, whose keys were pending again; purge
// deletes dead letters; hw raises the id high-water mark, the highest id ever
// issued, which compaction would otherwise lose with the done items.
//
// A mutation that changes several items is one record, hence one line: a torn
// tail can lose the whole call, never half of it. A compacted file is the
// header, one put (and, for a dead letter, one dead) per live item in id
// order, and one hw record.
//
// Replay is strict: a record that the writer could not have produced (an
// unknown id, a reused id, a key pending twice) is corruption, exactly like a
// malformed line. Only the last line may be torn (no newline, or not JSON):
// a crash during an append leaves that shape, and nothing else.
const (
	fileFormatName    = "syncd-offlinequeue"
	fileFormatVersion = 1
)

// Record ops.
const (
	opHeader   = "header"
	opPut      = "put"
	opDone     = "done"
	opAttempts = "attempts"
	opDead     = "dead"
	opRequeue  = "requeue"
	opPurge    = "purge"
	opHW       = "hw"
)

// ErrUnsupportedVersion says the queue file was written by a newer format
// version than this build reads. The file was left as it was; open it with the
// newer build.
var ErrUnsupportedVersion = errors.New("offlinequeue: unsupported queue file format version")

// NewerFormatError refuses a device file written by a newer build than
// this one: a queue file, a SQLite queue, or (from the client) a replica
// and its outcome store. It names both versions. Nothing in the file was
// read past its version, nor changed; open it with a build at least as new
// as the one that wrote it. It matches ErrUnsupportedVersion (errors.Is).
type NewerFormatError struct {
	Format string // what carries the version: "queue file format", "queue schema", "replica schema"
	File   int    // the version the file carries
	Known  int    // the newest version this build reads
}

func (e *NewerFormatError) Error() string {
	return fmt.Sprintf("%s version %d is newer than this build's %d: open it with a newer build", e.Format, e.File, e.Known)
}

// Unwrap makes every NewerFormatError match ErrUnsupportedVersion.
func (e *NewerFormatError) Unwrap() error { return ErrUnsupportedVersion }

// CorruptError says a queue file holds damage that a crash cannot cause: a
// malformed or impossible record before the last line, or a missing header.
// The file was left byte-for-byte as it was and nothing was loaded; opening it
// again fails the same way, so inspect or restore it.
type CorruptError struct {
	Path string // the queue file
	Line int    // 1-based line number of the first bad line
	Err  error  // what is wrong with that line
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("offlinequeue: corrupt queue file %s, line %d: %v", e.Path, e.Line, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// record is one line of a queue file. Which fields matter depends on Op.
type record struct {
	Op       string   `json:"op"`
	Format   string   `json:"format,omitempty"`
	Version  int      `json:"version,omitempty"`
	ID       ID       `json:"id,omitempty"`
	IDs      []ID     `json:"ids,omitempty"`
	New      []ID     `json:"new,omitempty"`
	Drop     []ID     `json:"drop,omitempty"`
	Payload  []byte   `json:"payload,omitempty"`
	Key      []byte   `json:"key,omitempty"`
	Attempts Attempts `json:"attempts,omitempty"`
	At       int64    `json:"at,omitempty"`
	Reason   []byte   `json:"reason,omitempty"`
}

func headerRecord() *record {
	return &record{Op: opHeader, Format: fileFormatName, Version: fileFormatVersion}
}

// appendRecord appends r's line, newline included, to buf.
func appendRecord(buf []byte, r *record) ([]byte, error) {
	line, err := json.Marshal(r)
	if err != nil {
		return buf, fmt.Errorf("encode %s record: %w", r.Op, err)
	}
	buf = append(buf, line...)
	return append(buf, '\n'), nil
}

// putPrefix opens every put line: the fields before the id, which
// encodePut leaves out and appendPut writes with the id.
const putPrefix = `{"op":"` + opPut + `",`

// encodePut encodes a put of payload and key at at without its id: the
// part of the line that does not depend on the state, so an enqueue can
// encode it before it takes the queue's lock. appendPut completes it.
func encodePut(payload []byte, key string, at int64) ([]byte, error) {
	line, err := json.Marshal(&record{Op: opPut, Payload: payload, Key: []byte(key), At: at})
	if err != nil {
		return nil, fmt.Errorf("encode %s record: %w", opPut, err)
	}
	if !bytes.HasPrefix(line, []byte(putPrefix)) {
		return nil, fmt.Errorf("encode %s record: line %.40q does not open with %s", opPut, line, putPrefix)
	}
	return line[len(putPrefix):], nil
}

// appendPut appends the line of the put of id whose rest encodePut made,
// newline included: the line appendRecord writes for that record.
func appendPut(buf []byte, id ID, rest []byte) []byte {
	buf = append(buf, putPrefix...)
	buf = append(buf, `"id":`...)
	buf = strconv.AppendUint(buf, uint64(id), 10)
	buf = append(buf, ',')
	buf = append(buf, rest...)
	return append(buf, '\n')
}

// decodeRecord parses one line (without its newline) and checks that it is
// well-formed on its own. Whether it fits the state before it is
// fileState.check's question.
func decodeRecord(line []byte) (*record, error) {
	var r record
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, err
	}
	var err error
	switch r.Op {
	case opHeader:
		if r.Format != fileFormatName {
			err = fmt.Errorf("header names format %q, want %q", r.Format, fileFormatName)
		}
	case opPut:
		switch {
		case r.ID == 0:
			err = errors.New("put without id")
		case len(r.Payload) == 0:
			err = errors.New("put without payload")
		case len(r.Key) > MaxKeyBytes:
			err = fmt.Errorf("put key of %d bytes exceeds %d", len(r.Key), MaxKeyBytes)
		}
	case opAttempts, opDead:
		if r.ID == 0 {
			err = fmt.Errorf("%s without id", r.Op)
		}
	case opDone, opPurge:
		if len(r.IDs) == 0 {
			err = fmt.Errorf("%s without ids", r.Op)
		}
	case opRequeue:
		if len(r.IDs) != len(r.New) || len(r.IDs)+len(r.Drop) == 0 {
			err = fmt.Errorf("requeue with %d ids, %d new ids and %d drops", len(r.IDs), len(r.New), len(r.Drop))
		}
	case opHW:
	default:
		err = fmt.Errorf("unknown op %q", r.Op)
	}
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// loadState replays a queue file's bytes. It returns the state and whether a
// torn last line was dropped, or a *CorruptError (without Path) or an error
// matching ErrUnsupportedVersion. Empty data is a new, empty queue.
func loadState(data []byte) (*fileState, bool, error) {
	s := newFileState()
	if len(data) == 0 {
		return s, false, nil
	}
	lineNo := 0
	for len(data) > 0 {
		lineNo++
		line, rest, complete := bytes.Cut(data, []byte{'\n'})
		data = rest
		last := len(data) == 0
		r, err := decodeRecord(line)
		if lineNo == 1 {
			// The header is written whole by compaction and never torn.
			if err := checkHeader(r, err, complete); err != nil {
				return nil, false, err
			}
			continue
		}
		if last && (!complete || err != nil) {
			return s, true, nil
		}
		if err == nil {
			err = s.check(r)
		}
		if err != nil {
			return nil, false, &CorruptError{Line: lineNo, Err: err}
		}
		s.apply(r)
	}
	return s, false, nil
}

// checkHeader validates line 1, decoded as r with error decodeErr.
func checkHeader(r *record, decodeErr error, complete bool) error {
	switch {
	case !complete:
		return &CorruptError{Line: 1, Err: errors.New("header line has no newline")}
	case decodeErr != nil:
		return &CorruptError{Line: 1, Err: fmt.Errorf("bad header: %w", decodeErr)}
	case r.Op != opHeader:
		return &CorruptError{Line: 1, Err: fmt.Errorf("first line is a %q record, not the header", r.Op)}
	case r.Version > fileFormatVersion:
		return &NewerFormatError{Format: "queue file format", File: r.Version, Known: fileFormatVersion}
	case r.Version < 1:
		return &CorruptError{Line: 1, Err: fmt.Errorf("header version %d", r.Version)}
	}
	return nil
}

// fileState is the queue as replayed from its records: pure data, no I/O.
// The file queue changes it only through apply, on load and after each
// durable write alike, so what a reopen sees is what the handle saw.
type fileState struct {
	hw        ID // highest id ever issued, done items included
	pending   map[ID]*Item
	order     idList // pending ids; id order is enqueue order
	keys      map[string]ID
	dead      map[ID]*DeadLetter
	deadOrder idList
}

func newFileState() *fileState {
	return &fileState{
		pending: make(map[ID]*Item),
		keys:    make(map[string]ID),
		dead:    make(map[ID]*DeadLetter),
	}
}

// check reports why r cannot follow s, or nil. It does not change s.
func (s *fileState) check(r *record) error {
	switch r.Op {
	case opHeader:
		return errors.New("header record after line 1")
	case opPut:
		if r.ID <= s.hw {
			return fmt.Errorf("put reuses id %d (high-water mark %d)", r.ID, s.hw)
		}
		if len(r.Key) > 0 {
			if id, ok := s.keys[string(r.Key)]; ok {
				return fmt.Errorf("put %d carries the key of pending item %d", r.ID, id)
			}
		}
	case opAttempts, opDead:
		if _, ok := s.pending[r.ID]; !ok {
			return fmt.Errorf("%s names %d, which is not pending", r.Op, r.ID)
		}
	case opDone:
		return checkDistinctIn(r.IDs, s.pending, "pending")
	case opPurge:
		return checkDistinctIn(r.IDs, s.dead, "a dead letter")
	case opRequeue:
		return s.checkRequeue(r)
	case opHW:
		if r.ID < s.hw {
			return fmt.Errorf("high-water mark %d below %d", r.ID, s.hw)
		}
	}
	return nil
}

func (s *fileState) checkRequeue(r *record) error {
	if err := checkDistinctIn(append(slices.Clone(r.IDs), r.Drop...), s.dead, "a dead letter"); err != nil {
		return err
	}
	prev := s.hw
	moved := make(map[string]bool)
	for i, id := range r.IDs {
		if r.New[i] <= prev {
			return fmt.Errorf("requeue gives %d the id %d, not above %d", id, r.New[i], prev)
		}
		prev = r.New[i]
		key := s.dead[id].Key
		if key == "" {
			continue
		}
		if _, ok := s.keys[key]; ok || moved[key] {
			return fmt.Errorf("requeue of %d makes its key pending twice", id)
		}
		moved[key] = true
	}
	return nil
}

// checkDistinctIn checks that ids are distinct members of set.
func checkDistinctIn[V any](ids []ID, set map[ID]V, what string) error {
	seen := make(map[ID]bool, len(ids))
	for _, id := range ids {
		if _, ok := set[id]; !ok {
			return fmt.Errorf("%d is not %s", id, what)
		}
		if seen[id] {
			return fmt.Errorf("%d named twice", id)
		}
		seen[id] = true
	}
	return nil
}

// apply changes s by r, which passed check or was planned from s.
func (s *fileState) apply(r *record) {
	switch r.Op {
	case opPut:
		s.addPending(&Item{
			ID:         r.ID,
			Payload:    r.Payload,
			Key:        string(r.Key),
			Attempts:   r.Attempts,
			EnqueuedAt: unixTime(r.At),
		})
	case opDone:
		for _, id := range r.IDs {
			s.removePending(id)
		}
	case opAttempts:
		s.pending[r.ID].Attempts = r.Attempts
	case opDead:
		it := s.removePending(r.ID)
		s.dead[r.ID] = &DeadLetter{Item: *it, Reason: string(r.Reason), DeadAt: unixTime(r.At)}
		s.deadOrder.insert(r.ID)
	case opRequeue:
		for i, id := range r.IDs {
			d := s.removeDead(id)
			s.addPending(&Item{ID: r.New[i], Payload: d.Payload, Key: d.Key, EnqueuedAt: unixTime(r.At)})
		}
		for _, id := range r.Drop {
			s.removeDead(id)
		}
	case opPurge:
		for _, id := range r.IDs {
			s.removeDead(id)
		}
	case opHW:
		s.hw = r.ID
	}
}

func (s *fileState) addPending(it *Item) {
	s.pending[it.ID] = it
	s.order.insert(it.ID)
	if it.Key != "" {
		s.keys[it.Key] = it.ID
	}
	s.hw = max(s.hw, it.ID)
}

func (s *fileState) removePending(id ID) *Item {
	it := s.pending[id]
	delete(s.pending, id)
	s.order.remove(id)
	if it.Key != "" {
		delete(s.keys, it.Key)
	}
	return it
}

func (s *fileState) removeDead(id ID) *DeadLetter {
	d := s.dead[id]
	delete(s.dead, id)
	s.deadOrder.remove(id)
	return d
}

// snapshot encodes s as a compacted file: header, live items in id order,
// high-water mark.
func (s *fileState) snapshot() ([]byte, error) {
	buf, err := appendRecord(nil, headerRecord())
	if err != nil {
		return nil, err
	}
	pend, dead := s.order.ids, s.deadOrder.ids
	for len(pend)+len(dead) > 0 {
		var it *Item
		var dl *DeadLetter
		if len(dead) == 0 || (len(pend) > 0 && pend[0] < dead[0]) {
			it, pend = s.pending[pend[0]], pend[1:]
		} else {
			dl, dead = s.dead[dead[0]], dead[1:]
			it = &dl.Item
		}
		if buf, err = appendRecord(buf, putRecord(it)); err != nil {
			return nil, err
		}
		if dl != nil {
			if buf, err = appendRecord(buf, &record{Op: opDead, ID: dl.ID, Reason: []byte(dl.Reason), At: dl.DeadAt.UnixNano()}); err != nil {
				return nil, err
			}
		}
	}
	return appendRecord(buf, &record{Op: opHW, ID: s.hw})
}

func putRecord(it *Item) *record {
	return &record{
		Op:       opPut,
		ID:       it.ID,
		Payload:  it.Payload,
		Key:      []byte(it.Key),
		Attempts: it.Attempts,
		At:       it.EnqueuedAt.UnixNano(),
	}
}

// unixTime is the time a record's "at" names.
func unixTime(ns int64) time.Time { return time.Unix(0, ns) }

// idList is a sorted set of IDs. Inserting above the largest is O(1), and a
// removal shifts the shorter side, so consuming from the head is O(1) too:
// the common FIFO pattern never moves the bulk of a deep queue.
type idList struct{ ids []ID }

func (l *idList) search(id ID) (int, bool) { return slices.BinarySearch(l.ids, id) }

func (l *idList) insert(id ID) {
	if n := len(l.ids); n == 0 || l.ids[n-1] < id {
		l.ids = append(l.ids, id)
		return
	}
	i, _ := l.search(id)
	l.ids = slices.Insert(l.ids, i, id)
}

func (l *idList) remove(id ID) {
	i, ok := l.search(id)
	if !ok {
		return
	}
	if i < len(l.ids)/2 {
		copy(l.ids[1:i+1], l.ids[:i])
		l.ids = l.ids[1:]
		return
	}
	l.ids = slices.Delete(l.ids, i, i+1)
}

// after returns up to limit IDs greater than id, aliasing l's storage.
func (l *idList) after(id ID, limit int) []ID {
	i, found := l.search(id)
	if found {
		i++
	}
	end := len(l.ids)
	if limit < end-i {
		end = i + max(limit, 0)
	}
	return l.ids[i:end]
}
