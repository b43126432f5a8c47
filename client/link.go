package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd-dev/syncd/client/synccore"
	"github.com/syncd-dev/syncd/syncproto"
)

// link is one connection and the goroutines that do its I/O for the
// driver: the watcher (tells the driver the connection ended, and starts a
// reconnect when it ended on its own), the feed forwarder (hands the
// subscription's frames to the driver), the keepalive (pings the server,
// so an idle client is not closed for idleness and a dead connection is
// noticed), a snapshot download, and, rarely, a push's fetch of a conflict
// winner its answer left out. The connection's reader hands push answers
// to the driver itself. The link owns its goroutines: stop ends them and
// waits. None of them decides anything; what they learn goes to the driver
// as an event.
type link struct {
	c      *Client
	conn   *conn
	ctx    context.Context
	cancel context.CancelFunc
	since  time.Time   // when the link was made
	bound  atomic.Bool // hello was answered and the driver told
	// snapshotAbandoned: a snapshot download on this link failed, and
	// the link was closed for it (see link.healthy).
	snapshotAbandoned atomic.Bool

	mu       sync.Mutex
	stopping bool // under mu: spawn starts nothing more
	wg       sync.WaitGroup
	stopped  sync.Once

	// pushes are the batches the driver handed over, written in order by
	// the link's writer (writePushes), so that a large push on a slow
	// uplink never holds the driver. The core has at most InFlight pushes
	// unanswered, so the driver never waits for room.
	pushes chan outgoingPush
}

// outgoingPush is one batch for the link's writer.
type outgoingPush struct {
	id   uint64
	muts []syncproto.Mutation
}

func newLink(c *Client, cn *conn) *link {
	ctx, cancel := context.WithCancel(c.ctx)
	return &link{c: c, conn: cn, ctx: ctx, cancel: cancel, since: c.now(), pushes: make(chan outgoingPush, c.cfg.InFlight)}
}

// spawn runs f on a goroutine the link owns, unless the link is stopping.
func (l *link) spawn(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopping {
		return false
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		f()
	}()
	return true
}

// bind sends hello and, once welcomed, hands the connection to the driver
// (which subscribes, resyncs and replays as its core decides) and starts
// the link's goroutines.
func (l *link) bind(ctx context.Context) error {
	c := l.c
	cursor, err := c.replica.cursor(ctx)
	if err != nil {
		return err
	}
	// After cursor_ahead the replica's cursor means nothing to the
	// server: say hello from zero; the core resyncs from a snapshot.
	resync := c.resyncNext.Load()
	if resync {
		cursor = 0
	}
	dbID, err := c.replica.databaseID(ctx)
	if err != nil {
		return err
	}
	w, err := l.conn.hello(ctx, c.cfg.ClientID, cursor, c.stamp(), dbID)
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
	c.welcomed(w)
	if err := c.learnServers(ctx, w.Servers); err != nil {
		return err
	}
	// A replica synced from another database resyncs (the core decides,
	// from Resync); otherwise it follows this database from now on. After
	// a resync the driver remembers the database once the snapshot is in.
	other, err := c.otherDatabase(ctx, w.DatabaseID)
	if err != nil {
		return err
	}
	if !other {
		if err := c.rememberDatabase(ctx, w.DatabaseID); err != nil {
			return err
		}
	}
	scopes, narrowed, err := c.scopesWelcomed(ctx, w)
	if err != nil {
		return err
	}
	if len(narrowed) > 0 {
		c.log.Info("the token no longer grants every value of scopes this device followed whole; resyncing from a snapshot", "scopes", narrowed)
	}
	in := synccore.Welcomed{
		MaxBatch: min(w.Limits.MaxBatch, syncproto.MaxBatch), MaxPushBytes: pushBytes(w.Limits),
		Cursor: cursor, Head: w.Head, Resync: resync || other || len(narrowed) > 0, ValueVersions: w.ValueVersions,
		Scopes: scopes,
	}
	if !c.driver.post(event{link: l, in: in}) {
		return ErrClosed
	}
	// The watcher starts after the driver was told of the link, so the
	// driver hears of its end after its start.
	if !l.spawn(l.watch) {
		c.driver.post(event{link: l, in: synccore.Disconnected{}})
		return ErrConnectionLost
	}
	l.bound.Store(true)
	c.metrics.connected.Set(1)
	c.log.Info("connected", "server", l.conn.url, "node", w.NodeID, "cursor", cursor, "head", w.Head)
	l.spawn(l.forwardFeed)
	l.spawn(l.writePushes)
	l.spawn(func() { l.keepalive(time.Duration(w.Limits.IdleTimeoutMS) * time.Millisecond / 3) })
	return nil
}

// stop ends the link and waits for its goroutines. It must not be called
// from them, nor from the driver.
func (l *link) stop() {
	l.stopped.Do(func() {
		l.mu.Lock()
		l.stopping = true
		l.mu.Unlock()
		l.cancel()
		l.conn.close()
		l.wg.Wait()
		l.c.metrics.connected.Set(0)
	})
}

// watch tells the driver the connection ended, and reports an end the
// client did not ask for, so it reconnects.
func (l *link) watch() {
	select {
	case <-l.conn.done:
	case <-l.ctx.Done():
	}
	c := l.c
	c.driver.post(event{link: l, in: synccore.Disconnected{}})
	if l.ctx.Err() != nil {
		return // stopped on purpose
	}
	_, err := l.conn.lost()
	c.mu.Lock()
	if !c.closed {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.linkLost(l, err)
		}()
	}
	c.mu.Unlock()
}

// forwardFeed hands the subscription's frames to the driver, in order.
func (l *link) forwardFeed() {
	for msg := range l.conn.feed {
		if !l.c.driver.post(event{link: l, feed: msg}) {
			return
		}
	}
}

// push hands one batch to the link's writer. A link that ended drops it:
// the core resends it on the next connection, charged nothing.
func (l *link) push(id uint64, muts []syncproto.Mutation) {
	select {
	case l.pushes <- outgoingPush{id: id, muts: muts}:
	case <-l.ctx.Done():
	}
}

// writePushes writes the batches push handed over, in order, until the
// link ends.
func (l *link) writePushes() {
	for {
		select {
		case p := <-l.pushes:
			l.write(p.id, p.muts)
		case <-l.ctx.Done():
			return
		}
	}
}

// write sends one batch; the connection's reader hands its answer to the
// driver, without a goroutine of its own unless a conflict winner must be
// fetched (fetchOmitted sends requests whose answers that reader reads). A
// connection that fails meanwhile is closed: its end tells the driver,
// whose core resends the batch on the next connection, charged nothing.
func (l *link) write(id uint64, muts []syncproto.Mutation) {
	err := l.conn.pushAsync(l.ctx, muts, func(results []syncproto.Result, err error) {
		if err == nil && omitsWinner(results) {
			l.spawn(func() {
				if err := fetchOmitted(l.ctx, l.conn, muts, results); err != nil {
					l.lose("fetching an omitted winner", err)
					return
				}
				l.c.driver.post(event{link: l, in: synccore.Answered{Push: id, Results: results}})
			})
			return
		}
		in := pushAnswer(id, results, err)
		if in == nil {
			// The reader cannot wait for its own end: it abandons the
			// connection, and the watcher tells the driver.
			if l.ctx.Err() == nil {
				l.c.log.Info("push failed; reconnecting", "err", err)
			}
			l.conn.abandon()
			return
		}
		l.c.driver.postUntil(event{link: l, in: in}, l.conn.closing)
	})
	if err != nil {
		l.lose("push", err)
	}
}

// lose closes the connection after what failed on it, unless the link
// was stopped anyway.
func (l *link) lose(what string, err error) {
	if l.ctx.Err() == nil {
		l.c.log.Info(what+" failed; reconnecting", "err", err)
	}
	l.conn.close()
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
