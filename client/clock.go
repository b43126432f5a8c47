package client

import (
	"time"

	"github.com/syncd-dev/syncd/syncproto"
)

// stamp issues the next timestamp of this device's clock.
func (c *Client) stamp() syncproto.Timestamp {
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	return c.clock.Now()
}

// MaxObservedClockAhead bounds how far ahead of the server's wall clock (as
// the last welcome measured it) a timestamp the client observes may be: the
// server accepts writes up to its skew bound ahead, so a legitimate one is
// within twice the default bound. One further ahead (a broken or hostile
// peer's, say year 9999) is not adopted, so it cannot drag every later
// write of the device to the end of time; it is logged and counted.
const MaxObservedClockAhead = 2 * syncproto.DefaultMaxClockSkew

// observe advances the device clock past a server timestamp, unless the
// timestamp is more than MaxObservedClockAhead ahead of the server's clock.
func (c *Client) observe(ts syncproto.Timestamp) {
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	serverNow := c.now().UnixMilli() + c.serverOffset
	if ts.Wall > serverNow+MaxObservedClockAhead.Milliseconds() {
		c.metrics.clockRefused.Inc()
		c.log.Warn("not adopting a timestamp far ahead of the server's clock", "hlc", ts.String(), "ahead_ms", ts.Wall-serverNow)
		return
	}
	c.clock.Observe(ts)
}

// measureOffset records the server's clock offset from a welcome.
func (c *Client) measureOffset(w *syncproto.Welcome) {
	if w.ServerTime == 0 {
		return // an older server: assume the clocks agree
	}
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	c.serverOffset = w.ServerTime - c.now().UnixMilli()
}

// correctClock runs after the server refused writes for clock skew: this
// device's clock is ahead of the server's by more than the bound. The clock
// is replaced by one that reads the device's time shifted by the offset
// measured at welcome, so re-stamped writes fall within the bound. This is
// the one place a device clock may step back; writes already applied with
// the fast clock's stamps may win over later ones for up to the bound.
func (c *Client) correctClock(w *syncproto.Welcome) {
	offset := time.Duration(w.ServerTime-c.now().UnixMilli()) * time.Millisecond
	c.clockMu.Lock()
	defer c.clockMu.Unlock()
	now := c.now
	c.clock = syncproto.NewClock(c.cfg.ClientID, func() time.Time { return now().Add(offset) })
	c.clock.Observe(w.ServerHLC)
	c.log.Warn("device clock ahead of the server; re-stamping refused writes", "offset", offset)
}
