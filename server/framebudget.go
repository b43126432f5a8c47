package server

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/syncproto"
)

// DefaultFrameBudgetBytes is Config.FrameBudgetBytes' default: sixteen
// frames of the largest size being read, decoded or applied at once.
const DefaultFrameBudgetBytes = 16 * syncproto.MaxFrameBytes

// DefaultFrameReadTimeout is Config.FrameReadTimeout's default: a 4 MiB
// frame at about 150 KB/s.
const DefaultFrameReadTimeout = 30 * time.Second

// frameBudget bounds the bytes of frames held by a set of sessions (all of
// them, one token's, one tenant's), from the moment a frame is known to
// need them until it is handled (a push: until its commit ends). A session
// whose frame finds the budget spent waits, unread, until other frames are
// done (TCP backpressure), so memory for frames in flight stays bounded
// however many sessions push at once. Waiters are served in arrival order.
type frameBudget struct {
	size    int64
	inUse   prometheus.Gauge // nil: not reported
	waits   prometheus.Counter
	mu      sync.Mutex
	used    int64
	waiters []*budgetWaiter
}

type budgetWaiter struct {
	n     int64
	ready chan struct{}
}

// frameHead is how much of a frame a session reads before it asks the
// budgets: a frame that ends within it takes only its size, a longer one
// frameReservation. Like the connection's read buffer, the head belongs to
// the session, outside the budgets, so a peer that starts many small
// frames and stalls holds none of them.
const frameHead = 4 << 10

// frameReservation is what a frame longer than its head reserves until it
// is read whole: the largest frame.
const frameReservation = syncproto.MaxFrameBytes

// newFrameBudget makes a budget of size bytes, never less than one
// frameReservation, so every frame fits alone.
func newFrameBudget(size int64, inUse prometheus.Gauge, waits prometheus.Counter) *frameBudget {
	return &frameBudget{size: max(size, frameReservation), inUse: inUse, waits: waits}
}

// acquire takes n bytes, waiting until they are free or ctx ends.
func (b *frameBudget) acquire(ctx context.Context, n int64) error {
	b.mu.Lock()
	if len(b.waiters) == 0 && b.used+n <= b.size {
		b.used += n
		b.report()
		b.mu.Unlock()
		return nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	b.waits.Inc()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		defer b.mu.Unlock()
		select {
		case <-w.ready: // granted meanwhile: give it back
			b.used -= n
		default:
			for i, x := range b.waiters {
				if x == w {
					b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
					break
				}
			}
		}
		b.grantLocked()
		return ctx.Err()
	}
}

// release gives back n bytes.
func (b *frameBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	b.grantLocked()
}

// grantLocked wakes the waiters that now fit, first come first served.
func (b *frameBudget) grantLocked() {
	for len(b.waiters) > 0 && b.used+b.waiters[0].n <= b.size {
		w := b.waiters[0]
		b.waiters = b.waiters[1:]
		b.used += w.n
		close(w.ready)
	}
	b.report()
}

func (b *frameBudget) report() {
	if b.inUse != nil {
		b.inUse.Set(float64(b.used))
	}
}

// frameShare is the budgets one session's frames draw on, in the order
// they are taken: its token's, its tenant's, then the server's (a nil
// entry is a budget turned off). One token's or one tenant's frames, even
// stalled ones, hold at most their share, and wait for it without
// standing in the server's queue, so the rest of the server's budget
// serves everyone else.
type frameShare []*frameBudget

// acquire takes n bytes of every budget, in order, or none of them.
func (s frameShare) acquire(ctx context.Context, n int64) error {
	for i, b := range s {
		if b == nil {
			continue
		}
		if err := b.acquire(ctx, n); err != nil {
			frameShare(s[:i]).release(n)
			return err
		}
	}
	return nil
}

// release gives back n bytes to every budget.
func (s frameShare) release(n int64) {
	for _, b := range s {
		if b != nil {
			b.release(n)
		}
	}
}
