package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/syncproto"
)

// A timestamp far ahead of the server's clock (a broken or hostile peer's)
// is not adopted: the device clock stays put and the refusal is counted.
// One within the bound, measured against the server's clock from welcome,
// is adopted even when the device's own clock is slow.
func TestObserveRefusesTimestampsFarAhead(t *testing.T) {
	now := time.UnixMilli(1_733_140_000_000)
	m, err := newMetrics(nil)
	require.NoError(t, err)
	c := &Client{now: func() time.Time { return now }, metrics: m, log: slog.New(slog.DiscardHandler)}
	c.clock = syncproto.NewClock("phone", c.now)

	// The device runs 10 minutes slow; the server says so at welcome.
	c.measureOffset(&syncproto.Welcome{ServerTime: now.Add(10 * time.Minute).UnixMilli()})
	server := now.Add(10 * time.Minute)
	c.observe(syncproto.Timestamp{Wall: server.Add(time.Minute).UnixMilli(), Origin: "node-1"})
	require.Equal(t, server.Add(time.Minute).UnixMilli(), c.stamp().Wall, "within the bound: adopted")

	before := c.stamp()
	c.observe(syncproto.Timestamp{Wall: syncproto.MaxWall, Origin: "node-1"})
	after := c.stamp()
	require.Less(t, after.Wall, server.Add(MaxObservedClockAhead).UnixMilli(), "year 9999 not adopted")
	require.Equal(t, before.Wall, after.Wall)
	require.Equal(t, 1.0, testutil.ToFloat64(m.clockRefused))
}

// A snapshot larger than MaxSnapshotBytes is abandoned with
// ErrSnapshotTooLarge instead of being read to its end.
func TestSnapshotIsBoundedInBytes(t *testing.T) {
	var body bytes.Buffer
	w, err := syncproto.NewSnapshotWriter(&body, 7)
	require.NoError(t, err)
	for i := range 100 {
		require.NoError(t, w.Write(syncproto.SnapshotRecord{Model: "notes", Key: fmt.Sprintf("k%d", i), Value: []byte(`"some value"`),
			Version: 1, HLC: syncproto.Timestamp{Wall: 1, Origin: "node-1"}}))
	}
	require.NoError(t, w.Close())

	read := func(limit int64) (exceeded bool, err error) {
		br := &boundedReader{r: bytes.NewReader(body.Bytes()), left: limit}
		sr, err := syncproto.NewSnapshotReader(br)
		for err == nil {
			_, err = sr.Next()
		}
		if errors.Is(err, io.EOF) {
			err = nil
		}
		return br.exceeded, err
	}
	exceeded, err := read(int64(body.Len()) + 1)
	require.NoError(t, err)
	require.False(t, exceeded)
	exceeded, err = read(int64(body.Len()) / 2)
	require.Error(t, err, "a snapshot cut at the bound never reads as complete")
	require.True(t, exceeded, "loadSnapshot reports ErrSnapshotTooLarge")
}

// Links lost soon after they were made are retried after a growing,
// jittered wait (never in a tight loop); a healthy link resets it and is
// retried after a jittered wait in [RetryInterval/2, RetryInterval].
func TestRelinkBacksOffAfterQuickLosses(t *testing.T) {
	c := &Client{cfg: Config{RetryInterval: time.Second, MaxRetryInterval: 8 * time.Second}}
	var waits []time.Duration
	for range 6 {
		waits = append(waits, c.relinkDelay(100*time.Millisecond))
	}
	for i, want := range []time.Duration{1, 2, 4, 8, 8, 8} {
		want *= time.Second
		require.GreaterOrEqual(t, waits[i], want/2, "loss %d", i+1)
		require.LessOrEqual(t, waits[i], want, "loss %d", i+1)
	}
	healthy := map[time.Duration]bool{}
	for range 10 {
		d := c.relinkDelay(healthyLinkLife)
		require.LessOrEqual(t, d, time.Second, "a link that lasted reconnects within RetryInterval")
		require.GreaterOrEqual(t, d, time.Second/2, "the backoff's first wait")
		healthy[d] = true
	}
	require.Greater(t, len(healthy), 1, "at a random moment, so devices a restart dropped together do not return in step")
	require.LessOrEqual(t, c.relinkDelay(time.Millisecond), time.Second, "and the count starts over")
}

// A link whose snapshot download was abandoned counts as a quick loss
// however long it lived, so a server whose snapshots fail slowly is
// retried after a growing wait, not every RetryInterval.
func TestAbandonedSnapshotCountsAsAQuickLoss(t *testing.T) {
	c := &Client{cfg: Config{RetryInterval: time.Second, MaxRetryInterval: 8 * time.Second}}
	l := &link{}
	require.Equal(t, time.Hour, l.healthy(time.Hour))
	l.snapshotAbandoned.Store(true)
	var waits []time.Duration
	for range 4 {
		waits = append(waits, c.relinkDelay(l.healthy(time.Hour)))
	}
	for i, want := range []time.Duration{1, 2, 4, 8} {
		want *= time.Second
		require.GreaterOrEqual(t, waits[i], want/2, "loss %d", i+1)
		require.LessOrEqual(t, waits[i], want, "loss %d", i+1)
	}
}
