package server

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/syncproto"
)

// DefaultFrameBudgetBytes is Config.FrameBudgetBytes' default: sixteen
// frames of the largest size being decoded or applied at once.
const DefaultFrameBudgetBytes = 16 * syncproto.MaxFrameBytes

// DefaultFrameReadTimeout is Config.FrameReadTimeout's default: a 4 MiB
// frame at about 150 KB/s.
const DefaultFrameReadTimeout = 30 * time.Second

// frameBudget bounds the bytes of frames held by all sessions together,
// from the moment a frame starts arriving until it is handled (a push:
// until its commit ends). A frame that starts reserves the largest frame
// size and gives back what it did not use once it is read; a session whose
// frame finds the budget spent waits, unread, until other frames are done
// (TCP backpressure), so memory for frames in flight stays bounded however
// many sessions push at once. Waiters are served in arrival order.
type frameBudget struct {
	size    int64
	inUse   prometheus.Gauge
	waits   prometheus.Counter
	mu      sync.Mutex
	used    int64
	waiters []*budgetWaiter
}

type budgetWaiter struct {
	n     int64
	ready chan struct{}
}

// frameReservation is what a frame starting to arrive reserves.
const frameReservation = syncproto.MaxFrameBytes + 1

func newFrameBudget(size int64, m *metrics) *frameBudget {
	return &frameBudget{size: max(size, frameReservation), inUse: m.frameBudgetInUse, waits: m.frameBudgetWaits}
}

// acquire takes n bytes, waiting until they are free or ctx ends.
func (b *frameBudget) acquire(ctx context.Context, n int64) error {
	b.mu.Lock()
	if len(b.waiters) == 0 && b.used+n <= b.size {
		b.used += n
		b.inUse.Set(float64(b.used))
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
	b.inUse.Set(float64(b.used))
}
