package cluster

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStatusShowsTheLastChecks: a comparison with peers becomes the last
// digest check (and, at a records check, the last records check) of the
// node's status; a verdict without this node's digest or without a peer
// changes nothing; the fencing token shows while the lease is held.
func TestStatusShowsTheLastChecks(t *testing.T) {
	now := time.Date(2026, 12, 4, 20, 0, 0, 0, time.UTC)
	c := &Cluster{opts: Options{Node: "node-1", Now: func() time.Time { return now }}}
	st := c.Status()
	require.Nil(t, st.LastDigestCheck)
	require.Zero(t, st.LeaseToken)

	c.noteCheck(verdict{seq: 1000, agree: []string{"node-2"}}) // not this node's digest
	c.noteCheck(verdict{seq: 1000, mine: true})                // no peer yet
	require.Nil(t, c.Status().LastDigestCheck)

	c.noteCheck(verdict{seq: 1000, mine: true, agree: []string{"node-2", "node-3"}})
	st = c.Status()
	require.Equal(t, &Check{At: now, Seq: 1000, Result: "match", Agree: []string{"node-2", "node-3"}}, st.LastDigestCheck)
	require.Nil(t, st.LastRecordsCheck)

	c.noteCheck(verdict{seq: 2000, mine: true, records: true, agree: []string{"node-2"}, disagree: []string{"node-3"}})
	st = c.Status()
	want := &Check{At: now, Seq: 2000, Result: "mismatch", Agree: []string{"node-2"}, Disagree: []string{"node-3"}}
	require.Equal(t, want, st.LastDigestCheck)
	require.Equal(t, want, st.LastRecordsCheck)

	c.leaseToken.Store(42)
	c.leaseHeld.Store(true)
	require.Equal(t, uint64(42), c.Status().LeaseToken)
	c.leaseHeld.Store(false)
	require.Zero(t, c.Status().LeaseToken, "a token shows only while held")
}
