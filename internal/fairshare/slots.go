package fairshare

import (
	"context"
	"errors"
	"sync"
)

// ErrStopped is Acquire's answer once its stop channel closed.
var ErrStopped = errors.New("stopped")

// Slots admits each tenant's work to its line: at most n items of a tenant
// wait, and the next Acquire of that tenant waits for one to be released
// (backpressure on that tenant's callers alone). It is safe for concurrent
// use.
type Slots struct {
	n       int
	mu      sync.Mutex
	tenants map[string]*tenantSlots
}

// tenantSlots is one tenant's: refs counts the callers holding or waiting
// for a slot; the entry goes when it falls to zero, so the map holds only
// tenants with work in flight.
type tenantSlots struct {
	ch   chan struct{}
	refs int
}

// NewSlots returns slots admitting n items a tenant.
func NewSlots(n int) *Slots {
	return &Slots{n: n, tenants: map[string]*tenantSlots{}}
}

// Acquire waits for one of tenant's slots. It gives up with ctx's error
// when ctx ends first, or ErrStopped when stop closes first.
func (s *Slots) Acquire(ctx context.Context, tenant string, stop <-chan struct{}) error {
	s.mu.Lock()
	ts := s.tenants[tenant]
	if ts == nil {
		ts = &tenantSlots{ch: make(chan struct{}, s.n)}
		s.tenants[tenant] = ts
	}
	ts.refs++
	s.mu.Unlock()
	select {
	case ts.ch <- struct{}{}:
		return nil
	case <-stop:
		s.unref(tenant, ts)
		return ErrStopped
	case <-ctx.Done():
		s.unref(tenant, ts)
		return ctx.Err()
	}
}

// Release gives back a slot of tenant's that Acquire gave.
func (s *Slots) Release(tenant string) {
	s.mu.Lock()
	ts := s.tenants[tenant]
	s.mu.Unlock()
	<-ts.ch
	s.unref(tenant, ts)
}

func (s *Slots) unref(tenant string, ts *tenantSlots) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ts.refs--; ts.refs == 0 {
		delete(s.tenants, tenant)
	}
}
