package cluster

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/")

// TestCommandEncodingIsPinned: a command's bytes on the stream and its
// authenticator under a fixed key are exactly testdata/command_v1.golden
// (line 1: the message data; line 2: the HeaderAuth header). Nodes of
// every release that speak CommandVersion 1 must agree on both: a change
// here is a new CommandVersion (go test -run TestCommandEncodingIsPinned
// -update rewrites the file once that is decided).
func TestCommandEncodingIsPinned(t *testing.T) {
	key := make([]byte, MinCommandKeyBytes)
	for i := range key {
		key[i] = byte(i)
	}
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	cmds := []Command{
		{ID: "0193a8f0-0000-7000-8000-000000000001", Batches: []replication.Batch{{
			Tenant: "acme", ClientID: "phone", At: at,
			Writes: []replication.Write{{
				Mutation: syncproto.Mutation{OpID: "0193a8f0-0000-7000-8000-00000000000a", Model: "notes", Key: "k",
					Op: syncproto.OpPut, Value: []byte(`{"text":"hi"}`), HLC: syncproto.Timestamp{Wall: at.UnixMilli(), Origin: "phone"}},
				Policy: syncproto.PolicyLWW,
			}},
		}}},
		{ID: "0193a8f0-0000-7000-8000-000000000002", Job: &Job{Kind: JobPruneLedger, Token: 42, Now: at, Limit: 1000}},
	}
	var got strings.Builder
	for _, c := range cmds {
		data, err := encodeCommand(c)
		require.NoError(t, err)
		got.WriteString(string(data) + "\n" + HeaderAuth + ": " + Authenticate(key, data) + "\n")
		require.True(t, authentic(key, data, Authenticate(key, data)))
		require.False(t, authentic(key[1:], data, Authenticate(key, data)), "another key")
		require.False(t, authentic(key, append(data, ' '), Authenticate(key, data)), "another byte")
	}
	path := filepath.Join("testdata", "command_v1.golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got.String()), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), got.String())
}

// TestJobTokenBounds: a job's token may grow at most as fast as the
// lease's revision can, and the last job's fence lapses after
// jobFenceLapse of stream time, so no token holds off later jobs longer.
func TestJobTokenBounds(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	pos := position{jobToken: 100, jobAt: t0.UnixNano()}
	require.Equal(t, uint64(101), maxToken(pos, t0), "the same instant: one more")
	require.Equal(t, uint64(101+10*maxLeaseRevisionsPerSecond), maxToken(pos, t0.Add(10*time.Second)))
	require.Equal(t, uint64(101), maxToken(pos, t0.Add(-time.Hour)), "stream time never runs back, and would not widen the bound")
	require.Equal(t, uint64(1<<64-1), maxToken(position{jobToken: 1<<64 - 2, jobAt: t0.UnixNano()}, t0.Add(time.Hour)), "saturates")

	require.True(t, staleJob(pos, 99, t0.Add(time.Minute)))
	require.False(t, staleJob(pos, 100, t0.Add(time.Minute)), "the same lease")
	require.False(t, staleJob(pos, 99, t0.Add(jobFenceLapse)), "the fence lapsed")
	require.False(t, staleJob(position{jobToken: 100}, 1, t0), "a position of an older release records no time: no fence")
}
