package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/syncd-dev/syncd/client/netmonitor"
	"github.com/syncd-dev/syncd/client/reconnect"
	"github.com/syncd-dev/syncd/client/synccore"
	"github.com/syncd-dev/syncd/syncproto"
)

// probe checks that any of the servers (configured or learnt) answers
// /healthz.
func (c *Client) probe() netmonitor.Probe {
	return func(ctx context.Context) error {
		var errs []error
		for _, u := range c.servers.all() {
			p, err := netmonitor.HTTPProbe(c.cfg.HTTPClient, httpURL(u, "/healthz"))
			if err == nil {
				if err = p(ctx); err == nil {
					return nil
				}
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
}

// followNetwork turns monitor events into coordinator signals.
func (c *Client) followNetwork(events <-chan netmonitor.Event) {
	for ev := range events {
		c.driver.post(event{in: synccore.Network{Online: ev.State == netmonitor.Online}})
		switch ev.State {
		case netmonitor.Online:
			c.coord.OnOnline()
		case netmonitor.Offline:
			c.coord.OnOffline()
			c.dropLink(nil)
		}
		c.statusChanged()
	}
}

func (c *Client) onOutcome(o reconnect.Outcome) {
	c.log.Debug("reconnect run ended", "outcome", o.String())
}

// stepReconnect dials the servers in turn, starting after the last one tried.
func (c *Client) stepReconnect(ctx context.Context) error {
	c.mu.Lock()
	if c.candidate != nil {
		c.candidate.close()
		c.candidate = nil
	}
	c.mu.Unlock()
	var errs []error
	for _, u := range c.servers.all() {
		token, err := c.tokens.get(ctx)
		if err != nil {
			c.tokens.setRenewing(nil)
			c.statusChanged()
			return err
		}
		cn, err := dial(ctx, u, token, c.cfg.HTTPClient)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.mu.Lock()
		c.candidate = cn
		c.mu.Unlock()
		return nil
	}
	err := errors.Join(errs...)
	c.tokens.setRenewing(nil) // a reconnect that failed is no longer a renewal
	c.refused(err)
	return err
}

// stepActivate makes the dialled connection the active one, replacing any
// previous link.
func (c *Client) stepActivate(ctx context.Context) error {
	c.dropLink(nil)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.candidate == nil {
		return errors.New("activate: no connection")
	}
	if c.closed {
		return ErrClosed
	}
	c.active = newLink(c, c.candidate)
	c.candidate = nil
	return nil
}

// stepBind sends hello, bootstraps a fresh replica from a snapshot,
// subscribes to the change feed and starts the link's goroutines.
func (c *Client) stepBind(ctx context.Context) error {
	c.mu.Lock()
	l := c.active
	c.mu.Unlock()
	if l == nil {
		return errors.New("bind: no active connection")
	}
	if err := l.bind(ctx); err != nil {
		c.refused(err)
		c.dropLink(l)
		if re := sessionRefusal(err); re != nil && re != err {
			err = fmt.Errorf("%w: %w", err, re) // its retry hint reaches the coordinator
		}
		return err
	}
	c.refusal.Store(nil)
	if err := c.recordSignIn(ctx, l.conn.welcome); err != nil {
		c.log.Warn("recording the sign-in in the replica failed", "err", err)
	}
	c.tokens.setRenewing(nil)
	l.spawn(func() { c.renewBeforeExpiry(l) })
	c.statusChanged()
	return nil
}

// stepReplay waits for the first pass over the queue on the bound link.
func (c *Client) stepReplay(ctx context.Context) error {
	return c.driver.sync(ctx)
}

// dropLink tears down the active link (only if it is l, when l is given).
func (c *Client) dropLink(l *link) {
	c.mu.Lock()
	cur := c.active
	if cur == nil || (l != nil && cur != l) {
		c.mu.Unlock()
		return
	}
	c.active = nil
	c.mu.Unlock()
	cur.stop()
	c.statusChanged()
}

// linkLost runs when a bound connection ends on its own: reconnect if the
// network is still up.
func (c *Client) linkLost(l *link, err error) {
	c.log.Info("connection lost", "server", l.conn.url, "err", err)
	c.refused(err)
	c.dropLink(l)
	if c.isClosed() {
		return
	}
	c.coord.OnOffline()
	if c.tokens.replacing(l) {
		// Closed to present a fresh token: reconnect at once, and the
		// link's short life is no sign of a failing server.
		if c.monitor.Current() == netmonitor.Online {
			c.coord.OnOnline()
		}
		return
	}
	lived := c.now().Sub(l.since)
	delay := c.relinkDelay(l.healthy(lived))
	if delay == 0 {
		if c.monitor.Current() == netmonitor.Online {
			c.coord.OnOnline()
		}
		return
	}
	// A link lost soon after it was made (a server that accepts and then
	// drops, or refuses after the bind) is retried after a jittered,
	// growing wait, never in a tight loop; any other after a jittered
	// wait, so devices that lost one server together do not return in step.
	c.log.Info("waiting before reconnecting", "wait", delay, "link_lived", lived)
	c.wg.Go(func() {
		select {
		case <-c.ctx.Done():
		case <-time.After(delay):
			if !c.isClosed() && c.monitor.Current() == netmonitor.Online {
				c.coord.OnOnline()
			}
		}
	})
}

// healthyLinkLife is how long a link must last for its loss to count as
// an ordinary disconnection, reconnected within RetryInterval, rather
// than a quick loss.
const healthyLinkLife = 30 * time.Second

// backoff is the client's one backoff for its own waits (a pass that left
// writes queued, a lost link): RetryInterval doubling to MaxRetryInterval,
// jittered as reconnect.Backoff.Wait says. The reconnect coordinator's
// waits between dial attempts use Config.Backoff, the same rule.
func (c *Client) backoff() reconnect.Backoff {
	return reconnect.Backoff{Base: c.cfg.RetryInterval, Cap: c.cfg.MaxRetryInterval}
}

// healthy returns how long a lost link counts as having lived: lived, or 0
// when its snapshot download was abandoned, so that a server whose
// snapshots fail (too large, too slow, malformed) is retried after the
// growing wait of a quick loss however long each attempt held the link.
func (l *link) healthy(lived time.Duration) time.Duration {
	if l.snapshotAbandoned.Load() {
		return 0
	}
	return lived
}

// relinkDelay returns how long to wait before reconnecting after a link
// that lived for lived was lost: after a healthy link (which also resets
// the count) the backoff's first wait, in [RetryInterval/2,
// RetryInterval], which spreads the reconnects of every device a server
// restart dropped at once; else the backoff's wait for the count of
// consecutive quick losses, so a server that accepts and then drops is
// never retried in a tight loop.
func (c *Client) relinkDelay(lived time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if lived >= healthyLinkLife {
		c.quickLosses = 0
		return c.backoff().Delay(1)
	}
	c.quickLosses++
	return c.backoff().Delay(c.quickLosses)
}

// refused records the refusal err carries, if any, and wakes Await so it
// can report it.
func (c *Client) refused(err error) {
	re := sessionRefusal(err)
	if re == nil {
		return
	}
	c.log.Warn("the server refused the session", "code", re.Code, "message", re.Message, "retry_after", re.RetryAfter)
	c.refusal.Store(re)
	c.recordTokenRefusal(re)
	if c.refreshable(re) {
		c.tokens.invalidate()
	}
	if !re.Transient() && !c.refreshable(re) {
		c.driver.post(event{in: synccore.Refused{Err: &syncproto.Error{Code: re.Code, Message: re.Message}}})
	}
	c.outcomes.wake()
	c.statusChanged()
}

// permanentRefusal returns the server's refusal of the session when only
// the app can end it (a bad or revoked token, a wrong client id), else nil.
func (c *Client) permanentRefusal() error {
	if re := c.refusal.Load(); re != nil && !re.Transient() && !c.refreshable(re) {
		return re
	}
	return nil
}

// refreshable reports whether a refusal is the token's and a TokenSource
// may end it with a fresh token.
func (c *Client) refreshable(re *RefusedError) bool {
	return c.cfg.TokenSource != nil && (errors.Is(re, ErrTokenExpired) || errors.Is(re, ErrUnauthorized))
}

// otherDatabase reports whether the replica was synced from another
// database than the server's welcome names (the server was replaced, or
// restored into a new database, or the app points at another cluster): its
// cursor then means nothing to this server, and the bind must replace the
// replica by a snapshot. It says so in the log. An unknown id (a fresh
// replica, or one made before the id was recorded) is not another one.
func (c *Client) otherDatabase(ctx context.Context, id string) (bool, error) {
	had, err := c.replica.databaseID(ctx)
	if err != nil || had == "" || had == id {
		return false, err
	}
	c.log.Warn("the server's database is not the one this replica was synced from; resyncing from a snapshot",
		"replica_database_id", had, "server_database_id", id)
	return true, nil
}

// rememberDatabase records the database the replica now follows. The bind
// calls it once the replica's cursor is that database's (after the
// snapshot, when one was needed); a crash before it costs one more snapshot
// at most.
func (c *Client) rememberDatabase(ctx context.Context, id string) error {
	had, err := c.replica.databaseID(ctx)
	if err != nil || had == id {
		return err
	}
	if err := c.replica.setDatabaseID(ctx, id); err != nil {
		return err
	}
	c.statusChanged()
	return nil
}
