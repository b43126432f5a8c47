package reconnect

import (
	"errors"
	"math/rand/v2"
	"time"
)

// Backoff computes the wait after a failed attempt: exponential, capped,
// with full jitter. It is a pure function of its fields and the failure
// count; the coordinator does the waiting, with its own clock, and cuts the
// wait short when its context ends.
//
// The zero value means the defaults. A Backoff is safe for concurrent use
// if Rand is.
type Backoff struct {
	// Base is the ceiling of the first wait. Default 250ms.
	Base time.Duration
	// Cap bounds every wait, Base included. Default 30s, or Base if that is
	// longer.
	Cap time.Duration
	// Rand returns a uniform integer in [0, n) for n > 0. Tests fix it to get
	// known delays. Default math/rand/v2.Int64N.
	Rand func(n int64) int64
}

const (
	defaultBase = 250 * time.Millisecond
	defaultCap  = 30 * time.Second
)

// validate rejects negative durations; zero means the default.
func (b Backoff) validate() error {
	if b.Base < 0 || b.Cap < 0 {
		return errors.New("reconnect: config: Backoff.Base and Backoff.Cap must not be negative")
	}
	return nil
}

// Ceiling returns the largest wait after the given number of consecutive
// failed attempts (failures >= 1): Base * 2^(failures-1), capped at Cap.
func (b Backoff) Ceiling(failures int) time.Duration {
	base, limit := b.Base, b.Cap
	if base <= 0 {
		base = defaultBase
	}
	if limit <= 0 {
		limit = max(defaultCap, base)
	}
	if failures < 1 {
		return 0
	}
	shift := failures - 1
	if shift >= 63 || base > limit>>shift {
		return limit
	}
	return base << shift
}

// Delay returns the wait after the given number of consecutive failed
// attempts: uniform in [0, Ceiling(failures)] ("full jitter"), so clients
// that lost the network together do not come back in step.
func (b Backoff) Delay(failures int) time.Duration {
	ceiling := b.Ceiling(failures)
	if ceiling <= 0 {
		return 0
	}
	random := b.Rand
	if random == nil {
		random = rand.Int64N
	}
	return time.Duration(random(int64(ceiling) + 1))
}
