package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// chunkSize is the largest read the proxy makes, and so the largest unit a
	// delay applies to.
	chunkSize = 32 << 10
	// queueLen bounds the chunks read but not yet written per direction; a full
	// queue stops reading, so TCP backpressure reaches the sender.
	queueLen = 16
	// noCut marks a direction with no cut armed.
	noCut = -1
	// settleLimit bounds how long a cut waits for the peer to acknowledge the
	// last forwarded bytes before resetting anyway.
	settleLimit = time.Second
)

// ending says why a connection is torn down, and so how.
type ending int

const (
	finish ending = iota // both directions ended with EOF: close normally
	abort                // a peer failed, a dial failed or the proxy closed: reset
	reset                // ResetAll: reset, counted in Resets
	cut                  // a cut fired: reset, counted in Resets and Cuts
)

// conn is one accepted connection and its upstream. It runs four goroutines
// while both directions flow: a reader and a writer per direction. A reader
// owns its source's reads and hands chunks to its writer through a bounded
// channel; the writer applies delay, blackhole, cut and throttle in that order.
type conn struct {
	p      *Proxy
	id     uint64
	client *net.TCPConn
	done   chan struct{} // closed by teardown

	mu     sync.Mutex
	server *net.TCPConn // nil until dialed, and forever for a blackholed accept
	ended  bool

	// tainted is set once a byte or FIN is discarded; the connection then
	// forwards nothing for the rest of its life.
	tainted atomic.Bool
	// cut holds, per Direction, the bytes that may still be forwarded before a
	// reset, or noCut.
	cut [2]atomic.Int64
	// halves counts directions that have not yet forwarded their EOF.
	halves atomic.Int32
}

type chunk struct {
	data []byte
	due  time.Time
}

func newConn(p *Proxy, id uint64, client *net.TCPConn) *conn {
	c := &conn{p: p, id: id, client: client, done: make(chan struct{})}
	c.cut[Up].Store(noCut)
	c.cut[Down].Store(noCut)
	return c
}

// run dials the target (unless the connection was blackholed at accept) and
// pumps both directions until the connection ends. The caller has done
// p.wg.Add(1) for it.
func (c *conn) run(target string, blackholed bool) {
	defer c.p.wg.Done()
	if blackholed {
		c.halves.Store(1)
		c.pump(Up, c.client, nil)
		return
	}
	srv, err := c.p.dial(target)
	if err != nil {
		if c.p.ctx.Err() == nil {
			c.p.counts.dialFailures.Add(1)
			c.p.log.Debug("faultproxy: dial failed", "conn", c.id, "target", target, "err", err)
		}
		c.teardown(abort)
		return
	}
	if !c.attach(srv) {
		return
	}
	c.halves.Store(2)
	c.p.wg.Add(1)
	go func() {
		defer c.p.wg.Done()
		c.pump(Down, srv, c.client)
	}()
	c.pump(Up, c.client, srv)
}

// attach records the upstream connection, or closes it and reports false when
// the connection was torn down while dialing.
func (c *conn) attach(srv *net.TCPConn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		abortTCP(srv)
		return false
	}
	c.server = srv
	return true
}

// teardown ends the connection once and reports whether this call ended it.
// It counts and forgets the connection before closing the sockets, so Stats
// already shows the end when a peer observes it. Every ending but finish makes
// both peers see a reset.
func (c *conn) teardown(why ending) bool {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return false
	}
	c.ended = true
	close(c.done)
	srv := c.server
	c.mu.Unlock()

	switch why {
	case reset:
		c.p.counts.resets.Add(1)
		c.p.log.Debug("faultproxy: reset", "conn", c.id)
	case cut:
		c.p.counts.resets.Add(1)
		c.p.counts.cuts.Add(1)
		c.p.log.Debug("faultproxy: cut", "conn", c.id)
	}
	c.p.forget(c)
	for _, tc := range []*net.TCPConn{c.client, srv} {
		switch {
		case tc == nil:
		case why == finish:
			_ = tc.Close() // both directions already ended; nothing is lost
		default:
			abortTCP(tc)
		}
	}
	return true
}

// pump moves one direction from src to dst until EOF or teardown. dst is nil
// only for a connection blackholed at accept, which is tainted and never
// writes.
func (c *conn) pump(dir Direction, src, dst *net.TCPConn) {
	in := make(chan chunk, queueLen)
	c.p.wg.Add(1)
	go func() {
		defer c.p.wg.Done()
		c.read(dir, src, in)
	}()
	c.write(dir, dst, in)
}

// read stamps each chunk read from src with its due time and queues it, or
// discards it at once while the connection is blackholed. It closes out only on
// EOF; a read error resets the connection.
func (c *conn) read(dir Direction, src *net.TCPConn, out chan<- chunk) {
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 && c.blackholed() {
			c.p.counts.discarded[dir].Add(int64(n))
		} else if n > 0 {
			ch := chunk{
				data: append([]byte(nil), buf[:n]...),
				due:  time.Now().Add(time.Duration(c.p.delay[dir].Load())),
			}
			select {
			case out <- ch:
			case <-c.done:
				return
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			close(out)
			return
		default:
			c.teardown(abort)
			return
		}
	}
}

// write forwards queued chunks to dst in order. A chunk is lost if the
// blackhole is in force when it is read or when it falls due, like a packet in
// flight when the path dies.
func (c *conn) write(dir Direction, dst *net.TCPConn, in <-chan chunk) {
	for {
		var ch chunk
		var ok bool
		select {
		case ch, ok = <-in:
		case <-c.done:
			return
		}
		if !ok {
			c.endOfStream(dst)
			return
		}
		if !c.sleepUntil(ch.due) {
			return
		}
		if c.blackholed() {
			c.p.counts.discarded[dir].Add(int64(len(ch.data)))
			continue
		}
		data, fire := c.spend(dir, ch.data)
		if !c.send(dir, dst, data) {
			return
		}
		if fire {
			c.settle(dst)
			c.teardown(cut)
			return
		}
	}
}

// blackholed reports whether the connection must discard what it reads, and
// taints it if the proxy is in Blackhole mode now.
func (c *conn) blackholed() bool {
	if c.tainted.Load() {
		return true
	}
	if c.p.Mode() == Blackhole {
		c.tainted.Store(true)
		return true
	}
	return false
}

// endOfStream forwards src's EOF as a half-close of dst (unless the blackhole
// swallows it) and closes the connection once both directions have ended.
func (c *conn) endOfStream(dst *net.TCPConn) {
	if !c.blackholed() {
		if err := dst.CloseWrite(); err != nil {
			c.teardown(abort)
			return
		}
	}
	if c.halves.Add(-1) == 0 {
		c.teardown(finish)
	}
}

// spend takes data's bytes from dir's cut budget. It returns the prefix that
// may be forwarded and whether the cut fires after it.
func (c *conn) spend(dir Direction, data []byte) ([]byte, bool) {
	for {
		left := c.cut[dir].Load()
		if left == noCut {
			return data, false
		}
		if int64(len(data)) <= left {
			if c.cut[dir].CompareAndSwap(left, left-int64(len(data))) {
				return data, false
			}
			continue
		}
		if c.cut[dir].CompareAndSwap(left, noCut) {
			return data[:left], true
		}
	}
}

// send writes data to dst at the pace the direction's throttle allows.
func (c *conn) send(dir Direction, dst *net.TCPConn, data []byte) bool {
	for len(data) > 0 {
		n, wait := c.p.buckets[dir].take(time.Now(), len(data))
		if !sleepUntilDone(c.done, wait) {
			return false
		}
		if _, err := dst.Write(data[:n]); err != nil {
			c.teardown(abort)
			return false
		}
		c.p.counts.bytes[dir].Add(int64(n))
		data = data[n:]
	}
	return true
}

// settle waits, up to settleLimit, until tc has no unacknowledged bytes. A
// reset discards unacknowledged bytes, so a cut settles the bytes it forwarded
// before resetting, and exactly its budget arrives. Where the count is
// unavailable it returns at once.
func (c *conn) settle(tc *net.TCPConn) {
	deadline := time.Now().Add(settleLimit)
	wait := 50 * time.Microsecond
	for {
		n, ok := unacked(tc)
		if !ok || n == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.p.log.Debug("faultproxy: cut without settling", "conn", c.id, "unacked", n)
			return
		}
		if !sleepUntilDone(c.done, wait) {
			return
		}
		wait = min(2*wait, 10*time.Millisecond)
	}
}

// sleepUntil waits until t, or reports false if the connection ends first.
func (c *conn) sleepUntil(t time.Time) bool {
	return sleepUntilDone(c.done, time.Until(t))
}
