package client_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
)

// Dead letters are listed, requeued and purged through the Client, without
// reaching into the queue.
func TestDeadLettersThroughTheClient(t *testing.T) {
	s := startSyncd(t, server.Config{})
	tok := s.tokenFor(t, auth.Principal{Tenant: tenant, ClientID: "phone-1", Read: []string{auth.Wildcard}, Write: []string{"notes"}})
	d := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-1", deviceOptions{token: tok})
	ctx := t.Context()
	a := d.put(t, "secret", "a", `{"n":1}`)
	b := d.put(t, "secret", "b", `{"n":2}`)
	require.Equal(t, client.StatusDeadLettered, d.await(t, a).Status)
	require.Equal(t, client.StatusDeadLettered, d.await(t, b).Status)
	// The outcome is recorded before the item moves to the dead-letter store.
	d.waitStatus(t, "two dead letters", func(st client.Status) bool { return st.DeadLetters == 2 })

	dead, err := d.DeadLetters(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 2)
	byOp := map[string]client.DeadLetter{}
	for _, dl := range dead {
		byOp[dl.Mutation.OpID] = dl
		require.Contains(t, dl.Reason, "forbidden_model")
	}

	require.NoError(t, d.PurgeDeadLetters(ctx, byOp[b].ID))
	require.NoError(t, d.RequeueDeadLetters(ctx, byOp[a].ID))
	// Still forbidden: decided anew, dead-lettered again at its first
	// refusal (a permanent refusal is not retried).
	o := d.await(t, a)
	require.Equal(t, client.StatusDeadLettered, o.Status)
	d.waitStatus(t, "dead-lettered again", func(st client.Status) bool { return st.DeadLetters == 1 && st.Pending == 0 })
	dead, err = d.DeadLetters(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1, "the purged one is gone")
	require.Equal(t, a, dead[0].Mutation.OpID)
	require.Equal(t, 1, dead[0].Attempts)
}
