package faultproxy

import (
	"sync"
	"time"
)

// pieceDuration is how much transfer time one throttled write may take; a
// smaller piece smooths the flow, a larger one saves syscalls.
const pieceDuration = 20 * time.Millisecond

// bucket paces one direction's writes to a byte rate. It grants pieces on a
// schedule: each piece starts when the previous one's transfer time has
// passed, and idle time earns no burst. The zero value has no cap.
type bucket struct {
	mu   sync.Mutex
	rate int64     // bytes per second; 0 means no cap
	next time.Time // earliest start of the next piece
}

// setRate changes the cap and forgets the schedule, so a new rate applies from
// the next piece on.
func (b *bucket) setRate(bytesPerSec int64) {
	b.mu.Lock()
	b.rate = bytesPerSec
	b.next = time.Time{}
	b.mu.Unlock()
}

// take grants up to want bytes at time now. It returns how many bytes the
// caller may write and how long it must wait before writing them.
func (b *bucket) take(now time.Time, want int) (int, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rate == 0 {
		return want, 0
	}
	n := min(int64(want), pieceSize(b.rate))
	start := b.next
	if start.Before(now) {
		start = now
	}
	// Round the transfer time up so the average never exceeds the rate.
	cost := time.Duration((n*int64(time.Second) + b.rate - 1) / b.rate)
	b.next = start.Add(cost)
	return int(n), start.Sub(now)
}

// pieceSize is the bytes one pieceDuration carries at rate, at least one and
// at most a chunk.
func pieceSize(rate int64) int64 {
	return min(max(rate*int64(pieceDuration)/int64(time.Second), 1), chunkSize)
}
