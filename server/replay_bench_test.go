package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/internal/peerbench"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
)

// offlineDocs is the PouchDB-shaped workload's size: documents written on
// a device while offline, then replicated to a server that starts later.
const offlineDocs = 20_000

// BenchmarkOfflineReplay is the PouchDB-shaped workload: 20,000 documents
// of about 200 bytes written through client.Put while no server exists
// (SQLite queue and replica, synchronous=FULL), then a syncd starts (its
// database synchronous=FULL too) and the device replicates them. It times
// from the server being healthy to every write applied (the queue empty):
// opening the client on its queue, connecting, and the replay. One op is
// one replication of all the documents. syncd runs at the defaults its
// binary runs with: no limit is lifted. In the same run, PouchDB (the peer,
// tools/peerbench: LevelDB, no fsync) replicates the same number of
// documents of the same size from a local database to its own server on
// this machine. It reports
//
//	docs/s          syncd's replay
//	pouchdb_docs/s  PouchDB's replication, measured after syncd's
//	x_pouchdb       docs/s over pouchdb_docs/s (issue 24 aims at >= 5)
func BenchmarkOfflineReplay(b *testing.B) {
	template := b.TempDir()
	writeOffline(b, template)
	var total time.Duration
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		copyDir(b, template, dir)
		ts := syncdtest.Start(b, server.Config{RetentionInterval: -1})
		token := ts.Member(b, "acme", "device")
		b.StartTimer()
		start := time.Now()
		c := openDevice(b, dir, ts.URL, token)
		waitDrained(b, c)
		total += time.Since(start)
		b.StopTimer()
		require.NoError(b, c.Close())
		ts.Stop(b)
	}
	rate := float64(offlineDocs*b.N) / total.Seconds()
	peer := pouchDBReplication(b)
	b.ReportMetric(rate, "docs/s")
	b.ReportMetric(peer, "pouchdb_docs/s")
	b.ReportMetric(rate/peer, "x_pouchdb")
}

// pouchDBReplication is PouchDB's replication of offlineDocs documents to
// its own server on this machine, in documents a second.
func pouchDBReplication(b *testing.B) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	peer, err := peerbench.Start(ctx, b.TempDir())
	require.NoError(b, err)
	defer peer.Close()
	rate, err := peer.Replicate(ctx, "replay", offlineDocs)
	require.NoError(b, err)
	return rate
}

// writeOffline writes offlineDocs documents through a client whose server
// does not exist.
func writeOffline(b *testing.B, dir string) {
	c := openDevice(b, dir, "http://127.0.0.1:1", "sdk_000000000000_offline")
	ctx := context.Background()
	const writers = 32 // concurrent Puts share the queue's fsyncs
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			var err error
			for i := w; i < offlineDocs && err == nil; i += writers {
				_, err = c.Put(ctx, "docs", fmt.Sprintf("doc-%06d", i),
					[]byte(fmt.Sprintf(`{"_id":"doc-%06d","type":"note","title":"document %d","body":"a small document of about two hundred bytes, as a PouchDB app writes","tags":["a","b"],"n":%d}`, i, i, i)))
			}
			errs <- err
		}()
	}
	for range writers {
		require.NoError(b, <-errs)
	}
	require.NoError(b, c.Close())
}

func openDevice(b *testing.B, dir, url, token string) *client.Client {
	q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
	require.NoError(b, err)
	c, err := client.Open(context.Background(), client.Config{
		ServerURLs: []string{url}, Token: token, ClientID: "device", Queue: q,
		ReplicaPath: filepath.Join(dir, "replica.db"), ProbeInterval: 10 * time.Millisecond,
	})
	require.NoError(b, err)
	return c
}

// waitDrained polls until the device's queue is empty.
func waitDrained(b *testing.B, c *client.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for {
		st, err := c.Status(ctx)
		require.NoError(b, err)
		if st.Pending == 0 {
			return
		}
		select {
		case <-ctx.Done():
			b.Fatalf("replay did not finish: %d pending", st.Pending)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// copyDir copies the regular files of src into dst.
func copyDir(b *testing.B, src, dst string) {
	entries, err := os.ReadDir(src)
	require.NoError(b, err)
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(b, err)
		require.NoError(b, os.WriteFile(filepath.Join(dst, e.Name()), data, 0o600))
	}
}
