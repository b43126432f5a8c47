package replication

import (
	"fmt"
	"time"

	"github.com/syncd-dev/syncd/syncproto"
)

// DefaultMaxClockSkew is how far ahead of the server's clock a mutation's
// HLC may be when no bound is configured.
//
// Why one minute: under last-writer-wins a timestamp from the future beats
// every honest write until real time catches up with it, so the bound is
// the longest a broken device clock can win unfairly. NTP-synchronized
// devices sit well within a second, and a phone with a hand-set clock is
// usually off by minutes, not seconds; one minute refuses those (they
// re-stamp from a corrected clock and resend) while leaving room for slow
// synchronization and leap smearing on the honest ones.
const DefaultMaxClockSkew = time.Minute

// SkewError is returned by CheckSkew when a timestamp is further ahead of
// the server's clock than allowed. Nothing was applied; the client corrects
// its clock, re-stamps the mutation (same op id) and resends
// (syncproto.CodeClockSkew).
type SkewError struct {
	// Ahead is how far the timestamp's wall time is ahead of the server's,
	// in whole milliseconds; it saturates at the largest Duration (about
	// 292 years).
	Ahead time.Duration
	// Bound is the allowed maximum.
	Bound time.Duration
}

func (e *SkewError) Error() string {
	return fmt.Sprintf("clock skew: hlc is %s ahead of the server clock, more than the %s allowed", e.Ahead, e.Bound)
}

// CheckSkew returns a *SkewError when ts's wall time is more than maxAhead
// ahead of now; maxAhead <= 0 means DefaultMaxClockSkew. A timestamp behind
// now is never refused: lateness is what offline writes look like.
//
// Check before observing the timestamp into the server's syncproto.Clock,
// so that a refused timestamp cannot drag the server's clock forward.
func CheckSkew(ts syncproto.Timestamp, now time.Time, maxAhead time.Duration) error {
	if maxAhead <= 0 {
		maxAhead = DefaultMaxClockSkew
	}
	// Milliseconds, with both operands clamped to the range a Timestamp
	// may carry so that neither the subtraction nor the conversion to a
	// Duration can overflow, even for an unvalidated timestamp.
	clamp := func(ms int64) int64 { return min(max(ms, -syncproto.MaxWall), syncproto.MaxWall) }
	aheadMs := clamp(ts.Wall) - clamp(now.UnixMilli())
	if aheadMs <= maxAhead.Milliseconds() {
		return nil
	}
	const maxMs = int64(1<<63-1) / int64(time.Millisecond)
	return &SkewError{Ahead: time.Duration(min(aheadMs, maxMs)) * time.Millisecond, Bound: maxAhead}
}
