package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClusterProcessEmptyDisk loses a node's whole disk (its database and
// its NATS store) while the command stream's retention (--stream-max-bytes)
// has already dropped the stream's first commands: the node, started
// again on an empty directory, restores the newest snapshot the lease
// holder stored (--snapshot-every) and catches up from the stream, ending
// with the others' oplog and digest.
func TestClusterProcessEmptyDisk(t *testing.T) {
	pc := startProcCluster(t, "--snapshot-every", "2s", "--stream-max-bytes", "400000")
	l := startLoad(t, pc, 6, 10)
	defer l.stop()
	lost := pc.nodes[2]
	other := pc.nodes[0]
	for range 600 { // bounded: 60 s of load, until retention dropped the stream's start
		if info := askStream(other.natsURL); info != nil && info.State.FirstSeq > 1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	info := askStream(other.natsURL)
	require.NotNil(t, info)
	require.Greater(t, info.State.FirstSeq, uint64(1), "the stream never dropped its first commands")
	lost.kill(t)
	require.NoError(t, os.RemoveAll(lost.dir))
	t.Logf("%s lost its disk; the stream holds seqs %d to %d", lost.name, info.State.FirstSeq, info.State.LastSeq)
	time.Sleep(3 * time.Second) // load, and a snapshot, while it is gone
	lost.start(t)
	lost.waitReady(t)
	time.Sleep(2 * time.Second) // load after its return
	require.NoError(t, l.stop())
	pc.requireOnceEverywhere(t, l)
	logs, err := os.ReadFile(lost.logPath)
	require.NoError(t, err)
	require.True(t, strings.Contains(string(logs), "restored the newest snapshot"), "%s did not restore a snapshot", lost.name)
}
