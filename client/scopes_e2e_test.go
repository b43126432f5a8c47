package client_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// scopedSyncd starts syncd declaring scope project over tasks and the
// membership model members by project_id (syncd --scope
// project=tasks.project_id,members.project_id --membership
// project=members:user).
func scopedSyncd(t *testing.T) *syncd {
	t.Helper()
	sc := &replication.Scopes{}
	require.NoError(t, sc.Set("project=tasks.project_id,members.project_id"))
	require.NoError(t, sc.SetMembership("project=members:user"))
	return startSyncd(t, server.Config{Scopes: sc})
}

// scopedDevice opens a device of user whose token grants projects (nil:
// none but what membership rows grant).
func scopedDevice(t *testing.T, s *syncd, clientID, user string, projects []string, tweak func(*client.Config)) *device {
	t.Helper()
	p := auth.Principal{Tenant: tenant, ClientID: clientID, User: user, Read: []string{auth.Wildcard}, Write: []string{auth.Wildcard}}
	if projects != nil {
		p.Scopes = map[string][]string{"project": projects}
	}
	return openDevice(t, s, s.proxy(t), t.TempDir(), clientID, deviceOptions{token: s.Issue(t, p), tweak: tweak})
}

func task(project string, n int) string {
	return fmt.Sprintf(`{"project_id":%q,"n":%d}`, project, n)
}

// keysOf lists a model's keys in the device's replica.
func keysOf(t *testing.T, d *device, model string) []string {
	t.Helper()
	var keys []string
	for _, r := range d.list(t, model) {
		keys = append(keys, r.Key)
	}
	return keys
}

// waitKeys waits until the device's replica holds exactly keys of model.
func waitKeys(t *testing.T, d *device, model string, keys ...string) {
	t.Helper()
	require.Eventually(t, func() bool {
		got := keysOf(t, d, model)
		return fmt.Sprint(got) == fmt.Sprint(keys)
	}, waitFor, pollTick, "%s: %s keys, want %v (have %v)", d.id, model, keys, keysOf(t, d, model))
}

// waitScope is WaitScope bounded by waitFor.
func waitScope(d *device, scope, value string) error {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	return d.WaitScope(ctx, scope, value)
}

// Each device holds exactly the values it follows; adding a value
// backfills it without moving the cursor back, removing one evicts its
// rows (ChangeEvent.Evicted), and a row moved to a value the device does
// not follow leaves it.
func TestScopedDevicesHoldTheirValues(t *testing.T) {
	s := scopedSyncd(t)
	writer := scopedDevice(t, s, "writer", "w", []string{syncproto.AllValues}, nil)
	var ops []string
	for i, p := range []string{"p1", "p1", "p2", "p3"} {
		ops = append(ops, writer.put(t, "tasks", fmt.Sprintf("t%d", i), task(p, i)))
	}
	ops = append(ops, writer.put(t, "notes", "n", `{"x":1}`))
	writer.requireApplied(t, ops)

	a := scopedDevice(t, s, "phone-a", "a", []string{"p1", "p2"}, nil) // follows every grant
	b := scopedDevice(t, s, "phone-b", "b", []string{"p1", "p2"}, func(c *client.Config) { c.Scopes = syncproto.ScopeSet{"project": {"p1"}} })
	waitKeys(t, a, "tasks", "t0", "t1", "t2")
	waitKeys(t, b, "tasks", "t0", "t1")
	waitKeys(t, b, "notes", "n") // a model no scope covers is whole
	ctx := t.Context()
	require.NoError(t, waitScope(b, "project", "p1"))
	b.waitStatus(t, "p1 ready", func(st client.Status) bool {
		return fmt.Sprint(st.Scopes) == fmt.Sprint([]client.ScopeStatus{{Scope: "project", Value: "p1", State: client.ScopeReady}})
	})

	// b adds p2: backfilled, its cursor never back.
	before := b.status(t).Cursor
	events := b.Changes()
	defer events.Close()
	require.NoError(t, b.SetScopes(ctx, "project", "p1", "p2"))
	require.NoError(t, waitScope(b, "project", "p2"))
	waitKeys(t, b, "tasks", "t0", "t1", "t2")
	require.GreaterOrEqual(t, b.status(t).Cursor, before)

	// b drops p1: its rows leave, each an event with the reason.
	require.NoError(t, b.SetScopes(ctx, "project", "p2"))
	waitKeys(t, b, "tasks", "t2")
	evicted := map[string]string{}
	require.Eventually(t, func() bool {
		for {
			select {
			case ev := <-events.C:
				if ev.Evicted != "" {
					require.True(t, ev.Deleted)
					evicted[ev.Key] = ev.Evicted
				}
			default:
				return len(evicted) == 2
			}
		}
	}, waitFor, pollTick)
	require.Equal(t, map[string]string{"t0": syncproto.EvictUnsubscribed, "t1": syncproto.EvictUnsubscribed}, evicted)
	_, found, err := b.Get(ctx, "tasks", "t0")
	require.NoError(t, err)
	require.False(t, found, "Get of an evicted row says not found")

	// A row moved from p2 to p3 leaves a and b; one moved into p1 reaches a.
	writer.requireApplied(t, []string{writer.put(t, "tasks", "t2", task("p3", 9)), writer.put(t, "tasks", "t3", task("p1", 10))})
	waitKeys(t, a, "tasks", "t0", "t1", "t3")
	waitKeys(t, b, "tasks")

	// Undeclared scopes and ungranted values are refused, naming them.
	var se *client.ScopeError
	require.ErrorAs(t, b.SetScopes(ctx, "team", "x"), &se)
	require.Equal(t, client.ScopeUndeclared, se.Reason)
	require.ErrorAs(t, b.SetScopes(ctx, "project", "p3"), &se)
	require.Equal(t, client.ScopeError{Scope: "project", Value: "p3", Reason: syncproto.EvictNotGranted}, *se)
}

// A device offline while its membership is revoked and a row moves out of
// its value learns both on reconnect: the rows leave within one sync, and
// its queued writes to them are dead letters with forbidden_scope,
// requeueable, none lost.
func TestOfflineRevocationDeadLettersQueuedWrites(t *testing.T) {
	s := scopedSyncd(t)
	alice := scopedDevice(t, s, "alice-laptop", "alice", nil, nil)
	bob := scopedDevice(t, s, "bob-phone", "bob", nil, nil)
	ctx := t.Context()
	// alice founds p1 and shares it with bob.
	alice.requireApplied(t, []string{
		alice.put(t, "members", "p1/alice", `{"project_id":"p1","user":"alice"}`),
		alice.put(t, "tasks", "a", task("p1", 1)),
		alice.put(t, "tasks", "b", task("p1", 2)),
		alice.put(t, "members", "p1/bob", `{"project_id":"p1","user":"bob"}`),
	})
	waitKeys(t, bob, "tasks", "a", "b")
	require.NoError(t, waitScope(bob, "project", "p1"))

	bob.offline()
	bob.waitOffline(t)
	queued := bob.put(t, "tasks", "a", task("p1", 3))
	del, err := alice.Delete(ctx, "members", "p1/bob")
	require.NoError(t, err)
	alice.requireApplied(t, []string{del})

	bob.online()
	o := bob.await(t, queued)
	require.Equal(t, client.StatusDeadLettered, o.Status)
	require.Contains(t, o.Reason, string(syncproto.CodeForbiddenScope))
	waitKeys(t, bob, "tasks")
	bob.waitStatus(t, "p1 revoked", func(st client.Status) bool {
		return fmt.Sprint(st.Scopes) == fmt.Sprint([]client.ScopeStatus{{Scope: "project", Value: "p1", State: client.ScopeRevoked}})
	})
	var se *client.ScopeError
	require.ErrorAs(t, waitScope(bob, "project", "p1"), &se)
	require.Equal(t, syncproto.EvictRevoked, se.Reason)
	dead, err := bob.DeadLetters(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1, "the write is kept, requeueable")

	// Shared again, the dead letter requeued goes through.
	// (WaitScope answers revoked until bob's device hears of the share.)
	alice.requireApplied(t, []string{alice.put(t, "members", "p1/bob", `{"project_id":"p1","user":"bob"}`)})
	waitKeys(t, bob, "tasks", "a", "b")
	require.NoError(t, waitScope(bob, "project", "p1"))
	require.NoError(t, bob.RequeueDeadLetters(ctx, dead[0].ID))
	bob.waitSynced(t)
	require.Eventually(t, func() bool {
		rec, found, err := bob.Get(ctx, "tasks", "a")
		return err == nil && found && !rec.Pending && jsonEqual(rec.Value, []byte(task("p1", 3)))
	}, waitFor, pollTick)
}

// A device whose token granted every value of a scope, requesting every
// value, follows the scope whole: the server backfills nothing value by
// value, so the device holds values it never named (created after its
// snapshot, brought by the feed), which no eviction of named values
// reaches. When it comes back with a token of fewer values it resyncs,
// and holds only what the new token grants.
func TestNarrowedTokenOfAScopeFollowedWholeResyncs(t *testing.T) {
	s := scopedSyncd(t)
	writer := scopedDevice(t, s, "writer", "w", []string{syncproto.AllValues}, nil)
	writer.requireApplied(t, []string{writer.put(t, "tasks", "t1", task("p1", 1)), writer.put(t, "tasks", "t2", task("p2", 2))})
	dir := t.TempDir()
	open := func(projects ...string) *device {
		p := auth.Principal{Tenant: tenant, ClientID: "phone", User: "u", Read: []string{auth.Wildcard}, Write: []string{auth.Wildcard},
			Scopes: map[string][]string{"project": projects}}
		return openDevice(t, s, s.proxy(t), dir, "phone", deviceOptions{token: s.Issue(t, p)})
	}
	d := open(syncproto.AllValues)
	waitKeys(t, d, "tasks", "t1", "t2")
	writer.requireApplied(t, []string{writer.put(t, "tasks", "t3", task("p3", 3))})
	waitKeys(t, d, "tasks", "t1", "t2", "t3")
	require.NoError(t, d.Close())

	d = open("p1")
	waitKeys(t, d, "tasks", "t1")
	writer.requireApplied(t, []string{writer.put(t, "tasks", "t4", task("p3", 4)), writer.put(t, "tasks", "t5", task("p1", 5))})
	waitKeys(t, d, "tasks", "t1", "t5")
	require.Equal(t, []client.ScopeStatus{{Scope: "project", Value: "p1", State: client.ScopeReady}}, d.status(t).Scopes)
}
