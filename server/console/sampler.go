package console

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/adminapi"
)

// Sample is the live figures of one interval between two readings of the
// server's running totals.
type Sample struct {
	At time.Time `json:"at"`
	// AppliedPerSecond is mutations applied per second; PushesPerSecond
	// push messages answered per second.
	AppliedPerSecond float64 `json:"applied_per_s"`
	PushesPerSecond  float64 `json:"pushes_per_s"`
	// Acks counts the pushes committed in the interval; AckMeanMs and
	// AckP95Ms are their mean and 95th percentile commit latency in
	// milliseconds (the p95 interpolated within its histogram bucket;
	// both 0 without pushes).
	Acks      uint64  `json:"acks"`
	AckMeanMs float64 `json:"ack_mean_ms"`
	AckP95Ms  float64 `json:"ack_p95_ms"`
}

// between is the sample of the interval from a to b.
func between(a, b adminapi.Figures) Sample {
	s := Sample{At: b.At}
	secs := b.At.Sub(a.At).Seconds()
	if secs <= 0 {
		return s
	}
	s.AppliedPerSecond = float64(sub(b.Mutations["applied"], a.Mutations["applied"])) / secs
	s.PushesPerSecond = float64(sub(b.Pushes, a.Pushes)) / secs
	s.Acks = sub(b.Ack.Count, a.Ack.Count)
	if s.Acks == 0 {
		return s
	}
	s.AckMeanMs = (b.Ack.Sum - a.Ack.Sum) / float64(s.Acks) * 1000
	s.AckP95Ms = quantile(0.95, a.Ack, b.Ack) * 1000
	return s
}

// quantile estimates the q-quantile of the observations b holds beyond a,
// interpolating linearly within the bucket that holds it, as Prometheus's
// histogram_quantile does; beyond the last finite bound it is that bound.
func quantile(q float64, a, b adminapi.Histogram) float64 {
	total := sub(b.Count, a.Count)
	rank := q * float64(total)
	lower, below := 0.0, uint64(0)
	for i, bk := range b.Buckets {
		var before uint64
		if i < len(a.Buckets) {
			before = a.Buckets[i].Count
		}
		n := sub(bk.Count, before)
		if float64(n) >= rank {
			if math.IsInf(bk.UpperBound, 1) || n == below {
				return lower
			}
			return lower + (bk.UpperBound-lower)*(rank-float64(below))/float64(n-below)
		}
		lower, below = bk.UpperBound, n
	}
	return lower
}

// sub is a-b for running totals, 0 when a counter restarted.
func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// sampler reads the server's running totals every interval and keeps
// the samples of the last History. Its goroutine ends at close.
type sampler struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	samples []Sample // oldest first, at most max
	max     int
	// marks are readings of the per-tenant totals at least
	// window/TenantMarks apart, oldest first, the oldest within window
	// (Config.History) of the newest; latest is the newest reading. Per-tenant rates are
	// taken between marks[0] and latest, so memory is TenantMarks+1 maps
	// whatever the sampling interval.
	marks  []tenantMark
	latest tenantMark
	window time.Duration
}

// TenantMarks bounds the readings of per-tenant totals the sampler keeps
// for the tenants page's rates.
const TenantMarks = 10

// tenantMark is one reading of Figures.TenantMutations.
type tenantMark struct {
	at     time.Time
	totals map[string]uint64
}

func startSampler(cfg Config) *sampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sampler{cancel: cancel, done: make(chan struct{}), max: max(1, int(cfg.History/cfg.SampleInterval)), window: cfg.History}
	go s.run(ctx, cfg)
	return s
}

func (s *sampler) run(ctx context.Context, cfg Config) {
	defer close(s.done)
	tick := time.NewTicker(cfg.SampleInterval)
	defer tick.Stop()
	var prev *adminapi.Figures
	for {
		rctx, cancel := context.WithTimeout(ctx, cfg.SampleInterval)
		f, err := cfg.Figures(rctx)
		cancel()
		if err == nil {
			s.mark(tenantMark{at: f.At, totals: f.TenantMutations})
		}
		switch {
		case err != nil:
			cfg.Logger.Warn("console: reading the live figures", "err", err)
		case prev != nil:
			s.add(between(*prev, f))
			prev = &f
		default:
			prev = &f
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *sampler) add(x Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == s.max {
		copy(s.samples, s.samples[1:])
		s.samples = s.samples[:len(s.samples)-1]
	}
	s.samples = append(s.samples, x)
}

// mark records a reading of the per-tenant totals.
func (s *sampler) mark(m tenantMark) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latest = m
	if n := len(s.marks); n == 0 || m.at.Sub(s.marks[n-1].at) >= s.window/TenantMarks {
		s.marks = append(s.marks, m)
	}
	for len(s.marks) > 1 && (len(s.marks) > TenantMarks || m.at.Sub(s.marks[0].at) > s.window) {
		s.marks = s.marks[1:]
	}
}

// tenantRates returns each tenant's mutations pushed per second over the
// window the marks span, and that window (0: not two readings yet).
func (s *sampler) tenantRates() (map[string]float64, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.marks) == 0 {
		return nil, 0
	}
	first := s.marks[0]
	window := s.latest.at.Sub(first.at)
	if window <= 0 {
		return nil, 0
	}
	rates := make(map[string]float64, len(s.latest.totals))
	for t, n := range s.latest.totals {
		rates[t] = float64(sub(n, first.totals[t])) / window.Seconds()
	}
	return rates, window
}

// history returns a copy of the samples, oldest first.
func (s *sampler) history() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sample{}, s.samples...)
}

func (s *sampler) close() {
	s.cancel()
	<-s.done
}
