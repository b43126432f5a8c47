package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/soak/faultproxy"
	"github.com/syncd-dev/syncd/syncproto"
)

// Writes made while the path is dead (first silently, then known offline)
// are all applied exactly once when it comes back; reads see them all along.
func TestOfflineWritesAppliedExactlyOnce(t *testing.T) {
	t.Parallel() // mostly waits out probe timeouts
	s := startSyncd(t, server.Config{})
	p := s.proxy(t)
	d := openDevice(t, s, p, t.TempDir(), "phone-1", deviceOptions{fileQueue: true})
	d.waitStatus(t, "connected", func(st client.Status) bool { return st.Connected })

	// The path dies silently: the bound connection and the probes go quiet,
	// with no error, while the client still believes it is connected. The
	// first writes are pushed into the silence.
	p.SetMode(faultproxy.Blackhole)
	want := map[string]string{}
	var ops []string
	write := func(i int) {
		key, value := fmt.Sprintf("k%02d", i%40), fmt.Sprintf(`{"n":%d}`, i)
		ops = append(ops, d.put(t, "notes", key, value))
		want[key] = value
	}
	for i := range 60 { // keys k00..k19 are written twice
		write(i)
	}
	del, err := d.Delete(t.Context(), "notes", "k00")
	require.NoError(t, err)
	ops = append(ops, del)
	delete(want, "k00")

	d.waitOffline(t)
	for i := 60; i < 80; i++ { // written while known offline
		write(i)
	}

	require.Equal(t, len(ops), d.status(t).Pending)
	for _, it := range d.queued(t) {
		require.Zero(t, it.Attempts, "a write pushed into a dead path was charged an attempt")
	}
	require.Empty(t, s.oplog(t), "nothing crossed the dead path")
	rec, found, err := d.Get(t.Context(), "notes", "k05")
	require.NoError(t, err)
	require.True(t, found)
	require.True(t, rec.Pending)
	require.JSONEq(t, want["k05"], string(rec.Value), "the newest of two offline writes is read")
	_, found, err = d.Get(t.Context(), "notes", "k00")
	require.NoError(t, err)
	require.False(t, found, "an offline delete hides the key")

	p.SetMode(faultproxy.Pass)
	d.waitSynced(t)
	d.requireApplied(t, ops)
	s.requireAppliedOnce(t, ops)
	require.Empty(t, d.queued(t))
	require.Eventually(t, func() bool { return d.convergesWithServer(t, s, "notes") }, waitFor, pollTick)
	d.requireMatchesServer(t, s, "notes")
	for _, rec := range d.list(t, "notes") {
		require.JSONEq(t, want[rec.Key], string(rec.Value), "key %s", rec.Key)
	}
	require.Len(t, d.list(t, "notes"), len(want))
}

// fillQueue enqueues n puts of new keys through the queue's own API, as the
// client's Put would have (op id as the idempotency key, stamped by a clock
// of clientID), and returns their op ids in order.
func fillQueue(t testing.TB, q offlinequeue.Queue, clientID, model string, n int) []string {
	t.Helper()
	clock := syncproto.NewClock(clientID, time.Now)
	ops := make([]string, n)
	for i := range n {
		op, err := syncproto.NewOpID()
		require.NoError(t, err)
		m := syncproto.Mutation{OpID: op, Model: model, Key: fmt.Sprintf("k%05d", i), Op: syncproto.OpPut,
			Value: json.RawMessage(fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i, strings.Repeat("x", 64))), HLC: clock.Now()}
		payload, err := json.Marshal(m)
		require.NoError(t, err)
		_, err = q.Enqueue(t.Context(), payload, op)
		require.NoError(t, err)
		ops[i] = op
	}
	return ops
}

// The network drops while a replay of a deep queue has several batches in
// flight: the writes whose answers arrived are done with their outcomes, the
// rest stay queued with no attempt charged, and after recovery every write
// is applied exactly once.
func TestNetworkDropMidReplay(t *testing.T) {
	const n = 3 * syncproto.MaxBatch // three pushes
	s := startSyncd(t, server.Config{})
	p := s.proxy(t)
	p.SetMode(faultproxy.Refuse)
	dir := t.TempDir()
	q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{Synchronous: offlinequeue.SyncNormal})
	require.NoError(t, err)
	ops := fillQueue(t, q, "phone-1", "notes", n)
	d := openDevice(t, s, p, dir, "phone-1", deviceOptions{queue: q, tweak: func(c *client.Config) { c.InFlight = 2 }})
	require.Equal(t, n, d.status(t).Pending)

	// A slow link keeps the replay going long enough to cut it in the
	// middle: the network drops as soon as the first write is decided,
	// while the later pushes are still on their way.
	p.SetThrottle(128 << 10)
	p.SetMode(faultproxy.Pass)
	d.waitStatus(t, "first write decided", func(st client.Status) bool { return st.Pending < n })
	d.offline()
	p.SetThrottle(0)
	d.waitOffline(t)
	// The interrupted pass has acted on every answer that arrived once it
	// is counted as failed.
	require.Eventually(t, func() bool {
		return metric(t, d.registry, "syncd_client_replays_total", "result=failed") >= 1
	}, waitFor, pollTick, "the interrupted replay pass never ended")

	queued := map[string]bool{}
	for _, it := range d.queued(t) {
		require.Zero(t, it.Attempts, "an undelivered write was charged an attempt")
		queued[queuedMutation(t, it).OpID] = true
	}
	require.NotEmpty(t, queued, "the replay finished before the drop; the test cut nothing")
	require.Less(t, len(queued), n)
	onServer := s.oplogCounts(t)
	ackLost := 0
	for _, op := range ops {
		o, decided, err := d.Lookup(t.Context(), op)
		require.NoError(t, err)
		require.Equal(t, !queued[op], decided, "op %s: queued and decided at once, or neither", op)
		if decided {
			require.Equal(t, client.StatusApplied, o.Status)
			require.Equal(t, 1, onServer[op], "decided op %s is in the oplog once", op)
		} else if onServer[op] > 0 {
			ackLost++ // committed, but the answer was lost with the connection
		}
	}
	t.Logf("at the drop: %d of %d decided, %d committed without the answer arriving", n-len(queued), n, ackLost)

	d.online()
	d.waitSynced(t)
	d.requireApplied(t, ops)
	s.requireAppliedOnce(t, ops)
	require.Empty(t, d.queued(t))
	// The writes committed without their answer arriving are resent and
	// answered from the ledger (more may have been committed after the
	// oplog was read, by pushes the server had already received).
	dups := int(metric(t, s.Registry, "syncd_mutations_total", "status=duplicate"))
	require.GreaterOrEqual(t, dups, ackLost)
	require.LessOrEqual(t, dups, len(queued))
}

// A write the server refuses for good (forbidden_model) is dead-lettered
// with the server's reason at its first refusal, charged one attempt, while
// the writes queued behind it are applied; one Sync settles them all, and
// the outcome survives a restart. (Issue 10 item 3: permanent refusals
// fail fast; this replaced the five-attempt test of transient retries.)
func TestPoisonWriteDeadLetteredAtFirstRefusal(t *testing.T) {
	s := startSyncd(t, server.Config{})
	p := s.proxy(t)
	dir := t.TempDir()
	// The token may write notes but not secret: every write to secret is
	// rejected with forbidden_model. The server declares no models, so the
	// welcome cannot tell the client beforehand: the write is queued.
	tok := s.Issue(t, auth.Principal{Tenant: tenant, ClientID: "phone-1", Read: []string{auth.Wildcard}, Write: []string{"notes"}})
	// No retry timer fires during the test.
	noTimer := func(c *client.Config) { c.RetryInterval, c.MaxRetryInterval = time.Hour, time.Hour }
	d := openDevice(t, s, p, dir, "phone-1", deviceOptions{token: tok, tweak: noTimer})
	d.offline()
	d.waitOffline(t)
	poison := d.put(t, "secret", "s1", `{"pin":1234}`)
	behind := []string{d.put(t, "notes", "a", `{"n":1}`), d.put(t, "notes", "b", `{"n":2}`)}

	d.online()
	d.waitStatus(t, "connected", func(st client.Status) bool { return st.Connected })
	require.NoError(t, d.Sync(t.Context()))
	d.requireApplied(t, behind)
	o, decided, err := d.Lookup(t.Context(), poison)
	require.NoError(t, err)
	require.True(t, decided, "one Sync settles the poison write too")
	require.Equal(t, client.StatusDeadLettered, o.Status)
	require.Contains(t, o.Reason, string(syncproto.CodeForbiddenModel))

	// A write queued behind the dead letter is applied.
	op := d.put(t, "notes", "after", `{"n":3}`)
	require.NoError(t, d.Sync(t.Context()))
	after, decided, err := d.Lookup(t.Context(), op)
	require.NoError(t, err)
	require.True(t, decided, "one Sync settles a new write")
	require.Equal(t, client.StatusApplied, after.Status)
	behind = append(behind, op)

	dead, err := d.queue.DeadLetters(t.Context(), 0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, poison, queuedMutation(t, dead[0].Item).OpID)
	require.Equal(t, offlinequeue.Attempts(1), dead[0].Attempts, "charged its one refusal")
	require.Equal(t, o.Reason, dead[0].Reason)
	st := d.status(t)
	require.Equal(t, 1, st.DeadLetters)
	require.Zero(t, st.Pending)
	require.Equal(t, float64(1), metric(t, s.Registry, "syncd_mutations_total", "status=rejected"),
		"the server refused the poison exactly once")
	s.requireAppliedOnce(t, behind)
	_, found, err := d.Get(t.Context(), "secret", "s1")
	require.NoError(t, err)
	require.False(t, found, "a dead-lettered write leaves the replica")

	// The outcomes are durable: a restarted client with no network answers
	// Await from disk.
	require.NoError(t, d.Close())
	d.offline()
	d = openDevice(t, s, p, dir, "phone-1", deviceOptions{token: tok, tweak: noTimer})
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	again, err := d.Await(ctx, poison)
	require.NoError(t, err)
	require.Equal(t, o.Status, again.Status)
	require.Equal(t, o.Reason, again.Reason)
	for _, op := range behind {
		got, err := d.Await(ctx, op)
		require.NoError(t, err)
		require.Equal(t, client.StatusApplied, got.Status)
	}
}

// Writes with large values, made offline, add up to more than one frame
// may carry: the replay splits them over several pushes, and all apply.
func TestLargeWritesReplayWithinFrameLimit(t *testing.T) {
	s := startSyncd(t, server.Config{})
	p := s.proxy(t)
	d := openDevice(t, s, p, t.TempDir(), "phone-1", deviceOptions{})
	d.offline()
	big := fmt.Sprintf(`{"blob":%q}`, strings.Repeat("x", syncproto.MaxPayloadBytes-64))
	n := syncproto.MaxFrameBytes/syncproto.MaxPayloadBytes + 1 // more than one frame holds
	var ops []string
	for i := range n {
		ops = append(ops, d.put(t, "blobs", fmt.Sprintf("b%02d", i), big))
	}
	d.online()
	d.waitSynced(t)
	d.requireApplied(t, ops)
	require.Equal(t, float64(n), metric(t, s.Registry, "syncd_mutations_total", "status=applied"))
	require.Greater(t, metric(t, s.Registry, "syncd_pushes_total"), float64(1), "split over several pushes")
}

// A device whose clock runs far ahead of the server's has its writes
// refused for clock skew: it corrects its clock from the server's,
// re-stamps them and resends them, and they apply.
func TestClockSkewRestamped(t *testing.T) {
	s := startSyncd(t, server.Config{MaxClockSkew: time.Minute})
	p := s.proxy(t)
	ahead := func() time.Time { return time.Now().Add(time.Hour) }
	d := openDevice(t, s, p, t.TempDir(), "phone-1", deviceOptions{tweak: func(c *client.Config) { c.Now = ahead }})
	d.offline()
	d.waitOffline(t)
	ops := []string{d.put(t, "notes", "a", `{"n":1}`), d.put(t, "notes", "b", `{"n":2}`)}
	for _, it := range d.queued(t) {
		require.Greater(t, queuedMutation(t, it).HLC.Wall, time.Now().Add(time.Minute).UnixMilli(), "stamped by the fast clock")
	}

	d.online()
	d.waitSynced(t)
	d.requireApplied(t, ops)
	s.requireAppliedOnce(t, ops)
	require.Equal(t, float64(len(ops)), metric(t, s.Registry, "syncd_mutations_total", "status=rejected"), "each was refused once")
	for _, e := range s.oplog(t) {
		require.Less(t, e.HLC.Wall, time.Now().Add(time.Minute).UnixMilli(), "applied with a corrected stamp")
	}
	require.Zero(t, d.status(t).DeadLetters)
}
