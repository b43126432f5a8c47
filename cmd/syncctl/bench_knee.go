package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"time"
)

// Knee search bounds (syncctl bench --find-knee).
const (
	// kneeMaxRuns bounds the runs of one search: doubling from the start
	// rate until a run misses a target, then halving the interval.
	kneeMaxRuns = 12
	// kneePrecision ends the search once the interval between the best
	// passing rate and the lowest failing one is within this share of the
	// passing rate.
	kneePrecision = 0.1
)

// kneeTargets are what a run at the knee's rate must meet.
type kneeTargets struct {
	ackP99      time.Duration
	deliveryP99 time.Duration
}

// kneeSearch is the search's state: pure, so its steps are tested on
// their own. A rate is pushes a second per pusher.
type kneeSearch struct {
	pass, fail float64 // best passing rate, lowest failing rate; 0: none yet
	min, max   float64 // the rates tried stay within [min, max]
}

// next returns the rate to try after a run at rate passed or failed, and
// false when the search is over (the knee is s.pass).
func (s *kneeSearch) next(rate float64, passed bool) (float64, bool) {
	if passed {
		s.pass = math.Max(s.pass, rate)
	} else if s.fail == 0 || rate < s.fail {
		s.fail = rate
	}
	switch {
	case s.fail == 0 && s.pass >= s.max:
		return 0, false // every rate up to the maximum passes
	case s.fail == 0:
		return math.Min(2*s.pass, s.max), true
	case s.pass == 0:
		if s.fail <= s.min {
			return 0, false // even the slowest rate misses a target
		}
		return math.Max(s.fail/2, s.min), true
	case s.fail-s.pass <= kneePrecision*s.pass:
		return 0, false
	}
	return (s.pass + s.fail) / 2, true
}

// kneeMinPushes is the fewest pushes each pusher makes in a run of the
// search: the lowest rate it tries is this many per --duration, so that
// every run measures something.
const kneeMinPushes = 4

// kneeTrial is one run of the search.
type kneeTrial struct {
	Rate            float64 `json:"rate_per_pusher"`
	MutationsPerSec float64 `json:"mutations_per_second"`
	AckP99          float64 `json:"ack_p99_ms"`
	DeliveryP99     float64 `json:"delivery_p99_ms"`
	Missing         int64   `json:"deliveries_missing"`
	Errors          int64   `json:"errors"`
	// ErrorsByCode names the errors (as syncctl bench reports them).
	ErrorsByCode map[string]int64 `json:"errors_by_code,omitempty"`
	Passed       bool             `json:"passed"`
}

// kneeReport is syncctl bench --find-knee's answer.
type kneeReport struct {
	Config              benchConfigView `json:"config"`
	AckP99TargetMS      float64         `json:"ack_p99_target_ms"`
	DeliveryP99TargetMS float64         `json:"delivery_p99_target_ms"`
	Trials              []kneeTrial     `json:"trials"`
	// Knee is the passing trial with the highest rate; nil when none passed.
	Knee *kneeTrial `json:"knee"`
}

// judge reports whether a run met the targets: at least one push
// answered, both p99s under them, every acknowledged write delivered to
// every subscriber, no error.
func (t kneeTargets) judge(rate float64, rep *benchReport) kneeTrial {
	tr := kneeTrial{
		Rate: rate, MutationsPerSec: rep.MutationsPerSec, AckP99: rep.Ack.P99, DeliveryP99: rep.Delivery.P99,
		Missing: rep.Delivery.Missing, Errors: sum(rep.Errors), ErrorsByCode: rep.Errors,
	}
	tr.Passed = rep.Ack.Count > 0 && tr.AckP99 < ms64(t.ackP99) && tr.DeliveryP99 < ms64(t.deliveryP99) && tr.Missing == 0 && tr.Errors == 0
	return tr
}

func ms64(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// findKnee runs the load at rates chosen by kneeSearch, from cfg.rate
// (pushes a second per pusher, open loop), each run as syncctl bench runs
// it, and returns every trial and the knee: the highest rate whose run met
// the targets. It stops after kneeMaxRuns runs at most.
func (a *app) findKnee(ctx context.Context, cfg benchConfig, clients []benchClient, targets kneeTargets) (*kneeReport, error) {
	rep := &kneeReport{Config: cfg.view(), AckP99TargetMS: ms64(targets.ackP99), DeliveryP99TargetMS: ms64(targets.deliveryP99)}
	search := kneeSearch{min: kneeMinPushes / cfg.duration.Seconds(), max: benchMaxRate}
	rate := cfg.rate
	for range kneeMaxRuns {
		run := cfg
		run.rate = rate
		r, err := a.bench(ctx, run, clients)
		if err != nil {
			return nil, fmt.Errorf("knee run at %g pushes/s per pusher: %w", rate, err)
		}
		trial := targets.judge(rate, r)
		rep.Trials = append(rep.Trials, trial)
		next, more := search.next(rate, trial.Passed)
		if !more {
			break
		}
		rate = next
	}
	for i, tr := range rep.Trials {
		if tr.Passed && (rep.Knee == nil || tr.Rate > rep.Knee.Rate) {
			rep.Knee = &rep.Trials[i]
		}
	}
	return rep, nil
}

// print writes the trials and the knee as a table.
func (rep *kneeReport) print(w io.Writer) error {
	fmt.Fprintf(w, "knee targets: ack p99 < %s ms, delivery p99 < %s ms, nothing missing, no error\n",
		ms(rep.AckP99TargetMS), ms(rep.DeliveryP99TargetMS))
	fmt.Fprintf(w, "%-14s %-14s %-12s %-16s %-8s %-7s %s\n", "RATE/PUSHER", "MUTATIONS/S", "ACK P99", "DELIVERY P99", "MISSING", "ERRORS", "")
	for _, t := range rep.Trials {
		verdict := "over"
		if t.Passed {
			verdict = "ok"
		}
		if t.Errors > 0 {
			verdict += " (" + describeCounts(t.ErrorsByCode) + ")"
		}
		fmt.Fprintf(w, "%-14.3g %-14.0f %-12s %-16s %-8d %-7d %s\n", t.Rate, t.MutationsPerSec, ms(t.AckP99), ms(t.DeliveryP99), t.Missing, t.Errors, verdict)
	}
	if rep.Knee == nil {
		_, err := fmt.Fprintln(w, "knee: no rate met the targets")
		return err
	}
	_, err := fmt.Fprintf(w, "knee: %.0f mutations a second (%.3g pushes a second per pusher)\n", rep.Knee.MutationsPerSec, rep.Knee.Rate)
	return err
}
