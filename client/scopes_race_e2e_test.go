package client_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/syncproto"
)

// A device's own write to a value it is granted but does not follow is
// applied on the server and not kept on the device; when the device then
// adds that value, the backfill brings the row (the write's own op id and
// version) and it is there when WaitScope returns. The settled write once
// marked the row as already applied (an echo), so the backfill's copy was
// skipped and the row stayed missing when the device's cursor was past
// the write (the feed does not send it again).
func TestOwnWriteOutsideTheRequestArrivesWithItsBackfill(t *testing.T) {
	s := scopedSyncd(t)
	d := scopedDevice(t, s, "phone", "u", []string{"p1", "p2", "p3", "p4"}, func(c *client.Config) { c.Scopes = syncproto.ScopeSet{"project": {"p1"}} })
	ctx := t.Context()
	require.NoError(t, waitScope(d, "project", "p1"))
	want := []string{}
	for i, value := range []string{"p2", "p3", "p4"} {
		// Its own write to value, and the write of another key of value
		// by the same device after it, both outside its request.
		key := fmt.Sprintf("own-%d", i)
		d.requireApplied(t, []string{d.put(t, "tasks", key, task(value, i)), d.put(t, "tasks", key+"b", task(value, i))})
		rec, found, err := d.Get(ctx, "tasks", key)
		require.NoError(t, err)
		require.False(t, found, "%s is not kept while %s is not followed (%+v)", key, value, rec)
		// A write to p1 moves the device's cursor past its own writes:
		// the new subscription's feed does not send them again, only the
		// backfill does.
		mark := d.put(t, "tasks", fmt.Sprintf("mark-%d", i), task("p1", i))
		seq := d.await(t, mark).Seq
		d.waitStatus(t, "cursor past its writes", func(st client.Status) bool { return st.Cursor >= seq })

		following := []string{"p1"}
		for _, v := range []string{"p2", "p3", "p4"}[:i+1] {
			following = append(following, v)
		}
		require.NoError(t, d.SetScopes(ctx, "project", following...))
		require.NoError(t, waitScope(d, "project", value))
		want = append(want, fmt.Sprintf("mark-%d", i), key, key+"b")
		slices.Sort(want)
		require.Equal(t, want, keysOf(t, d, "tasks"), "when WaitScope(%s) returns", value)
		for _, k := range []string{key, key + "b"} {
			rec, found, err := d.Get(ctx, "tasks", k)
			require.NoError(t, err)
			require.True(t, found)
			require.False(t, rec.Pending)
			require.True(t, jsonEqual(rec.Value, []byte(task(value, i))), "%s: %s", k, rec.Value)
		}
	}
}
