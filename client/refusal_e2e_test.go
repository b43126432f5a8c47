package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/server"
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
