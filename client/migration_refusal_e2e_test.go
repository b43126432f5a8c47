package client_test

import (
	"bytes"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
)

// newerVersion is the version the refusal test gives a device file: one
// no build of this project has written yet.
const newerVersion = 1000

// TestNewerDeviceFilesAreRefused: every kind of device file written by a
// newer build (the NDJSON queue, the SQLite queue, the replica and its
// outcome store in a file of their own, in the SQLite queue's file, and
// in a file beside a SQLite queue) is refused at open with one typed
// error, *offlinequeue.NewerFormatError, naming both versions and
// matching offlinequeue.ErrUnsupportedVersion; the refused file is left
// byte for byte as it was.
func TestNewerDeviceFilesAreRefused(t *testing.T) {
	setVersion := func(query string) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			db, err := sql.Open("sqlite3", path)
			require.NoError(t, err)
			defer db.Close()
			_, err = db.Exec(fmt.Sprintf(query, newerVersion))
			require.NoError(t, err)
		}
	}
	for _, c := range []struct {
		name, kind, file, format string
		make                     func(t *testing.T, path string)
	}{
		{"NDJSON queue", "ndjson", "queue.ndjson", "queue file format", func(t *testing.T, path string) {
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			header, rest, ok := bytes.Cut(b, []byte("\n"))
			require.True(t, ok)
			newer := strings.Replace(string(header), `"version":1}`, fmt.Sprintf(`"version":%d}`, newerVersion), 1)
			require.NotEqual(t, string(header), newer)
			require.NoError(t, os.WriteFile(path, append([]byte(newer+"\n"), rest...), 0o600))
		}},
		{"SQLite queue", "sqlite", "queue.db", "queue schema", setVersion(`PRAGMA user_version = %d`)},
		{"replica file", "ndjson", "replica.db", "replica schema", setVersion(`PRAGMA user_version = %d`)},
		{"replica in the SQLite queue's file", "sqlite", "queue.db", "replica schema",
			setVersion(`INSERT INTO meta (name, value) VALUES ('replica_schema', %d)`)},
		{"replica file beside a SQLite queue", "sqlite-beside", "replica.db", "replica schema", setVersion(`PRAGMA user_version = %d`)},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, _ := goldenDevice(t, c.kind)
			path := filepath.Join(dir, c.file)
			c.make(t, path)
			before, err := os.ReadFile(path)
			require.NoError(t, err)
			_, err = openOffline(t, c.kind, dir, nil)
			require.ErrorIs(t, err, offlinequeue.ErrUnsupportedVersion)
			var newer *offlinequeue.NewerFormatError
			require.ErrorAs(t, err, &newer)
			require.Equal(t, c.format, newer.Format)
			require.Equal(t, newerVersion, newer.File)
			require.Positive(t, newer.Known)
			require.Less(t, newer.Known, newerVersion)
			require.ErrorContains(t, err, fmt.Sprintf("%s version %d is newer than this build's %d", c.format, newerVersion, newer.Known))
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			require.True(t, bytes.Equal(before, after), "the refused file is left as it was")
		})
	}
}

// TestTruncatedDeviceMigration: a device's migration cut mid-write, as a
// power loss leaves it. A SQLite file's migration is written to its
// write-ahead log: the log of opening each golden device (every replica
// schema version, the import, the model versions) is cut inside its
// header, inside each frame's header and page, and at each frame's end;
// every cut opens as one format, the old or a new one, never a mix, and
// replays against a real syncd exactly once. An NDJSON queue is migrated
// by writing a compacted copy and renaming it over the queue: a copy cut
// anywhere is never renamed (TestKillDuringDeviceMigration kills the
// write every killChunk bytes), and a queue file cut anywhere opens
// without its torn last line or is refused with *offlinequeue.CorruptError,
// never read as something else.
func TestTruncatedDeviceMigration(t *testing.T) {
	s := startSyncd(t, server.Config{})
	for _, c := range []struct{ kind, file string }{
		{"sqlite", "queue.db"}, {"ndjson", "replica.db"}, {"sqlite-beside", "queue.db"},
	} {
		t.Run(c.kind, func(t *testing.T) {
			migrated, m := goldenDevice(t, c.kind)
			// A replica file beside the queue is removed only once its
			// import is durable; any cut of the log can meet it still there.
			snapshot := t.TempDir()
			if b, err := os.ReadFile(filepath.Join(migrated, "replica.db")); err == nil && c.kind == "sqlite-beside" {
				require.NoError(t, os.WriteFile(filepath.Join(snapshot, "replica.db"), b, 0o600))
			}
			dev, err := openOffline(t, c.kind, migrated, nil)
			require.NoError(t, err)
			// The open's commits are in the log, not yet checkpointed:
			// copy the files as they are, then close.
			entries, err := os.ReadDir(migrated)
			require.NoError(t, err)
			for _, e := range entries {
				if strings.HasSuffix(e.Name(), ".lock") || strings.HasSuffix(e.Name(), "-shm") {
					continue
				}
				b, err := os.ReadFile(filepath.Join(migrated, e.Name()))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(snapshot, e.Name()), b, 0o600))
			}
			require.NoError(t, dev.Close())
			wal, err := os.ReadFile(filepath.Join(snapshot, c.file+"-wal"))
			require.NoError(t, err)
			cuts := walCuts(t, wal)
			t.Logf("%s: %d bytes of log, %d cuts", c.kind, len(wal), len(cuts))
			for _, cut := range cuts {
				t.Run(fmt.Sprintf("cut-%d", cut), func(t *testing.T) {
					dir := copyDir(t, snapshot)
					require.NoError(t, os.WriteFile(filepath.Join(dir, c.file+"-wal"), wal[:cut], 0o600))
					requireOneFormat(t, c.kind, dir)
					tn := fmt.Sprintf("cut-%s-%d", c.kind, cut)
					token := s.Issue(t, auth.Principal{Tenant: tn, ClientID: goldenClient, Read: []string{auth.Wildcard}, Write: []string{"notes"}})
					requireGoldenReplays(t, s, openGolden(t, s, c.kind, dir, token), m, tn)
				})
			}
		})
	}

	t.Run("ndjson queue", func(t *testing.T) {
		golden, _ := goldenDevice(t, "ndjson")
		b, err := os.ReadFile(filepath.Join(golden, "queue.ndjson"))
		require.NoError(t, err)
		header := bytes.IndexByte(b, '\n') + 1
		opened, refused := 0, 0
		for cut := 1; cut < len(b); cut++ {
			dir := t.TempDir()
			path := filepath.Join(dir, "queue.ndjson")
			require.NoError(t, os.WriteFile(path, b[:cut], 0o600))
			q, err := offlinequeue.OpenFile(path, offlinequeue.FileOptions{})
			if cut < header {
				var corrupt *offlinequeue.CorruptError
				require.ErrorAs(t, err, &corrupt, "a header cut at %d is refused", cut)
				refused++
				continue
			}
			require.NoError(t, err, "a queue cut at %d opens", cut)
			// A prefix of the golden's records: at most its four writes.
			items, err := q.Peek(t.Context(), 0, 10)
			require.NoError(t, err)
			require.LessOrEqual(t, len(items), 4)
			require.NoError(t, q.Close())
			opened++
		}
		t.Logf("queue file cut at %d points: %d opened, %d refused", opened+refused, opened, refused)
	})
}

// walCuts are the lengths to cut a SQLite write-ahead log to: inside its
// header, and for each frame inside its header, inside its page and at
// its end.
func walCuts(t *testing.T, wal []byte) []int {
	t.Helper()
	const walHeader, frameHeader = 32, 24
	require.Greater(t, len(wal), walHeader, "the open left its commits in the log")
	pageSize := int(binary.BigEndian.Uint32(wal[8:12]))
	require.Positive(t, pageSize)
	cuts := []int{walHeader / 2, walHeader}
	for at := walHeader; at+frameHeader+pageSize <= len(wal); at += frameHeader + pageSize {
		cuts = append(cuts, at+frameHeader/2, at+frameHeader+pageSize/2, at+frameHeader+pageSize)
	}
	if len(cuts) == 2 {
		t.Fatal(errors.New("the log holds no whole frame"))
	}
	return cuts
}
