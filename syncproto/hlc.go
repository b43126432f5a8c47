package syncproto

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxWall is the largest wall time a Timestamp may carry: 9999-12-31
// 23:59:59.999 UTC in Unix milliseconds. The bound keeps every arithmetic
// step of the clock far from int64 overflow.
const MaxWall int64 = 253402300799999

// ErrInvalidTimestamp is wrapped by every ParseTimestamp failure. The text
// is malformed; retrying the same text cannot succeed.
var ErrInvalidTimestamp = errors.New("invalid timestamp")

// Timestamp is a hybrid logical clock reading: physical Unix milliseconds,
// a logical counter that orders events within one millisecond, and the id of
// the node or client that issued it.
//
// Timestamps are totally ordered by Compare. The zero Timestamp means "no
// reading"; its text form is the empty string.
type Timestamp struct {
	Wall    int64  // Unix milliseconds, 0..MaxWall
	Logical uint32 // counter within Wall
	Origin  string // issuer id, matches IDPattern
}

// Compare returns -1, 0 or +1 as t sorts before, equal to or after u: by
// Wall, then Logical, then Origin compared bytewise. Two distinct issuers
// never produce equal timestamps, so ties between writers break on origin.
func (t Timestamp) Compare(u Timestamp) int {
	switch {
	case t.Wall < u.Wall:
		return -1
	case t.Wall > u.Wall:
		return 1
	case t.Logical < u.Logical:
		return -1
	case t.Logical > u.Logical:
		return 1
	}
	return strings.Compare(t.Origin, u.Origin)
}

// IsZero reports whether t is the zero Timestamp ("no reading").
func (t Timestamp) IsZero() bool {
	return t.Wall == 0 && t.Logical == 0 && t.Origin == ""
}

// Time returns the wall component as a time.Time in UTC.
func (t Timestamp) Time() time.Time {
	return time.UnixMilli(t.Wall).UTC()
}

// String returns the canonical text "<wall>.<logical>.<origin>", for example
// "1733140000000.3.client-a": both numbers in decimal without sign or
// leading zeros. The zero Timestamp's text is "".
func (t Timestamp) String() string {
	if t.IsZero() {
		return ""
	}
	b := make([]byte, 0, 24+len(t.Origin))
	b = strconv.AppendInt(b, t.Wall, 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(t.Logical), 10)
	b = append(b, '.')
	b = append(b, t.Origin...)
	return string(b)
}

// Validate reports whether t could have been issued by a conforming clock:
// Wall in 0..MaxWall and Origin a valid id. The zero Timestamp is valid here;
// fields that require a reading check IsZero themselves. The error is an
// *Error with CodeInvalidHLC.
func (t Timestamp) Validate() error {
	if t.IsZero() {
		return nil
	}
	if t.Wall < 0 || t.Wall > MaxWall {
		return Errorf(CodeInvalidHLC, "hlc wall %d outside 0..%d", t.Wall, MaxWall)
	}
	if !isID(t.Origin) {
		return Errorf(CodeInvalidHLC, "hlc origin %q must match %s", truncate(t.Origin), IDPattern)
	}
	return nil
}

// ParseTimestamp parses the canonical text produced by String. It accepts
// exactly that form (so parsing and printing round-trip byte for byte) and
// "" as the zero Timestamp. Failures wrap ErrInvalidTimestamp.
func ParseTimestamp(s string) (Timestamp, error) {
	if s == "" {
		return Timestamp{}, nil
	}
	wallText, rest, ok := strings.Cut(s, ".")
	if !ok {
		return Timestamp{}, fmt.Errorf("parse timestamp %q: %w: want <wall>.<logical>.<origin>", truncate(s), ErrInvalidTimestamp)
	}
	logicalText, origin, ok := strings.Cut(rest, ".")
	if !ok {
		return Timestamp{}, fmt.Errorf("parse timestamp %q: %w: want <wall>.<logical>.<origin>", truncate(s), ErrInvalidTimestamp)
	}
	wall, err := parseCanonicalUint(wallText, uint64(MaxWall))
	if err != nil {
		return Timestamp{}, fmt.Errorf("parse timestamp %q: %w: wall %v", truncate(s), ErrInvalidTimestamp, err)
	}
	logical, err := parseCanonicalUint(logicalText, math.MaxUint32)
	if err != nil {
		return Timestamp{}, fmt.Errorf("parse timestamp %q: %w: logical %v", truncate(s), ErrInvalidTimestamp, err)
	}
	if !isID(origin) {
		return Timestamp{}, fmt.Errorf("parse timestamp %q: %w: origin must match %s", truncate(s), ErrInvalidTimestamp, IDPattern)
	}
	return Timestamp{Wall: int64(wall), Logical: uint32(logical), Origin: origin}, nil
}

// parseCanonicalUint parses a decimal number with no sign and no leading
// zeros that is at most max.
func parseCanonicalUint(s string, max uint64) (uint64, error) {
	if s == "" {
		return 0, errors.New("is empty")
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, errors.New("has a leading zero")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("is not a decimal number")
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > max {
		return 0, fmt.Errorf("exceeds %d", max)
	}
	return n, nil
}

// MarshalJSON encodes t as a JSON string holding its canonical text.
func (t Timestamp) MarshalJSON() ([]byte, error) {
	if t.Origin != "" && !isID(t.Origin) {
		return json.Marshal(t.String()) // an invalid origin may need escapes
	}
	s := t.String()
	b := make([]byte, 0, len(s)+2)
	return append(append(append(b, '"'), s...), '"'), nil
}

// UnmarshalJSON decodes a JSON string holding canonical text (see
// ParseTimestamp). Any other JSON value is an error.
func (t *Timestamp) UnmarshalJSON(b []byte) error {
	var s string
	if n := len(b); n >= 2 && b[0] == '"' && b[n-1] == '"' && isID(string(b[1:n-1])) {
		s = string(b[1 : n-1]) // canonical text needs no unescaping
	} else if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%w: want a JSON string", ErrInvalidTimestamp)
	}
	ts, err := ParseTimestamp(s)
	if err != nil {
		return err
	}
	*t = ts
	return nil
}

// Clock issues hybrid logical clock readings for one origin. Every reading it
// returns, from Now or Observe, compares strictly greater than every reading
// it returned before, whatever the physical clock does (stands still, steps
// back). A Clock is safe for concurrent use.
//
// The rules (both sides of the protocol follow them):
//
//   - Now (a local event or a send): wall = max(last.Wall, physical); if wall
//     is unchanged the logical counter increments, otherwise it resets to 0.
//   - Observe(remote) (a receive): wall = max(last.Wall, remote.Wall,
//     physical); logical = 1 + the largest logical among the inputs whose wall
//     equals the new wall, or 0 when only the physical clock has that wall.
//   - When the logical counter would pass math.MaxUint32, wall advances by one
//     millisecond and logical restarts at 0.
//
// Observe does not bound how far ahead a remote reading may be: a receiver
// that must not be dragged forward by a broken clock checks Ahead first and
// refuses the reading (the server answers CodeClockSkew).
type Clock struct {
	origin string
	now    func() time.Time

	mu   sync.Mutex
	last Timestamp // last reading issued; zero before the first
}

// NewClock returns a Clock issuing readings for origin, reading physical time
// from now (nil means time.Now). It panics if origin does not satisfy
// ValidateID: an origin is configuration, and a clock with a bad origin would
// issue readings that every peer refuses.
func NewClock(origin string, now func() time.Time) *Clock {
	if err := ValidateID(origin); err != nil {
		panic(fmt.Sprintf("syncproto.NewClock: %v", err))
	}
	if now == nil {
		now = time.Now
	}
	return &Clock{origin: origin, now: now}
}

// Origin returns the id stamped on every reading of c.
func (c *Clock) Origin() string { return c.origin }

// Now returns a new reading, strictly greater than every reading c issued
// before.
func (c *Clock) Now() Timestamp {
	pt := c.physical()
	c.mu.Lock()
	defer c.mu.Unlock()
	next := Timestamp{Wall: pt, Origin: c.origin}
	if pt <= c.last.Wall {
		next = c.successor(c.last.Wall, c.last.Logical)
	}
	c.last = next
	return next
}

// Observe merges a received reading into c and returns the new reading, which
// is strictly greater than both remote and every reading c issued before.
// A zero remote is treated as a local event (Observe behaves as Now).
// remote must pass Validate; a receiver bounds how far ahead it may be with
// Ahead before observing it.
func (c *Clock) Observe(remote Timestamp) Timestamp {
	pt := c.physical()
	c.mu.Lock()
	defer c.mu.Unlock()
	wall := max(pt, c.last.Wall, remote.Wall)
	var next Timestamp
	switch {
	case wall == c.last.Wall && wall == remote.Wall:
		next = c.successor(wall, max(c.last.Logical, remote.Logical))
	case wall == c.last.Wall:
		next = c.successor(wall, c.last.Logical)
	case wall == remote.Wall:
		next = c.successor(wall, remote.Logical)
	default:
		next = Timestamp{Wall: wall, Origin: c.origin}
	}
	c.last = next
	return next
}

// Peek returns the last reading c issued, without advancing; the zero
// Timestamp before the first.
func (c *Clock) Peek() Timestamp {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// Ahead returns how far remote's wall time is ahead of c's physical clock
// right now; zero or negative when it is not ahead. The server refuses a
// mutation whose hlc is ahead by more than its configured bound.
func (c *Clock) Ahead(remote Timestamp) time.Duration {
	const limit = int64(math.MaxInt64 / time.Millisecond)
	ms := min(max(remote.Wall, -MaxWall), MaxWall) - c.physical()
	return time.Duration(min(max(ms, -limit), limit)) * time.Millisecond
}

// successor returns the reading right after (wall, logical) for c's origin,
// carrying into wall when logical is exhausted.
func (c *Clock) successor(wall int64, logical uint32) Timestamp {
	if logical == math.MaxUint32 {
		return Timestamp{Wall: wall + 1, Origin: c.origin}
	}
	return Timestamp{Wall: wall, Logical: logical + 1, Origin: c.origin}
}

// physical reads the injected clock in Unix milliseconds, clamped to
// 0..MaxWall so that a broken physical clock cannot produce an invalid
// reading.
func (c *Clock) physical() int64 {
	return min(max(c.now().UnixMilli(), 0), MaxWall)
}
