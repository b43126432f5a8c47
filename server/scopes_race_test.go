package server_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// pushOn sends a push on c from a goroutine of its own and returns its
// results, or the error that ended the wait.
func pushOn(c *wsClient, id string, muts []syncproto.Mutation) ([]syncproto.Result, error) {
	if err := c.trySend(&syncproto.Push{ID: id, Mutations: muts}); err != nil {
		return nil, err
	}
	msg, err := c.tryRecv()
	if err != nil {
		return nil, err
	}
	pr, ok := msg.(*syncproto.PushResult)
	if !ok || pr.ID != id {
		return nil, fmt.Errorf("want the answer to %s, got %#v", id, msg)
	}
	return pr.Results, nil
}

// TestScopedRacesEndEqualToTheFilteredServer: seeded rounds, each racing
// two pushes on two connections, so that they often share a group
// commit: a membership grant of a value against a write to that value and
// a move of a row into or out of it; a revocation against a write to the
// value, while the device's own write to it is in flight. Every value has
// 1,200 rows, so a grant's backfill spans two pages while rows move. The
// device (membership grants only, requesting every value) checks every
// frame as the scale test does (nothing of a value at a seq it did not
// follow it, no backfill row twice) and ends equal to the server's records
// it follows at the head: nothing missing, nothing extra.
func TestScopedRacesEndEqualToTheFilteredServer(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { scopedRaceRun(t, seed, 25) })
	}
}

func scopedRaceRun(t *testing.T, seed uint64, rounds int) {
	const bulk = 6000
	rng := rand.New(rand.NewPCG(seed, 4))
	values := []string{"p0", "p1", "p2", "p3", "p4"}
	ts, owner := scopedServer(t, 0)
	r := &scaleRun{t: t, nodes: []*testServer{ts}, grants: grantLog{}, history: map[string][]scopeAt{}}
	oc, oclock := session(t, ts, owner, "owner")
	writer := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "writer", User: "owner", Read: []string{"*"}, Write: []string{"*"},
		Scopes: map[string][]string{"project": {"*"}}})
	wc, wclock := session(t, ts, writer, "writer")
	tasks := map[string]string{}
	record := func(muts []syncproto.Mutation, res []syncproto.Result) {
		require.Len(t, res, len(muts))
		r.wrote(muts, res)
		for i, m := range muts {
			if m.Model == "members" {
				v := struct{ User, Project_ID string }{User: "u1", Project_ID: strings.TrimPrefix(m.Key, "m-u1-")}
				if m.Op == syncproto.OpPut {
					require.NoError(t, json.Unmarshal(m.Value, &v))
				}
				r.grants[v.User+"/"+v.Project_ID] = append(r.grants[v.User+"/"+v.Project_ID], grantEvent{seq: res[i].Seq, held: m.Op == syncproto.OpPut})
			}
		}
	}
	for start := 0; start < bulk; start += 100 {
		var muts []syncproto.Mutation
		for i := start; i < start+100; i++ {
			key := fmt.Sprintf("bulk%04d", i)
			tasks[key] = values[i%len(values)]
			muts = append(muts, put(t, oclock, "tasks", key, fmt.Sprintf(`{"project_id":%q}`, tasks[key])))
		}
		res := oc.push(fmt.Sprint("bulk", start), muts...)
		requireApplied(t, res)
		record(muts, res)
	}

	d := &scaleDevice{name: "phone", user: "u1", wanted: syncproto.ScopeSet{"project": {"*"}}, clock: syncproto.NewClock("phone", nil),
		cursor: ts.head(t), replica: map[string]replicaRow{}, have: syncproto.ScopeSet{}, resume: map[string]string{}, pushes: map[string]uint64{}}
	r.connect(d, nil)
	t.Cleanup(func() {
		d.conn.CloseNow()
		<-d.done
	})
	own := map[string][]syncproto.Mutation{} // the device's pushes
	held := map[string]bool{}
	moveOf := func(value string) syncproto.Mutation {
		// A row moved into value, or out of it, at random.
		for {
			key := fmt.Sprintf("bulk%04d", rng.IntN(bulk))
			old := tasks[key]
			switch {
			case old == value:
				tasks[key] = values[(slices.Index(values, value)+1+rng.IntN(len(values)-1))%len(values)]
			case rng.IntN(2) == 0:
				tasks[key] = value
			default:
				continue
			}
			return put(t, wclock, "tasks", key, fmt.Sprintf(`{"project_id":%q,"moved":true}`, tasks[key]))
		}
	}
	for round := range rounds {
		value := values[rng.IntN(len(values))]
		var grant syncproto.Mutation
		key := "m-u1-" + value
		if held[value] {
			grant = syncproto.Mutation{OpID: newOpID(t), Model: "members", Key: key, Op: syncproto.OpDelete, HLC: oclock.Now()}
		} else {
			grant = put(t, oclock, "members", key, fmt.Sprintf(`{"user":"u1","project_id":%q}`, value))
		}
		held[value] = !held[value]
		writes := []syncproto.Mutation{put(t, wclock, "tasks", fmt.Sprintf("w%02d", rng.IntN(20)), fmt.Sprintf(`{"project_id":%q,"round":%d}`, value, round)), moveOf(value)}
		if !held[value] {
			// A revocation: the device's own write to the value is in
			// flight beside it.
			m := put(t, d.clock, "tasks", fmt.Sprintf("own%02d", rng.IntN(10)), fmt.Sprintf(`{"project_id":%q,"round":%d}`, value, round))
			id := fmt.Sprint("own", round)
			own[id] = []syncproto.Mutation{m}
			d.pushes[id] = ts.head(t)
			frame, err := syncproto.Encode(&syncproto.Push{ID: id, Mutations: own[id]})
			require.NoError(t, err)
			require.NoError(t, d.conn.Write(t.Context(), websocket.MessageText, frame))
		}
		var wg sync.WaitGroup
		var gres, wres []syncproto.Result
		var gerr, werr error
		wg.Add(2)
		go func() { defer wg.Done(); gres, gerr = pushOn(oc, fmt.Sprint("g", round), []syncproto.Mutation{grant}) }()
		go func() { defer wg.Done(); wres, werr = pushOn(wc, fmt.Sprint("w", round), writes) }()
		wg.Wait()
		require.NoError(t, gerr)
		require.NoError(t, werr)
		requireApplied(t, gres)
		requireApplied(t, wres)
		record([]syncproto.Mutation{grant}, gres)
		record(writes, wres)
	}
	// The device's own writes are answered; the history takes the applied.
	require.Eventually(t, func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		n := 0
		for _, m := range d.in {
			if _, ok := m.(*syncproto.PushResult); ok {
				n++
			}
		}
		return n == len(own) || d.err != nil
	}, 30*time.Second, 5*time.Millisecond, "the device's writes are answered")
	d.mu.Lock()
	var answers []*syncproto.PushResult
	for _, m := range d.in {
		if pr, ok := m.(*syncproto.PushResult); ok {
			answers = append(answers, pr)
		}
	}
	d.mu.Unlock()
	outcomes := map[string]int{}
	for _, pr := range answers {
		res := pr.Results[0]
		outcomes[string(res.Status)+" "+string(res.Code)]++
		require.True(t, res.Status == syncproto.StatusApplied || res.Code == syncproto.CodeForbiddenScope, "%+v", res)
	}
	for _, pr := range answers {
		r.wrote(own[pr.ID], pr.Results)
	}
	t.Logf("the device's writes: %v", outcomes)

	requireApplied(t, oc.push("end", put(t, oclock, "notes", "end", `{"n":1}`)))
	head := ts.head(t)
	require.Eventually(t, func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.top >= head || d.err != nil
	}, 30*time.Second, 5*time.Millisecond, "the device reaches the head %d", head)
	r.disconnect(d)

	_, recs := ts.Snapshot(t, owner)
	want := map[string]replicaRow{}
	for _, rec := range recs {
		var v struct{ Project_ID string }
		require.NoError(t, json.Unmarshal(rec.Value, &v))
		if rec.Model != "notes" && d.mayRead(r.grants, v.Project_ID, head) {
			want[rec.Model+"/"+rec.Key] = replicaRow{version: rec.Version, value: string(rec.Value), scope: v.Project_ID}
		}
	}
	got := map[string]replicaRow{}
	for k, row := range d.replica {
		if row.value != "" {
			got[k] = row
		}
	}
	require.Equal(t, want, got, "the device holds the server's records it follows")
	t.Logf("holds %v: %d rows", d.have, len(got))
}
