package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd-dev/syncd/syncproto"
)

// link is one bound connection and the goroutines that use it: the feed
// loop (applies the change feed to the replica), the sync loop (replays the
// queue on new writes, on retry timers and on request), the keepalive
// (pings the server, so an idle client is not closed for idleness and a dead
// connection is noticed) and the watcher (notices the connection ending).
// stop ends all four and waits.
type link struct {
	c       *Client
	conn    *conn
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	replays chan chan error // replayNow requests
	stopped sync.Once
	bound   atomic.Bool // hello was answered and the feed subscribed
	since   time.Time   // when the link was made
}

func newLink(c *Client, cn *conn) *link {
	ctx, cancel := context.WithCancel(c.ctx)
	return &link{c: c, conn: cn, ctx: ctx, cancel: cancel, replays: make(chan chan error), since: c.now()}
}

// bind sends hello, loads a snapshot when the replica has never synced and
// the server has history, subscribes to the feed and starts the goroutines.
func (l *link) bind(ctx context.Context) error {
	c := l.c
	cursor, err := c.replica.cursor(ctx)
	if err != nil {
		return err
	}
	// After cursor_ahead the replica's cursor means nothing to the
	// server: say hello from zero and replace the replica by a snapshot.
	resync := c.resyncNext.Load()
	if resync {
		cursor = 0
	}
	w, err := l.conn.hello(ctx, c.cfg.ClientID, cursor, c.stamp())
	if err != nil {
		var pe *syncproto.Error
		if errors.As(err, &pe) && pe.Code == syncproto.CodeCursorAhead {
			c.log.Warn("the server does not know this replica's cursor (restored from a backup, or another database); resyncing from a snapshot", "err", pe)
			c.resyncNext.Store(true)
		}
		return err
	}
	c.measureOffset(w)
	c.observe(w.ServerHLC)
	other, err := c.otherDatabase(ctx, w.DatabaseID)
	if err != nil {
		return err
	}
	if (cursor == 0 && w.Head > 0) || resync || other {
		if cursor, err = c.loadSnapshot(ctx, l.conn.url); err != nil {
			return fmt.Errorf("bootstrap: %w", err)
		}
		c.resyncNext.Store(false)
	}
	if err := c.rememberDatabase(ctx, w.DatabaseID); err != nil {
		return err
	}
	if err := l.conn.subscribe(ctx, cursor); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	l.bound.Store(true)
	c.metrics.connected.Set(1)
	c.log.Info("connected", "server", l.conn.url, "node", w.NodeID, "cursor", cursor, "head", w.Head)
	l.wg.Add(4)
	go func() { defer l.wg.Done(); l.feedLoop() }()
	go func() { defer l.wg.Done(); l.syncLoop() }()
	go func() { defer l.wg.Done(); l.keepalive(time.Duration(w.Limits.IdleTimeoutMS) * time.Millisecond / 3) }()
	go func() { defer l.wg.Done(); l.watch() }()
	return nil
}

// stop ends the link and waits for its goroutines. It must not be called
// from them.
func (l *link) stop() {
	l.stopped.Do(func() {
		l.cancel()
		l.conn.close()
		l.wg.Wait()
		l.c.metrics.connected.Set(0)
	})
}

// watch reports the connection's end to the client, unless the link was
// stopped on purpose.
func (l *link) watch() {
	select {
	case <-l.conn.done:
		_, err := l.conn.lost()
		c := l.c
		c.mu.Lock()
		if !c.closed {
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				c.linkLost(l, err)
			}()
		}
		c.mu.Unlock()
	case <-l.ctx.Done():
	}
}

// keepalive sends a protocol ping every interval (a third of the server's
// idle timeout). A ping unanswered within the interval means the
// connection is dead even if TCP has not said so (a blackholed path): it is
// closed, and the watcher reconnects.
func (l *link) keepalive(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(l.ctx, interval)
			err := l.conn.ping(ctx)
			cancel()
			if err != nil && l.ctx.Err() == nil {
				l.c.log.Info("keepalive failed; closing the connection", "err", err)
				l.conn.close()
				return
			}
		}
	}
}

// replayNow asks the sync loop for a replay pass and waits for its end.
func (l *link) replayNow(ctx context.Context) error {
	res := make(chan error, 1)
	select {
	case l.replays <- res:
	case <-ctx.Done():
		return ctx.Err()
	case <-l.ctx.Done():
		return ErrOffline
	}
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// syncLoop is the only goroutine that replays through this link, so two
// passes never overlap. A pass that leaves writes behind (refused, or not
// answered) is retried after RetryInterval, doubling to MaxRetryInterval.
func (l *link) syncLoop() {
	c := l.c
	delay := c.cfg.RetryInterval
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		var waiter chan error
		select {
		case <-l.ctx.Done():
			return
		case waiter = <-l.replays:
		case <-c.kick:
		case <-retry.C:
		}
		rep, err := l.replay()
		if waiter != nil {
			waiter <- err
		}
		if l.ctx.Err() != nil {
			return
		}
		if err != nil || !rep.complete {
			retry.Reset(delay)
			delay = min(2*delay, c.cfg.MaxRetryInterval)
			if err != nil && errors.Is(err, ErrConnectionLost) {
				return // the watcher reconnects
			}
			continue
		}
		delay = c.cfg.RetryInterval
	}
}

// replay runs one pass and accounts for it.
func (l *link) replay() (replayReport, error) {
	c := l.c
	if c.reconcile.Swap(false) {
		if err := c.replica.reconcile(l.ctx, c.queue); err != nil {
			c.reconcile.Store(true)
			c.log.Error("repairing the pending overlay", "err", err)
		}
	}
	start := c.now()
	rep, err := worker{c: c}.replay(l.ctx, l.conn)
	c.metrics.replaySeconds.Observe(c.now().Sub(start).Seconds())
	switch {
	case err != nil:
		c.metrics.replays.WithLabelValues("failed").Inc()
		if l.ctx.Err() == nil {
			c.log.Info("replay interrupted", "err", err, "sent", rep.sent)
		}
	case !rep.complete:
		c.metrics.replays.WithLabelValues("partial").Inc()
	default:
		c.metrics.replays.WithLabelValues("complete").Inc()
		if err := c.replica.setLastSync(l.ctx, c.now()); err != nil {
			return rep, err
		}
	}
	return rep, err
}

// feedLoop applies the change feed to the replica, in seq order.
func (l *link) feedLoop() {
	c := l.c
	for msg := range l.conn.feed {
		if err := l.apply(msg); err != nil {
			if l.ctx.Err() == nil {
				c.log.Error("change feed failed; reconnecting", "err", err)
			}
			l.conn.close()
			return
		}
	}
}

func (l *link) apply(msg syncproto.Message) error {
	c := l.c
	switch m := msg.(type) {
	case *syncproto.Changes:
		if err := c.replica.applyChanges(l.ctx, m.Entries, m.Cursor); err != nil {
			return err
		}
		c.metrics.feedEntries.Add(float64(len(m.Entries)))
		for _, e := range m.Entries {
			c.observe(e.HLC)
			ev := ChangeEvent{Model: e.Model, Key: e.Key, Version: e.Version, Deleted: e.Deleted}
			if !e.Deleted {
				ev.Value = e.Value
			}
			c.changes.publish(ev)
		}
		return nil
	case *syncproto.Resync:
		c.log.Info("cursor older than the server's oplog; loading a snapshot", "reason", m.Reason)
		head, err := c.loadSnapshot(l.ctx, l.conn.url)
		if err != nil {
			return err
		}
		return l.conn.subscribe(l.ctx, head)
	case *syncproto.Error:
		return fmt.Errorf("subscription refused: %w", m)
	}
	return nil
}
