package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
)

// A device that synced past the point a backup was taken comes back after
// the restore, once other devices' writes carried the head past its
// cursor again. Restored by hand (a plain copy, same database id) the
// device resumes from its cursor and keeps a replica of the lost history,
// missing what the new history wrote at those seqs: it never converges.
// Restored by syncctl restore (a new database id) it resyncs from a
// snapshot and holds exactly what the server holds.
func TestRestoreGivesTheDatabaseANewIdentity(t *testing.T) {
	for _, tc := range []struct {
		name     string
		restore  func(t *testing.T, backup, data string)
		converge bool
	}{
		{"syncctl restore", func(t *testing.T, backup, data string) {
			out := newCLI(t, nil).ok("restore", "--backup", backup, "--data", data, "--json")
			var v restoreView
			decodeStrict(t, out, &v)
			require.Equal(t, uint64(1), v.Head)
			require.NotEqual(t, v.OldID, v.DatabaseID)
		}, true},
		{"plain copy", func(t *testing.T, backup, data string) {
			b, err := os.ReadFile(backup)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(data, b, 0o600))
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := syncdtest.Start(t, server.Config{})
			dir := t.TempDir()
			phone := openRestoreDevice(t, s, dir, "phone-1")
			putApplied(t, phone, "a")
			backup := filepath.Join(t.TempDir(), "backup.db")
			db, err := sql.Open("sqlite3", s.DataPath)
			require.NoError(t, err)
			_, err = db.Exec(`VACUUM INTO ?`, backup)
			require.NoError(t, err)
			require.NoError(t, db.Close())
			putApplied(t, phone, "b", "c")
			waitCursor(t, phone, 3)
			require.NoError(t, phone.Close())

			s.Stop(t)
			for _, suffix := range []string{"", "-wal", "-shm"} {
				if err := os.Rename(s.DataPath+suffix, s.DataPath+suffix+".old"); !os.IsNotExist(err) {
					require.NoError(t, err)
				}
			}
			tc.restore(t, backup, s.DataPath)
			s.Restart(t)
			other := openRestoreDevice(t, s, t.TempDir(), "phone-2")
			putApplied(t, other, "d", "e", "f")

			phone = openRestoreDevice(t, s, dir, "phone-1")
			waitCursor(t, phone, 4)
			_, records := s.Snapshot(t, s.Member(t, "acme", "reader"))
			want := map[string]bool{}
			for _, r := range records {
				want[r.Key] = true
			}
			recs, err := phone.List(t.Context(), "notes", client.ListOptions{})
			require.NoError(t, err)
			got := map[string]bool{}
			for _, r := range recs {
				got[r.Key] = true
			}
			require.Equal(t, map[string]bool{"a": true, "d": true, "e": true, "f": true}, want)
			if tc.converge {
				require.Equal(t, want, got, "the device resynced to the restored server")
			} else {
				require.NotEqual(t, want, got, "a plain copy keeps the id: the device resumes in the lost history")
			}
		})
	}
}

func openRestoreDevice(t *testing.T, s *syncdtest.Server, dir, clientID string) *client.Client {
	t.Helper()
	q, err := offlinequeue.OpenSQLite(filepath.Join(dir, "queue.db"), offlinequeue.SQLiteOptions{})
	require.NoError(t, err)
	c, err := client.Open(t.Context(), client.Config{
		ServerURLs: []string{s.URL}, Token: s.Member(t, "acme", clientID), ClientID: clientID, Queue: q,
		ProbeInterval: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// putApplied writes each key to notes and waits until the server applied it.
func putApplied(t *testing.T, c *client.Client, keys ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), syncdtest.Timeout)
	defer cancel()
	for _, k := range keys {
		op, err := c.Put(ctx, "notes", k, json.RawMessage(`{"k":"`+k+`"}`))
		require.NoError(t, err)
		out, err := c.Await(ctx, op)
		require.NoError(t, err)
		require.Equal(t, client.StatusApplied, out.Status, "%s", k)
	}
}

func waitCursor(t *testing.T, c *client.Client, cursor uint64) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := c.Status(t.Context())
		return err == nil && st.Connected && st.Cursor == cursor
	}, syncdtest.Timeout, 5*time.Millisecond, "cursor %d", cursor)
}

// A restore that cannot be done says why in one line, with its exit
// status, and leaves nothing at --data; one whose --data exists touches
// nothing.
func TestRestoreRefusesBadInput(t *testing.T) {
	c := newCLI(t, nil)
	dir := t.TempDir()
	data := filepath.Join(dir, "syncd.db")
	notSQLite := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(notSQLite, []byte("not a database\n"), 0o600))
	otherSQLite := filepath.Join(dir, "other.db")
	db, err := sql.Open("sqlite3", otherSQLite)
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE oplog (seq INTEGER PRIMARY KEY)`)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	requireOneLineError(t, c.run("restore", "--data", data), exitUsage, `"backup"`)
	requireOneLineError(t, c.run("restore", "--backup", filepath.Join(dir, "missing.db"), "--data", data), exitNotFound, "does not exist")
	requireOneLineError(t, c.run("restore", "--backup", dir, "--data", data), exitBadFile, "not a regular file")
	requireOneLineError(t, c.run("restore", "--backup", notSQLite, "--data", data), exitBadFile, "not a SQLite database")
	requireOneLineError(t, c.run("restore", "--backup", otherSQLite, "--data", data), exitBadFile, "not a syncd database")
	for _, p := range []string{data, data + "-wal", data + "-shm"} {
		require.NoFileExists(t, p, "a failed restore leaves nothing at --data")
	}

	require.NoError(t, os.WriteFile(data, []byte("the live database"), 0o600))
	requireOneLineError(t, c.run("restore", "--backup", otherSQLite, "--data", data), exitUsage, "exists", "move")
	b, err := os.ReadFile(data)
	require.NoError(t, err)
	require.Equal(t, "the live database", string(b))
}
