package reconnect

import (
	"errors"
	"math/rand/v2"
	"time"
)

// Backoff computes every wait of the client after a failure: a reconnect
// attempt that failed (the coordinator), a link lost soon after it was
// made, a replay pass that left writes queued (the client's driver). It is
// exponential and capped, with one jitter rule (see Wait): a wait is
// uniform in [C/2, C] for the ceiling C of the failure count, so repeated
// failures never retry in a tight loop and devices that failed together do
// not come back in step. It is a pure function of its fields, the failure
// count and the server's retry hint; the caller does the waiting, with its
// own clock, and cuts the wait short when its context ends.
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
// attempts when the server gave no hint: Wait(failures, 0).
func (b Backoff) Delay(failures int) time.Duration {
	return b.Wait(failures, 0)
}

// Wait returns the wait after the given number of consecutive failed
// attempts (failures >= 1) when the server asked for at least hint (0: no
// hint): uniform in [C/2, C] ("equal jitter"), where C is
// Ceiling(failures), raised to twice the hint when that is more. The wait
// is therefore never below the hint nor below half the ceiling, and waits
// of devices given the same hint are spread over as long as the hint. A
// caller caps a hint it did not choose (see MaxRetryHint). Failures < 1
// and no hint: 0.
func (b Backoff) Wait(failures int, hint time.Duration) time.Duration {
	ceiling := b.Ceiling(failures)
	if hint > 0 && hint > ceiling/2 {
		ceiling = 2 * hint
	}
	if ceiling <= 0 {
		return 0
	}
	random := b.Rand
	if random == nil {
		random = rand.Int64N
	}
	half := ceiling / 2
	return ceiling - half + time.Duration(random(int64(half)+1))
}
