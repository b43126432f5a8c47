package main

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// histogram counts durations in logarithmic buckets (about 2% wide), so
// millions of samples cost a fixed few kilobytes and any quantile is read
// to within a bucket. It is safe for concurrent use.
type histogram struct {
	buckets [histBuckets]atomic.Int64
	n       atomic.Int64
	max     atomic.Int64 // nanoseconds
}

// histBuckets covers 1 µs .. about 20 minutes at histScale buckets per
// factor e.
const (
	histScale   = 50
	histBuckets = 1050
)

func (h *histogram) observe(d time.Duration) {
	if d < 0 {
		d = 0
	}
	us := float64(d) / float64(time.Microsecond)
	b := min(int(math.Log1p(us)*histScale), histBuckets-1)
	h.buckets[b].Add(1)
	h.n.Add(1)
	for {
		m := h.max.Load()
		if int64(d) <= m || h.max.CompareAndSwap(m, int64(d)) {
			return
		}
	}
}

// quantile returns the upper bound of the bucket holding quantile q
// (0 < q <= 1), capped at the largest sample; 0 without samples.
func (h *histogram) quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(n)))
	var seen int64
	for b := range h.buckets {
		seen += h.buckets[b].Load()
		if seen >= rank {
			us := math.Expm1(float64(b+1) / histScale)
			return min(time.Duration(us*float64(time.Microsecond)), time.Duration(h.max.Load()))
		}
	}
	return time.Duration(h.max.Load())
}

// latencyView is a histogram in a report, in milliseconds.
type latencyView struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p99_9_ms"`
	Max   float64 `json:"max_ms"`
}

func (h *histogram) view() latencyView {
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)) / 1000 }
	return latencyView{
		Count: h.n.Load(), P50: ms(h.quantile(0.5)), P90: ms(h.quantile(0.9)), P99: ms(h.quantile(0.99)),
		P999: ms(h.quantile(0.999)), Max: ms(time.Duration(h.max.Load())),
	}
}

// counters counts events by name (errors by code, results by status). It
// is safe for concurrent use.
type counters struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *counters) add(name string, n int64) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]int64{}
	}
	c.m[name] += n
	c.mu.Unlock()
}

func (c *counters) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// seqShards spreads the delivery ledger over independently locked maps.
const seqShards = 256

// deliveries is the feed-delivery ledger: for every oplog seq the
// generator's pushes were acknowledged with, when the ack arrived and how
// many subscribers saw it. A subscriber may see a write before its pusher
// has read the ack; such a delivery counts with latency 0 once the ack
// arrives. Entries never acknowledged to the generator (other writers')
// are not measured.
type deliveries struct {
	start  time.Time
	shards [seqShards]struct {
		mu sync.Mutex
		m  map[uint64]*delivery
	}
	latency histogram
}

type delivery struct {
	acked int64 // nanoseconds since start; 0 = not acknowledged to this generator
	seen  int64 // subscribers that saw it
	early int64 // of which before the ack arrived
}

func newDeliveries(start time.Time) *deliveries {
	d := &deliveries{start: start}
	for i := range d.shards {
		d.shards[i].m = map[uint64]*delivery{}
	}
	return d
}

func (d *deliveries) entry(seq uint64) (*sync.Mutex, *delivery) {
	s := &d.shards[seq%seqShards]
	s.mu.Lock()
	e := s.m[seq]
	if e == nil {
		e = &delivery{}
		s.m[seq] = e
	}
	return &s.mu, e
}

// acked records that a push was acknowledged with seq now.
func (d *deliveries) acked(seq uint64, now time.Time) {
	mu, e := d.entry(seq)
	e.acked = max(1, int64(now.Sub(d.start)))
	early := e.early
	mu.Unlock()
	for range early {
		d.latency.observe(0)
	}
}

// seen records that one subscriber received seq now.
func (d *deliveries) seen(seq uint64, now time.Time) {
	mu, e := d.entry(seq)
	e.seen++
	acked := e.acked
	if acked == 0 {
		e.early++
	}
	mu.Unlock()
	if acked > 0 {
		d.latency.observe(time.Duration(int64(now.Sub(d.start)) - acked))
	}
}

// tally returns how many acknowledged writes there were and how many
// deliveries of them were made, over subscribers each expected to see all.
func (d *deliveries) tally(subscribers int) (writes, delivered, missing int64) {
	for i := range d.shards {
		s := &d.shards[i]
		s.mu.Lock()
		for _, e := range s.m {
			if e.acked == 0 {
				continue
			}
			writes++
			delivered += min(e.seen, int64(subscribers))
			missing += max(0, int64(subscribers)-e.seen)
		}
		s.mu.Unlock()
	}
	return writes, delivered, missing
}
