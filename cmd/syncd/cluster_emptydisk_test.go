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
	// Stop the load so the lease holder's next snapshots (every 2 s) catch
	// the stream's start: under load on a busy machine the stream can run
	// past the newest snapshot, and a node with an empty disk then has
	// nothing to restore (it refuses to start, saying so).
	require.NoError(t, l.stop())
	time.Sleep(5 * time.Second)
	lost.kill(t)
	require.NoError(t, os.RemoveAll(lost.dir))
	t.Logf("%s lost its disk; the stream holds seqs %d to %d", lost.name, info.State.FirstSeq, info.State.LastSeq)
	// No load while it is gone: with a stream this small (400 kB), a
	// busy stream runs past the newest snapshot within seconds, and if the
	// lost node held the job lease nobody takes snapshots until the lease
	// expires.
	lost.start(t)
	lost.waitReady(t)
	// Writes it must apply after the restore: fewer than the stream holds
	// (about 180 commands in 400 kB), or a node whose consumer is being
	// recreated meanwhile (as when a NATS server rejoins) finds the
	// commands it has not applied dropped, and stops on the gap.
	began := time.Now()
	after := startLoad(t, pc, 2, 10)
	defer after.stop()
	// Until each writer had a push acknowledged (a second of pushing
	// acknowledged nothing once, on a loaded machine), then at once.
	require.Eventually(t, func() bool {
		_, ok := after.resumeAfter(began)
		return ok
	}, time.Minute, 50*time.Millisecond, "every writer had a push acknowledged after the restore")
	require.NoError(t, after.stop())
	pc.requireOnceEverywhere(t, l)
	pc.requireOnceEverywhere(t, after)
	logs, err := os.ReadFile(lost.logPath)
	require.NoError(t, err)
	for _, line := range strings.Split(string(logs), "\n") {
		if strings.Contains(line, "snapshot") && !strings.Contains(line, "component=nats") {
			t.Logf("%s: %s", lost.name, line)
		}
	}
	require.True(t, strings.Contains(string(logs), "restored the newest snapshot"), "%s did not restore a snapshot", lost.name)
}
