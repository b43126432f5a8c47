package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// scopedDevice is a device on a raw websocket whose every frame a reader
// goroutine keeps, for the checks after the writes.
type scopedDevice struct {
	name   string
	user   string
	token  syncproto.ScopeSet // its token's grants
	wanted syncproto.ScopeSet // its subscribe.scopes

	conn   *websocket.Conn
	clock  *syncproto.Clock
	pushes int // pushes it sent

	mu     sync.Mutex
	frames []syncproto.Message
	cursor uint64 // the greatest changes cursor read
	err    error
}

// read keeps every frame of conn until it fails (the test's end closes it).
func (d *scopedDevice) read(conn *websocket.Conn) {
	for {
		_, frame, err := conn.Read(context.Background())
		if err == nil {
			var msg syncproto.Message
			if msg, err = syncproto.Decode(frame); err == nil {
				d.mu.Lock()
				d.frames = append(d.frames, msg)
				if c, ok := msg.(*syncproto.Changes); ok {
					d.cursor = max(d.cursor, c.Cursor)
				}
				d.mu.Unlock()
				continue
			}
		}
		d.mu.Lock()
		d.err = err
		d.mu.Unlock()
		return
	}
}

// grantLog is the ground truth of membership grants: for each user and
// value, the seqs at which a membership row started or stopped granting it.
type grantLog map[string][]grantEvent // user/value -> events in seq order

type grantEvent struct {
	seq  uint64
	held bool
}

func (g grantLog) heldAt(user, value string, seq uint64) bool {
	held := false
	for _, e := range g[user+"/"+value] {
		if e.seq > seq {
			break
		}
		held = e.held
	}
	return held
}

// mayRead reports whether d may read value at seq: requested and granted
// (by its token, or by membership at that seq).
func (d *scopedDevice) mayRead(g grantLog, value string, seq uint64) bool {
	requested := d.wanted.Has("project", value)
	return requested && (d.token.Has("project", value) || g.heldAt(d.user, value, seq))
}

type replicaRow struct {
	version uint64
	value   string // "" for a tombstone or an evicted row
	scope   string
}

// TestScopedDevicesReceiveExactlyTheirValues: five scope values, devices
// with different token grants, membership grants and requests, and seeded
// random writes that move rows between values (rows being backfilled
// among them: each value holds 1,200 rows, more than a page) and change
// grants through membership rows, some in the same push as writes to the
// value they grant. Every frame each device reads is checked: no changes entry and no
// backfill row of a value it did not follow at that seq; its cursor never
// moves backwards. At the end each replica, built only from those frames
// (applied by version, evictions dropping rows), equals the server's
// records filtered by what the device follows at the head.
func TestScopedDevicesReceiveExactlyTheirValues(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed ", seed), func(sub *testing.T) {
			defer inheritMode(t, sub)()
			scopedNoLeakRun(sub, seed)
		})
	}
}

func scopedNoLeakRun(t *testing.T, seed uint64) {
	const writes, bulk = 300, 6000
	rng := rand.New(rand.NewPCG(seed, 21))
	values := []string{"p0", "p1", "p2", "p3", "p4"}
	ts, owner := scopedServer(t, 0)
	oc, oclock := session(t, ts, owner, "owner")

	grants := grantLog{}
	members := map[string]bool{} // live membership rows by key
	tasks := map[string]bool{}   // live task keys
	push := func(id string, muts []syncproto.Mutation) {
		res := oc.push(id, muts...)
		requireApplied(t, res)
		for i, m := range muts {
			if m.Model != "members" {
				continue
			}
			var v struct{ User, Project_ID string }
			if m.Op == syncproto.OpPut {
				require.NoError(t, json.Unmarshal(m.Value, &v))
			} else {
				fmt.Sscanf(m.Key, "m-%2s-%2s", &v.User, &v.Project_ID)
			}
			grants[v.User+"/"+v.Project_ID] = append(grants[v.User+"/"+v.Project_ID], grantEvent{seq: res[i].Seq, held: m.Op == syncproto.OpPut})
		}
	}
	member := func(user, value string, held bool) syncproto.Mutation {
		key := "m-" + user + "-" + value
		members[key] = held
		if held {
			return put(t, oclock, "members", key, fmt.Sprintf(`{"user":%q,"project_id":%q}`, user, value))
		}
		return syncproto.Mutation{OpID: newOpID(t), Model: "members", Key: key, Op: syncproto.OpDelete, HLC: oclock.Now()}
	}
	task := func(rng *rand.Rand) syncproto.Mutation {
		key := fmt.Sprintf("t%02d", rng.IntN(40))
		if rng.IntN(3) == 0 {
			key = fmt.Sprintf("bulk%04d", rng.IntN(bulk)) // a row a backfill may be sending
		}
		if tasks[key] && rng.IntN(5) == 0 {
			tasks[key] = false
			return syncproto.Mutation{OpID: newOpID(t), Model: "tasks", Key: key, Op: syncproto.OpDelete, HLC: oclock.Now()}
		}
		tasks[key] = true
		return put(t, oclock, "tasks", key, fmt.Sprintf(`{"project_id":%q,"n":%d}`, values[rng.IntN(len(values))], rng.IntN(1000)))
	}

	// Before the devices: rows in every value, enough that backfills take
	// several pages while the writes below move their rows; u1 a member of
	// p1 and p2.
	for start := 0; start < bulk; start += 100 {
		var muts []syncproto.Mutation
		for i := start; i < min(bulk, start+100); i++ {
			key := fmt.Sprintf("bulk%04d", i)
			tasks[key] = true
			muts = append(muts, put(t, oclock, "tasks", key, fmt.Sprintf(`{"project_id":%q}`, values[i%len(values)])))
		}
		push(fmt.Sprint("bulk", start), muts)
	}
	var first []syncproto.Mutation
	for range 30 {
		first = append(first, task(rng))
	}
	first = append(first, member("u1", "p1", true), member("u1", "p2", true))
	push("setup", first)
	head := ts.head(t)

	devices := []*scopedDevice{
		{name: "d0", user: "u0", token: syncproto.ScopeSet{"project": {"p0", "p1"}}, wanted: syncproto.ScopeSet{"project": {"p0", "p1"}}},
		{name: "d1", user: "u1", wanted: syncproto.ScopeSet{"project": {"*"}}},
		{name: "d2", user: "u2", token: syncproto.ScopeSet{"project": {"p3", "p4"}}, wanted: syncproto.ScopeSet{"project": {"p1", "p3"}}},
	}
	var readers sync.WaitGroup
	var conns []*websocket.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.CloseNow()
		}
		readers.Wait()
	})
	for _, d := range devices {
		tok := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: d.name, User: d.user, Read: []string{"*"}, Write: []string{"*"}, Scopes: d.token})
		c, clock := session(t, ts, tok, d.name)
		d.conn, d.clock = c.conn, clock
		c.send(&syncproto.Subscribe{ID: "s-" + d.name, Cursor: head, Scopes: d.wanted})
		readers.Add(1)
		go func() {
			defer readers.Done()
			d.read(c.conn)
		}()
		conns = append(conns, c.conn)
	}

	for i := 0; i < writes; {
		var muts []syncproto.Mutation
		for range 1 + rng.IntN(4) {
			if rng.IntN(6) == 0 {
				user := []string{"u1", "u2"}[rng.IntN(2)]
				value := values[rng.IntN(len(values))]
				muts = append(muts, member(user, value, !members["m-"+user+"-"+value]))
			} else {
				muts = append(muts, task(rng))
			}
			i++
		}
		push(fmt.Sprint("w", i), muts)
		// d1 writes too, to values it may hold or may just have lost: a
		// write in flight while its grant changes.
		if d1 := devices[1]; rng.IntN(4) == 0 {
			m := put(t, d1.clock, "tasks", fmt.Sprintf("d1-%02d", rng.IntN(10)), fmt.Sprintf(`{"project_id":%q}`, values[rng.IntN(len(values))]))
			frame, err := syncproto.Encode(&syncproto.Push{ID: fmt.Sprint("d", i), Mutations: []syncproto.Mutation{m}})
			require.NoError(t, err)
			require.NoError(t, d1.conn.Write(t.Context(), websocket.MessageText, frame))
			d1.pushes++
		}
	}
	require.Eventually(t, func() bool {
		d1 := devices[1]
		d1.mu.Lock()
		defer d1.mu.Unlock()
		n := 0
		for _, m := range d1.frames {
			if _, ok := m.(*syncproto.PushResult); ok {
				n++
			}
		}
		return n == d1.pushes
	}, 20*time.Second, 5*time.Millisecond, "d1's pushes are answered")
	// A row no scope covers reaches every device: the feeds' last entry.
	push("end", []syncproto.Mutation{put(t, oclock, "notes", "end", `{"n":1}`)})
	head = ts.head(t)
	for _, d := range devices {
		require.Eventually(t, func() bool {
			d.mu.Lock()
			defer d.mu.Unlock()
			return d.cursor >= head || d.err != nil
		}, 20*time.Second, 5*time.Millisecond, "%s reaches the head %d", d.name, head)
	}

	// The server's records at head, by key.
	server := scopedRecords(t, ts, owner, head)

	for _, d := range devices {
		d.mu.Lock()
		frames, err := slices.Clone(d.frames), d.err
		d.mu.Unlock()
		require.NoError(t, err, "%s's connection", d.name)
		replica := map[string]replicaRow{}
		apply := func(e syncproto.Change) {
			k := e.Model + "/" + e.Key
			if replica[k].version >= e.Version {
				return
			}
			switch e.Op {
			case syncproto.OpPut:
				replica[k] = replicaRow{version: e.Version, value: string(e.Value), scope: e.ScopeValue}
			case syncproto.OpDelete:
				replica[k] = replicaRow{version: e.Version, scope: e.ScopeValue}
			default: // evict: the device no longer holds the row
				delete(replica, k)
			}
		}
		var cursor uint64
		answers, outcomes := 0, map[string]int{}
		for _, msg := range frames {
			switch m := msg.(type) {
			case *syncproto.Changes:
				require.GreaterOrEqual(t, m.Cursor, cursor, "%s: the cursor never moves backwards", d.name)
				cursor = m.Cursor
				for _, e := range m.Entries {
					if e.Model == "notes" {
						continue
					}
					if e.Op != syncproto.OpEvict {
						// The write that revokes a value is the last of it
						// a device sees: followed before it or after it.
						require.True(t, d.mayRead(grants, e.ScopeValue, e.Seq) || d.mayRead(grants, e.ScopeValue, e.Seq-1),
							"%s: entry %d %s/%s of %q, not followed at its seq", d.name, e.Seq, e.Model, e.Key, e.ScopeValue)
					}
					apply(e)
				}
				for _, ev := range m.Evictions {
					for k, row := range replica {
						if row.scope == ev.Value {
							delete(replica, k)
						}
					}
				}
			case *syncproto.PushResult:
				answers++
				for _, r := range m.Results {
					outcomes[string(r.Status)+" "+string(r.Code)]++
					switch {
					case r.Status == syncproto.StatusApplied || r.Status == syncproto.StatusSuperseded:
					case r.Status == syncproto.StatusRejected && r.Code == syncproto.CodeForbiddenScope:
					default:
						t.Fatalf("%s: result %+v", d.name, r)
					}
					if w := r.Winner; w != nil && len(w.Value) > 0 {
						var v struct{ Project_ID string }
						require.NoError(t, json.Unmarshal(w.Value, &v))
						require.True(t, d.wanted.Has("project", v.Project_ID), "%s: a winner of %q", d.name, v.Project_ID)
					}
				}
			case *syncproto.Backfill:
				require.True(t, d.mayRead(grants, m.Value, m.At), "%s: backfill of %q at %d, not followed then", d.name, m.Value, m.At)
				for _, e := range m.Entries {
					require.Equal(t, m.Value, e.ScopeValue)
					apply(e)
				}
			default:
				t.Fatalf("%s: unexpected frame %#v", d.name, msg)
			}
		}
		require.Equal(t, d.pushes, answers, "%s: every push answered", d.name)
		if answers > 0 {
			t.Logf("%s's writes: %v", d.name, outcomes)
		}
		want := map[string]replicaRow{}
		for k, row := range server {
			if d.mayRead(grants, row.scope, head) {
				want[k] = row
			}
		}
		got := map[string]replicaRow{}
		for k, row := range replica {
			if row.value != "" {
				got[k] = row
			}
		}
		require.Equal(t, want, got, "%s's replica is the server's records it follows", d.name)
	}
}

// scopedRecords is the server's records of the scoped models (every model
// but notes) at the head of a snapshot read with owner's token, by
// model/key; the snapshot's head must be head.
func scopedRecords(t *testing.T, ts *testServer, owner string, head uint64) map[string]replicaRow {
	t.Helper()
	snapHead, recs := ts.Snapshot(t, owner)
	require.Equal(t, head, snapHead)
	server := map[string]replicaRow{}
	for _, rec := range recs {
		if rec.Model == "notes" {
			continue
		}
		var v struct{ Project_ID string }
		require.NoError(t, json.Unmarshal(rec.Value, &v))
		server[rec.Model+"/"+rec.Key] = replicaRow{version: rec.Version, value: string(rec.Value), scope: v.Project_ID}
	}
	return server
}
