package client_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/internal/crashpoint"
	"github.com/syncd-dev/syncd/internal/crashpoint/crashtest"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
)

// The kill test's child (TestDeviceMigrationKillChild) opens a copy of a
// golden device (goldenDir) under the current client and is killed with
// SIGKILL at its k-th step: every crashpoint.Reach of opening the files
// (each statement of each replica schema migration, each version set and
// each commit, the model versions recorded) and, for the NDJSON queue,
// every file operation of the rewrite its open does (the compacted copy
// created, written killChunk bytes at a time, synced, renamed over the
// queue, the directory synced).
const (
	killKindEnv = "SYNCD_DEVMIGRATE_KIND" // a key of killGoldens
	killDirEnv  = "SYNCD_DEVMIGRATE_DIR"  // the copy of the golden files
	// killChunk is how many bytes of a queue file write go between two
	// steps: kills land mid-write, leaving a file cut there.
	killChunk = 128
	// maxKillSteps bounds the steps the parent tries per golden kind.
	maxKillSteps = 200
)

// TestDeviceMigrationKillChild is the child process of
// TestKillDuringDeviceMigration; without its environment it does nothing.
// It opens the device in killDirEnv (no server is reachable: nothing is
// replayed) and stops at the step crashtest.StepEnv ranks, to be killed
// there; one that opens without reaching it prints "opened after N steps"
// and closes the device.
func TestDeviceMigrationKillChild(t *testing.T) {
	done, ok := crashtest.StopAtStep()
	if !ok {
		return
	}
	c, err := openOffline(t, os.Getenv(killKindEnv), os.Getenv(killDirEnv), steppedFS{offlinequeue.OSFS()})
	require.NoError(t, err)
	crashpoint.Reach("client open returned")
	n := done()
	require.NoError(t, c.Close())
	fmt.Printf("opened after %d steps\n", n)
}

// openOffline opens a client over the device files of kind (a key of
// killGoldens) in dir, its NDJSON queue's file system fsys, with the
// golden's model versions and a server address nothing listens on: it
// opens (and migrates) the files and replays nothing.
func openOffline(t *testing.T, kind, dir string, fsys offlinequeue.FS) (*client.Client, error) {
	t.Helper()
	var q offlinequeue.Queue
	var err error
	if kind == "ndjson" {
		q, err = offlinequeue.OpenFile(filepath.Join(dir, "queue.ndjson"), offlinequeue.FileOptions{FS: fsys})
	} else {
		q, err = offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
	}
	if err != nil {
		return nil, err
	}
	return client.Open(t.Context(), client.Config{
		ServerURLs: []string{"http://" + closedAddr(t)}, Token: "unused", ClientID: goldenClient,
		Queue: q, ReplicaPath: filepath.Join(dir, "replica.db"),
		ModelVersions: map[string]uint64{"notes": 2},
		Registerer:    prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// killGoldens are the devices of earlier releases the kill test opens:
// each kind's golden files (goldenDir) and, for "sqlite-beside", the
// layout before the replica moved into a SQLite queue's file, made from
// the SQLite golden by splitReplica.
var killGoldens = map[string]struct {
	golden  string
	prepare func(t *testing.T, dir string)
}{
	"sqlite":        {golden: "sqlite"},
	"ndjson":        {golden: "ndjson"},
	"sqlite-beside": {golden: "sqlite", prepare: splitReplica},
}

// goldenDevice copies the files of the golden device kind (a key of
// killGoldens) into a fresh directory and returns it, with the manifest
// naming its writes.
func goldenDevice(t *testing.T, kind string) (string, goldenManifest) {
	t.Helper()
	g, ok := killGoldens[kind]
	require.True(t, ok, "no golden kind %q", kind)
	golden := filepath.Join(goldenDir, g.golden)
	var m goldenManifest
	b, err := os.ReadFile(filepath.Join(golden, "manifest.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &m))
	dir := copyDir(t, golden)
	if g.prepare != nil {
		g.prepare(t, dir)
	}
	return dir, m
}

// TestKillDuringDeviceMigration: for each device of an earlier release
// (killGoldens: a SQLite queue holding the replica and outcomes at the
// replica's first schema, unversioned; an NDJSON queue with a replica file
// of its own; a SQLite queue with a replica file beside it), with writes
// in every state, a child opening it under the current client is killed
// with SIGKILL at step k, for every k until the open completes. After
// each kill the files hold one format each, the old or the new, never a
// mix; a fresh open succeeds and replays against a real syncd (a tenant
// of its own per kill): every pending write decided exactly once, the
// decided one not sent again, the dead letter kept. So does the device
// whose open ran to its end. It prints how many kill points it covered.
func TestKillDuringDeviceMigration(t *testing.T) {
	s := startSyncd(t, server.Config{})
	total := 0
	for _, kind := range []string{"sqlite", "ndjson", "sqlite-beside"} {
		points := 0
		for k := 1; ; k++ {
			require.LessOrEqual(t, k, maxKillSteps, "opening a golden device reaches more steps than the test tries")
			dir, m := goldenDevice(t, kind)
			ctx, cancel := context.WithTimeout(t.Context(), waitFor)
			r := crashtest.Run(t, ctx, []string{
				crashtest.StepEnv + "=" + strconv.Itoa(k), killKindEnv + "=" + kind, killDirEnv + "=" + dir,
			}, "-test.run=^TestDeviceMigrationKillChild$", "-test.count=1")
			cancel()
			name := fmt.Sprintf("%s/step-%d", kind, k)
			if r.Stopped {
				t.Logf("%s: killed at step %s", kind, r.Point)
				points++
			} else {
				require.Contains(t, r.Output, fmt.Sprintf("opened after %d steps", k-1), "the open ran to its end after the last step")
				name = kind + "/complete"
			}
			t.Run(name, func(t *testing.T) {
				requireOneFormat(t, kind, dir)
				tn := fmt.Sprintf("kill-%s-%d", kind, k)
				token := s.Issue(t, auth.Principal{Tenant: tn, ClientID: goldenClient, Read: []string{auth.Wildcard}, Write: []string{"notes"}})
				requireGoldenReplays(t, s, openGolden(t, s, kind, dir, token), m, tn)
			})
			if !r.Stopped {
				break
			}
		}
		fmt.Printf("device migration kill points, %s: %d\n", kind, points)
		total += points
	}
	fmt.Printf("device migration kill points in all: %d\n", total)
	require.GreaterOrEqual(t, total, 50, "kill points across the golden devices")
}

// splitReplica turns the SQLite golden in dir into the layout of the
// release before the replica moved into the queue's file: the queue's
// tables alone in queue.db (schema version 1), the replica's, of the first
// release and unversioned, in replica.db beside it.
func splitReplica(t *testing.T, dir string) {
	t.Helper()
	queue, replica := filepath.Join(dir, "queue.db"), filepath.Join(dir, "replica.db")
	db, err := sql.Open("sqlite3", queue)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`VACUUM INTO ?`, replica)
	require.NoError(t, err)
	_, err = db.Exec(`DROP TABLE records; DROP TABLE pending; DROP TABLE outcomes; DROP TABLE meta; DROP TABLE meta_text; VACUUM`)
	require.NoError(t, err)
	rdb, err := sql.Open("sqlite3", replica)
	require.NoError(t, err)
	defer rdb.Close()
	_, err = rdb.Exec(`DROP TABLE items; DROP TABLE dead_letters; PRAGMA user_version = 0; VACUUM`)
	require.NoError(t, err)
}

// replicaFacts is what says which format a file's replica tables are in.
type replicaFacts struct {
	Tables     bool          // the file holds the replica's tables
	Version    sql.NullInt64 // their recorded schema version; null: none
	ScopeValue bool          // records has the scope_value column (version 2)
	ScopeIndex bool          // and its index
}

// The formats a replica's tables may be in: none, the first release's
// (unversioned, or at version 1 in a file of its own), version 2's whole.
var (
	replicaNone  = replicaFacts{}
	replicaFirst = replicaFacts{Tables: true}
	replicaV1    = replicaFacts{Tables: true, Version: sql.NullInt64{Int64: 1, Valid: true}}
	replicaV2    = replicaFacts{Tables: true, Version: sql.NullInt64{Int64: 2, Valid: true}, ScopeValue: true, ScopeIndex: true}
)

// replicaFactsOf reads, without changing it, the replica facts of the
// SQLite file at path, whose replica schema version is in its meta table
// (inQueue: a SQLite queue's file) or is its user_version (0: none).
func replicaFactsOf(t *testing.T, path string, inQueue bool) replicaFacts {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro")
	require.NoError(t, err)
	defer db.Close()
	var f replicaFacts
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'records'`).Scan(&f.Tables))
	if !f.Tables {
		return f
	}
	version := `(SELECT nullif(user_version, 0) FROM pragma_user_version)`
	if inQueue {
		version = `(SELECT value FROM meta WHERE name = 'replica_schema')`
	}
	require.NoError(t, db.QueryRow(`SELECT `+version+`,
		(SELECT count(*) FROM pragma_table_info('records') WHERE name = 'scope_value'),
		(SELECT count(*) FROM sqlite_schema WHERE name = 'records_by_scope_value')`).Scan(&f.Version, &f.ScopeValue, &f.ScopeIndex))
	return f
}

// requireOneFormat checks, without changing them, that the device files
// of kind in dir are each in one format, the old or the new: the
// replica's tables whole at one version, the NDJSON queue a file of its
// format's version.
func requireOneFormat(t *testing.T, kind, dir string) {
	t.Helper()
	queue, replica := filepath.Join(dir, "queue.db"), filepath.Join(dir, "replica.db")
	switch kind {
	case "sqlite":
		require.Contains(t, []replicaFacts{replicaFirst, replicaV2}, replicaFactsOf(t, queue, true))
	case "sqlite-beside":
		// Before the import commits, the queue's file holds no replica
		// or an empty one of version 2; the file beside stays the first
		// release's until it is removed.
		require.Contains(t, []replicaFacts{replicaNone, replicaV2}, replicaFactsOf(t, queue, true))
		if _, err := os.Stat(replica); err == nil {
			require.Equal(t, replicaFirst, replicaFactsOf(t, replica, false))
		}
	case "ndjson":
		require.Contains(t, []replicaFacts{replicaFirst, replicaV1, replicaV2}, replicaFactsOf(t, replica, false))
		b, err := os.ReadFile(filepath.Join(dir, "queue.ndjson"))
		require.NoError(t, err)
		require.Regexp(t, `^\{"op":"header","format":"syncd-offlinequeue","version":1\}\n`, string(b))
	default:
		t.Fatalf("no golden kind %q", kind)
	}
}

// steppedFS is the NDJSON queue's file system in the kill test's child:
// the real one, with a crashpoint step after each operation that changes
// the disk, and after every killChunk bytes a write writes.
type steppedFS struct{ offlinequeue.FS }

func (f steppedFS) OpenFile(name string, flag int, perm fs.FileMode) (offlinequeue.FSFile, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	if flag&(os.O_CREATE|os.O_TRUNC) != 0 {
		crashpoint.Reach("queue file: opened " + filepath.Base(name) + " to write")
	}
	return steppedFile{FSFile: file, name: filepath.Base(name)}, nil
}

func (f steppedFS) Rename(oldpath, newpath string) error {
	err := f.FS.Rename(oldpath, newpath)
	if err == nil {
		crashpoint.Reach("queue file: renamed " + filepath.Base(oldpath) + " over " + filepath.Base(newpath))
	}
	return err
}

func (f steppedFS) Remove(name string) error {
	err := f.FS.Remove(name)
	if err == nil {
		crashpoint.Reach("queue file: removed " + filepath.Base(name))
	}
	return err
}

func (f steppedFS) SyncDir(dir string) error {
	err := f.FS.SyncDir(dir)
	if err == nil {
		crashpoint.Reach("queue file: synced the directory")
	}
	return err
}

// steppedFile is a file of steppedFS.
type steppedFile struct {
	offlinequeue.FSFile
	name string
}

func (f steppedFile) WriteAt(p []byte, off int64) (int, error) {
	written := 0
	for written < len(p) {
		n, err := f.FSFile.WriteAt(p[written:min(len(p), written+killChunk)], off+int64(written))
		written += n
		if err != nil {
			return written, err
		}
		crashpoint.Reach(fmt.Sprintf("queue file: wrote %s bytes %d to %d of %d", f.name, off, off+int64(written), off+int64(len(p))))
	}
	return written, nil
}

func (f steppedFile) Sync() error {
	err := f.FSFile.Sync()
	if err == nil {
		crashpoint.Reach("queue file: synced " + f.name)
	}
	return err
}

func (f steppedFile) Truncate(size int64) error {
	err := f.FSFile.Truncate(size)
	if err == nil {
		crashpoint.Reach(fmt.Sprintf("queue file: truncated %s to %d bytes", f.name, size))
	}
	return err
}
