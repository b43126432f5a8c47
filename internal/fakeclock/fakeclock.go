// Package fakeclock is the one settable clock of the module's tests: a
// time that moves only when a test sets or advances it, passed where code
// takes a clock (a func() time.Time such as server.Config.Now or
// syncproto.NewClock's). It is a leaf: it imports only the standard
// library.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a settable clock, safe for concurrent use: Now returns the time
// last set, whatever the wall clock does.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock reading t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t, backwards included.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Advance moves the clock by d (negative: backwards).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
