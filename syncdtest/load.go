package syncdtest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/syncd-dev/syncd/syncproto"
)

// LoadPush is push p of a load generator's device: n puts of small notes
// (model "notes") under keys of its own (clientID-p-i, so no two pushes of
// a run share a key), as an encoded frame with id "p<p>". The load
// benchmarks and tests of the server and of the syncd binary build their
// pushes here, so their figures are of the same writes.
func LoadPush(clock *syncproto.Clock, clientID string, p, n int) (id string, frame []byte, err error) {
	muts := make([]syncproto.Mutation, n)
	for i := range muts {
		op, err := syncproto.NewOpID()
		if err != nil {
			return "", nil, err
		}
		muts[i] = syncproto.Mutation{OpID: op, Model: "notes", Key: fmt.Sprintf("%s-%d-%d", clientID, p, i), Op: syncproto.OpPut, Value: []byte(`{"n":1}`), HLC: clock.Now()}
	}
	id = fmt.Sprintf("p%d", p)
	frame, err = syncproto.Encode(&syncproto.Push{ID: id, Mutations: muts})
	return id, frame, err
}

// LoadPushApplied returns nil when answer is the push_result of the push
// id with n results, every one applied, and otherwise an error that
// quotes the answer: what a closed-loop load generator checks before it
// counts a push as served.
func LoadPushApplied(answer []byte, id string, n int) error {
	msg, err := syncproto.Decode(answer)
	if err != nil {
		return fmt.Errorf("answer to %s: %w", id, err)
	}
	pr, ok := msg.(*syncproto.PushResult)
	if !ok || pr.ID != id || len(pr.Results) != n {
		return fmt.Errorf("want the push_result of %s with %d results, got %s", id, n, answer)
	}
	for _, r := range pr.Results {
		if r.Status != syncproto.StatusApplied {
			return fmt.Errorf("a write of %s was %s", id, r.Status)
		}
	}
	return nil
}

// ReportFairness reports issue 24's fairness figures on b, each the median
// over the runs of the scenario (one value a run in each slice; sorted in
// place): tenant B's awaited-write p99 alone and while tenant A floods, in
// milliseconds (b_p99_alone_ms, b_p99_flood_ms) and their ratio
// (b_p99_ratio, aimed at <= 2); A's mutations a second alone and while B
// writes (a_mut/s_alone, a_mut/s_shared) and their ratio (a_ratio, aimed
// at >= 0.8). The in-process and the process forms of the benchmark
// report through it, so their figures read side by side.
func ReportFairness(b *testing.B, bAlone, bFlood, aAlone, aShared []float64) {
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(median(bAlone), "b_p99_alone_ms")
	b.ReportMetric(median(bFlood), "b_p99_flood_ms")
	b.ReportMetric(median(bFlood)/median(bAlone), "b_p99_ratio")
	b.ReportMetric(median(aAlone), "a_mut/s_alone")
	b.ReportMetric(median(aShared), "a_mut/s_shared")
	b.ReportMetric(median(aShared)/median(aAlone), "a_ratio")
}
