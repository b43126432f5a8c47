package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncproto"
)

// Feed pages are built from entries encoded once for every subscriber;
// each must be byte for byte what the ordinary encoder writes, in scope.
func TestFeedFramesFromTheSharedTailAreTheEncodersFrames(t *testing.T) {
	ts := startServer(t, server.Config{})
	writer, clock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	all, _ := session(t, ts, ts.Member(t, "acme", "tablet"), "tablet")
	notes, _ := session(t, ts, ts.Issue(t, readOnly("acme", "watch", "notes")), "watch")
	other, _ := session(t, ts, ts.Member(t, "globex", "laptop"), "laptop")
	for _, c := range []*wsClient{all, notes, other} {
		c.subscribe("feed", 0)
	}
	for i := range 5 {
		requireApplied(t, writer.push(fmt.Sprintf("p%d", i),
			put(t, clock, "notes", fmt.Sprintf("n%d", i), `{"t":"<b>&"}`),
			put(t, clock, "secrets", fmt.Sprintf("s%d", i), `[1,2]`)))
	}
	for _, tc := range []struct {
		c    *wsClient
		want int
	}{{all, 10}, {notes, 5}} {
		var got []syncproto.Change
		for len(got) < tc.want {
			frame, err := tc.c.next()
			require.NoError(t, err)
			msg, err := syncproto.Decode(frame)
			require.NoError(t, err)
			again, err := syncproto.Encode(msg)
			require.NoError(t, err)
			require.Equal(t, string(again), string(frame))
			got = append(got, msg.(*syncproto.Changes).Entries...)
		}
		require.Len(t, got, tc.want)
		for i, e := range got {
			if tc.want == 5 {
				require.Equal(t, "notes", e.Model)
			}
			if i > 0 {
				require.Greater(t, e.Seq, got[i-1].Seq)
			}
		}
	}
	require.Empty(t, other.pull("q", 0).Entries, "another tenant's feed holds nothing")
}

// A subscriber that stops reading holds at most one feed page on the
// server, is cut by the write timeout, and resumes from its cursor; the
// others and the pushes go on meanwhile.
func TestSlowSubscriberIsCutAndResumesWithoutSlowingOthers(t *testing.T) {
	ts := startServer(t, server.Config{WriteTimeout: 300 * time.Millisecond, PingInterval: time.Hour, IdleTimeout: time.Hour})
	writer, clock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	slowToken := ts.Member(t, "acme", "slow")
	slow, _ := session(t, ts, slowToken, "slow")
	fast, _ := session(t, ts, ts.Member(t, "acme", "fast"), "fast")
	slow.subscribe("feed", 0)
	fast.subscribe("feed", 0)

	// 96 values of 200 KiB (19 MiB): far more than loopback socket buffers
	// hold even when they grow, so the slow subscriber's writes block; the
	// fast one reads as they come.
	big := `"` + strings.Repeat("x", 200<<10) + `"`
	const pushes, perPush = 24, 4
	for i := range pushes {
		muts := make([]syncproto.Mutation, perPush)
		for j := range muts {
			muts[j] = put(t, clock, "notes", fmt.Sprintf("k%d-%d", i, j), big)
		}
		requireApplied(t, writer.push(fmt.Sprintf("p%d", i), muts...))
		fast.waitLive((i + 1) * perPush)
	}
	require.Len(t, fast.live, pushes*perPush)

	// The slow one was cut: reading it now ends in a closed connection
	// after what was in flight.
	var seen uint64
	for range pushes * perPush {
		frame, err := slow.next()
		if err != nil {
			break
		}
		msg, err := syncproto.Decode(frame)
		require.NoError(t, err)
		if ch, ok := msg.(*syncproto.Changes); ok {
			seen = ch.Cursor
		}
	}
	require.Less(t, seen, uint64(pushes*perPush), "the slow subscriber was cut before the end of the feed")
	// It resumes from its cursor. Reading 19 MiB under the race detector
	// on a loaded machine can itself outlast the 300 ms write timeout, so a
	// resumed session that is cut resumes again, as a client does: what
	// counts is that every entry after the cursor arrives once, in order.
	const total = pushes * perPush
	cursor := seen
	for attempt := 0; attempt < 10 && cursor < total; attempt++ {
		again, _ := session(t, ts, slowToken, "slow")
		again.subscribe("feed", cursor)
		entries := again.live
		for uint64(len(entries))+cursor < total {
			frame, err := again.next()
			if err != nil {
				break
			}
			msg, err := syncproto.Decode(frame)
			require.NoError(t, err)
			if ch, ok := msg.(*syncproto.Changes); ok && ch.ID == "feed" {
				entries = append(entries, ch.Entries...)
			}
		}
		for _, e := range entries {
			require.Equal(t, cursor+1, e.Seq, "entries after the cursor arrive once, in order")
			cursor = e.Seq
		}
	}
	require.Equal(t, uint64(total), cursor, "it resumed from its cursor to the end of the feed")
}
