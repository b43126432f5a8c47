package faultproxy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBucketPacesPieces(t *testing.T) {
	t0 := time.Unix(1_000, 0)
	type step struct {
		at       time.Duration // since t0
		want     int
		gotN     int
		gotDelay time.Duration
	}
	tests := []struct {
		name  string
		rate  int64
		steps []step
	}{
		{
			name:  "no cap grants everything at once",
			rate:  0,
			steps: []step{{at: 0, want: 1 << 20, gotN: 1 << 20}, {at: 0, want: 5, gotN: 5}},
		},
		{
			name: "pieces follow each other at the rate",
			rate: 1000, // 20 bytes per 20 ms piece
			steps: []step{
				{at: 0, want: 100, gotN: 20, gotDelay: 0},
				{at: 0, want: 80, gotN: 20, gotDelay: 20 * time.Millisecond},
				{at: 0, want: 60, gotN: 20, gotDelay: 40 * time.Millisecond},
			},
		},
		{
			name: "idle time earns no burst",
			rate: 1000,
			steps: []step{
				{at: 0, want: 20, gotN: 20, gotDelay: 0},
				{at: time.Second, want: 100, gotN: 20, gotDelay: 0},
				{at: time.Second, want: 80, gotN: 20, gotDelay: 20 * time.Millisecond},
			},
		},
		{
			name: "a short piece costs its own length",
			rate: 1000,
			steps: []step{
				{at: 0, want: 5, gotN: 5, gotDelay: 0},
				{at: 0, want: 5, gotN: 5, gotDelay: 5 * time.Millisecond},
			},
		},
		{
			name: "a tiny rate still moves one byte per piece",
			rate: 1,
			steps: []step{
				{at: 0, want: 3, gotN: 1, gotDelay: 0},
				{at: 0, want: 2, gotN: 1, gotDelay: time.Second},
			},
		},
		{
			name:  "a huge rate is capped at one chunk per piece",
			rate:  1 << 40,
			steps: []step{{at: 0, want: 1 << 20, gotN: chunkSize, gotDelay: 0}},
		},
		{
			name: "the transfer time rounds up",
			rate: 3,
			steps: []step{
				{at: 0, want: 1, gotN: 1, gotDelay: 0},
				{at: 0, want: 1, gotN: 1, gotDelay: 333_333_334 * time.Nanosecond},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bucket
			b.setRate(tt.rate)
			for i, s := range tt.steps {
				gotN, gotDelay := b.take(t0.Add(s.at), s.want)
				require.Equal(t, s.gotN, gotN, "step %d bytes", i)
				require.Equal(t, s.gotDelay, gotDelay, "step %d delay", i)
			}
		})
	}
}

func TestBucketSetRateForgetsSchedule(t *testing.T) {
	t0 := time.Unix(1_000, 0)
	var b bucket
	b.setRate(1)
	n, _ := b.take(t0, 1)
	require.Equal(t, 1, n)
	_, wait := b.take(t0, 1)
	require.Equal(t, time.Second, wait, "precondition: the slow rate queued the next piece")

	b.setRate(1000)
	n, wait = b.take(t0, 20)
	require.Equal(t, 20, n)
	require.Zero(t, wait, "a new rate must not inherit the old schedule")
}
