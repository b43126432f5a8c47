package server_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncproto"
)

// counterHook merges counters: the stored value plus the written one.
// Before answering about the phone's writes, the first interferences times,
// it asks the test (interfere) to make another device write the same key
// and waits until it did (done), so its answer is stale when it reaches
// the committer.
type counterHook struct {
	interfere chan struct{}
	done      chan struct{}

	mu            sync.Mutex
	interferences int
	asked         map[string]int
}

func (h *counterHook) hook(ctx context.Context, cur replication.Record, exists bool, p replication.Proposal) (replication.HookResult, error) {
	h.mu.Lock()
	h.asked[p.OpID]++
	interfere := p.ClientID == "phone" && h.interferences > 0
	if interfere {
		h.interferences--
	}
	h.mu.Unlock()
	if interfere {
		select {
		case h.interfere <- struct{}{}:
			<-h.done
		case <-ctx.Done():
			return replication.HookResult{}, ctx.Err()
		}
	}
	var have, add int
	if exists && !cur.Deleted {
		if err := json.Unmarshal(cur.Value, &have); err != nil {
			return replication.HookResult{}, err
		}
	}
	if err := json.Unmarshal(p.Value, &add); err != nil {
		return replication.HookResult{}, err
	}
	merged, _ := json.Marshal(have + add)
	return replication.Merge(merged), nil
}

func (h *counterHook) timesAsked(op string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.asked[op]
}

// TestHookAnswerIsReaskedWhenTheKeyChanged: the hook answers at the edge,
// against the committed record; when another write changes the key before
// the answer is carried out, the edge asks again, and the merge that lands
// includes the other write. A key that keeps changing is decided by
// last-writer-wins after replication.MaxHookAttempts.
func TestHookAnswerIsReaskedWhenTheKeyChanged(t *testing.T) {
	h := &counterHook{interfere: make(chan struct{}), done: make(chan struct{}), asked: map[string]int{}}
	ts := startServer(t, server.Config{
		Policies: replication.Config{"counters": syncproto.PolicyHook},
		Hook:     h.hook, HookTimeout: time.Minute,
	})
	phone, phoneClock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	laptop, laptopClock := session(t, ts, ts.Member(t, "acme", "laptop"), "laptop")

	// interfere answers the hook's n requests with a laptop write of value.
	interfere := func(n int, value string) {
		for range n {
			select {
			case <-h.interfere:
			case <-time.After(ioTimeout):
				t.Fatal("the hook never asked")
			}
			requireApplied(t, laptop.push(newOpID(t), put(t, laptopClock, "counters", "c", value)))
			h.done <- struct{}{}
		}
	}

	// Once: the laptop adds 10 while the phone's answer (about v0) is in
	// the air.
	h.mu.Lock()
	h.interferences = 1
	h.mu.Unlock()
	m := put(t, phoneClock, "counters", "c", `1`)
	phone.send(&syncproto.Push{ID: "p1", Mutations: []syncproto.Mutation{m}})
	interfere(1, `10`)
	res := phone.pushResult("p1", 1)
	requireApplied(t, res)
	require.Equal(t, uint64(2), res[0].Version)
	require.Equal(t, 2, h.timesAsked(m.OpID), "the stale answer was asked again")
	page := phone.pull("q1", 0)
	require.JSONEq(t, `11`, string(page.Entries[len(page.Entries)-1].Value), "the merge includes the other write")

	// Always: after MaxHookAttempts answers that were stale, LWW decides.
	h.mu.Lock()
	h.interferences = replication.MaxHookAttempts
	h.mu.Unlock()
	fallbacks := ts.Metric(t, "syncd_conflict_hook_fallbacks_total")
	m = put(t, phoneClock, "counters", "c", `1`)
	phone.send(&syncproto.Push{ID: "p2", Mutations: []syncproto.Mutation{m}})
	interfere(replication.MaxHookAttempts, `100`)
	res = phone.pushResult("p2", 1)
	require.Equal(t, replication.MaxHookAttempts, h.timesAsked(m.OpID))
	// The phone stamped its write before the laptop's three: it loses.
	require.Equal(t, syncproto.StatusSuperseded, res[0].Status)
	require.Equal(t, replication.ReasonOlderHLC, res[0].Message)
	require.JSONEq(t, `311`, string(res[0].Winner.Value), "the laptop's merges stand")
	require.Equal(t, "1", ts.Metric(t, "syncd_conflict_hook_fallbacks_total"), "the fallback is counted (was %s)", fallbacks)
}
