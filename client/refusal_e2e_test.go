package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
)

// refusalDeadline is how soon a refused session must be reported (the
// issue's "fail fast"): the first reconnect attempt is refused, and Sync
// says so from then on.
const refusalDeadline = 2 * time.Second

// waitRefused polls Sync until it reports something other than offline,
// for at most refusalDeadline, and returns that.
func waitRefused(t *testing.T, d *device) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), refusalDeadline)
	defer cancel()
	for {
		err := d.Sync(ctx)
		if !errors.Is(err, client.ErrOffline) {
			return err
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Sync still says offline after %s", refusalDeadline)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A bad token and a token of another client id are reported as what they
// are, by Sync, Await and Status, instead of "offline".
func TestRefusedSessionIsReported(t *testing.T) {
	s := startSyncd(t, server.Config{})
	for _, tc := range []struct {
		name  string
		token func() string
		want  error
	}{
		{"bad token", func() string { return "not-a-token" }, client.ErrUnauthorized},
		{"wrong client id", func() string { return s.token(t, "phone-2") }, client.ErrWrongClientID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-1", deviceOptions{token: tc.token()})
			op := d.put(t, "notes", "a", `{"n":1}`)
			err := waitRefused(t, d)
			require.ErrorIs(t, err, tc.want)
			var re *client.RefusedError
			require.ErrorAs(t, err, &re)
			require.False(t, re.Transient())

			_, err = d.Await(t.Context(), op)
			require.ErrorIs(t, err, tc.want, "Await reports the refusal instead of waiting")
			st := d.status(t)
			require.Equal(t, client.StateRefused, st.State)
			require.ErrorIs(t, st.LastError, tc.want)
			require.Equal(t, 1, st.Pending, "the write stays queued")
		})
	}
}

// A device whose token is revoked while it is connected is cut by the
// server and told why: unauthorized, not offline, and its writes stay
// queued.
func TestRevokedDeviceIsReported(t *testing.T) {
	s := startSyncd(t, server.Config{TokenRecheck: 50 * time.Millisecond})
	d := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-1", deviceOptions{})
	d.await(t, d.put(t, "notes", "a", `{"n":1}`))

	id, _, ok := strings.Cut(strings.TrimPrefix(d.token, "sdk_"), "_")
	require.True(t, ok, "token %q", d.token)
	require.NoError(t, auth.Revoke(s.TokenPath, id))
	// The server rechecks tokens every 50 ms here; within the deadline the
	// session is cut and the device reports why.
	require.Eventually(t, func() bool {
		st := d.status(t)
		return st.State == client.StateRefused && errors.Is(st.LastError, client.ErrUnauthorized)
	}, refusalDeadline, pollTick, "the device reports the revocation")

	op := d.put(t, "notes", "b", `{"n":2}`)
	require.ErrorIs(t, d.Sync(t.Context()), client.ErrUnauthorized)
	_, err := d.Await(t.Context(), op)
	require.ErrorIs(t, err, client.ErrUnauthorized, "Await reports the refusal instead of waiting")
	require.Equal(t, 1, d.status(t).Pending, "the write stays queued")
}

// A server at its connection cap turns a device away with a retry time;
// the device says so (a transient refusal with the server's hint) and
// connects by itself once a slot is free.
func TestBusyServerIsReportedAndRetried(t *testing.T) {
	s := startSyncd(t, server.Config{MaxConnections: 1})
	first := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-1", deviceOptions{})
	first.waitSynced(t)

	d := openDevice(t, s, s.proxy(t), t.TempDir(), "phone-2", deviceOptions{})
	op := d.put(t, "notes", "a", `{"n":1}`)
	err := waitRefused(t, d)
	require.ErrorIs(t, err, client.ErrServerBusy)
	var re *client.RefusedError
	require.ErrorAs(t, err, &re)
	require.True(t, re.Transient())
	require.Positive(t, re.RetryAfter, "the server's Retry-After reaches the app")
	st := d.status(t)
	require.ErrorIs(t, st.LastError, client.ErrServerBusy)
	require.NotEqual(t, client.StateRefused, st.State, "busy is not a refusal for good")

	require.NoError(t, first.Close())
	require.Equal(t, client.StatusApplied, d.await(t, op).Status, "the device connects once a slot is free")
}
