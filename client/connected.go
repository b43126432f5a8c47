package client

import (
	"context"
	"fmt"

	"github.com/syncd-dev/syncd/client/netmonitor"
)

// WaitConnected returns once a connection to the server is bound (hello
// answered; Status.Connected), so an app can wait for the first connection
// after Open without a status loop of its own. It returns the server's
// refusal of the session when that refusal is permanent (a *RefusedError:
// a wrong or revoked token, another client id, an incompatible server),
// ErrClosed when the Client is closed, and ctx's error when ctx ends
// first. It waits through offline spells and transient refusals (busy,
// rate limited): the client keeps reconnecting meanwhile. Writes never
// need it: Put and Delete work offline.
func (c *Client) WaitConnected(ctx context.Context) error {
	return c.waitBound(ctx, false)
}

// waitBound waits until a connection is bound. For Sync (forSync), the
// network monitor's verdict that the server is unreachable ends the wait
// with ErrOffline, and any refusal of the session ends it with that
// refusal; for WaitConnected only binding, a permanent refusal, Close or
// ctx end it.
func (c *Client) waitBound(ctx context.Context, forSync bool) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	// The status stream only wakes the wait: what it decides on is read
	// live (a stream's first status may be the last one published, from
	// before a change nobody was watching).
	for range c.WatchStatus(ctx) {
		switch {
		case c.isClosed():
			return ErrClosed
		case c.bound():
			return nil
		case c.permanentRefusal() != nil:
			return c.permanentRefusal()
		case forSync && c.refusal.Load() != nil:
			return c.refusal.Load()
		case forSync && c.monitor.Current() == netmonitor.Offline:
			return ErrOffline
		}
	}
	if c.isClosed() {
		return ErrClosed
	}
	return fmt.Errorf("client: still connecting: %w", ctx.Err())
}

// bound reports whether a connection is bound (hello answered).
func (c *Client) bound() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.active != nil && c.active.bound.Load()
}
