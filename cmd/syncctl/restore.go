package main

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/internal/datalock"
	"github.com/syncd-dev/syncd/internal/dirsync"
	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/replication"
)

// restoreView is the --json output of syncctl restore.
type restoreView struct {
	Backup      string `json:"backup"`
	Data        string `json:"data"`
	Head        uint64 `json:"head"`
	OldID       string `json:"old_database_id"`
	DatabaseID  string `json:"database_id"`
	BackupBytes int64  `json:"backup_bytes"`
	Devices     string `json:"devices"`
}

const restoreDevices = "every device resyncs from a snapshot at its next connection, keeping its queued writes; writes acknowledged after the backup was taken are gone"

func (a *app) restoreCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "restore --backup FILE --data FILE [--move-aside DIR]",
		Short: "Put a backup of syncd's database in place, under a new database id",
		Long: `Restore copies a backup of syncd's database (sqlite3 .backup or VACUUM INTO, see
docs/operations.md) to the path syncd's --data names, after checking it, and
gives the copy a new database id. Run it with syncd stopped (it refuses while
a syncd holds the database's lock); --move-aside DIR first moves the old
database and whichever of its -wal and -shm files exist into DIR (created,
mode 0700); without it, restore refuses a --data that exists.

The new id is what makes a restore safe for devices. The restored oplog gives
its next seqs to other writes than the ones devices saw after the backup was
taken; a device that kept such a cursor would resume from it, silently missing
writes, once the head passed it again. With a new id every device sees another
database at its next connection and resyncs from a snapshot, keeping its
queued writes. Writes acknowledged after the backup was taken are gone.`,
		Args: exactArgs(0, "no arguments"),
	}
	backup := cmd.Flags().String("backup", "", "the backup file to restore (required)")
	data := cmd.Flags().String("data", "", "the database path syncd's --data names; it must not exist unless --move-aside (required)")
	aside := cmd.Flags().String("move-aside", "", "move the database at --data and its -wal and -shm files into this directory first (created if missing)")
	cmd.MarkFlagRequired("backup")
	cmd.MarkFlagRequired("data")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := datalock.Check(*data); err != nil {
			var held *datalock.ErrHeld
			if errors.As(err, &held) {
				return failf(exitUsage, "--data %s: syncd is running on it (%v); stop it first", *data, err)
			}
			return err
		}
		if *aside != "" {
			if err := moveAside(*data, *aside); err != nil {
				return err
			}
		}
		v, err := restore(cmd, *backup, *data)
		if err != nil {
			return err
		}
		if a.json {
			return printJSON(a.stdout, v)
		}
		fmt.Fprintf(a.stdout, "restored %s into %s: oplog head %d, database id %s -> %s\n%s.\n",
			v.Backup, v.Data, v.Head, v.OldID, v.DatabaseID, restoreDevices)
		return nil
	}
	return cmd
}

// restore checks backup, copies it to data (a new file) and gives the copy
// a new database id. On any failure nothing is left at data.
func restore(cmd *cobra.Command, backup, data string) (v restoreView, err error) {
	ctx := cmd.Context()
	v = restoreView{Backup: backup, Data: data, Devices: restoreDevices}
	for _, p := range []string{data, data + "-wal", data + "-shm"} {
		if _, err := os.Lstat(p); err == nil {
			return v, failf(exitUsage, "--data %s exists: stop syncd and move the database and its -wal and -shm files aside first", p)
		}
	}
	st, err := os.Stat(backup)
	if errors.Is(err, os.ErrNotExist) {
		return v, failf(exitNotFound, "--backup %s does not exist", backup)
	}
	if err != nil {
		return v, err
	}
	if !st.Mode().IsRegular() {
		return v, failf(exitBadFile, "--backup %s is not a regular file", backup)
	}
	v.BackupBytes = st.Size()
	if err := checkBackup(backup); err != nil {
		return v, err
	}
	if _, err := copyFile(backup, data); err != nil {
		if !errors.Is(err, os.ErrExist) {
			os.Remove(data) // a part copied; it was not there before
		}
		return v, fmt.Errorf("copy %s to %s: %w", backup, data, err)
	}
	defer func() {
		if err != nil {
			for _, p := range []string{data, data + "-wal", data + "-shm"} {
				os.Remove(p)
			}
		}
	}()
	if err := syncNewFile(data); err != nil {
		return v, err
	}
	db, err := sqlitedb.Open(ctx, data, sqlitedb.Options{})
	if err != nil {
		return v, failf(exitBadFile, "open the copy %s: %v", data, err)
	}
	defer db.Close()
	if err := db.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM oplog`).Scan(&v.Head); err != nil {
		return v, failf(exitBadFile, "--backup %s: no oplog: %v", backup, err)
	}
	v.OldID, v.DatabaseID, err = replication.Reidentify(ctx, db)
	if errors.Is(err, replication.ErrNotSyncdDatabase) {
		return v, failf(exitBadFile, "--backup %s: %v", backup, err)
	}
	if err != nil {
		return v, err
	}
	return v, db.Close()
}

// moveAside moves the database at data and whichever of its -wal and -shm
// files exist into dir, creating it (0700), and refuses to overwrite
// anything already there.
func moveAside(data, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("--move-aside %s: %w", dir, err)
	}
	last := ""
	for _, p := range []string{data, data + "-wal", data + "-shm"} {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			continue
		}
		to := filepath.Join(dir, filepath.Base(p))
		if _, err := os.Lstat(to); err == nil {
			return failf(exitUsage, "--move-aside %s already holds %s: choose an empty directory", dir, filepath.Base(p))
		}
		if err := os.Rename(p, to); err != nil {
			return fmt.Errorf("--move-aside: %w", err)
		}
		last = to
	}
	if last == "" {
		return nil
	}
	// The renames are durable once both directories are.
	if err := syncNewFile(last); err != nil {
		return err
	}
	return dirsync.Sync(filepath.Dir(data))
}

// checkBackup refuses a file SQLite finds damaged, or that is not SQLite.
func checkBackup(path string) error {
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro&immutable=1")
	if err != nil {
		return err
	}
	defer db.Close()
	var result string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&result); err != nil {
		return failf(exitBadFile, "--backup %s is not a SQLite database: %v", path, err)
	}
	if result != "ok" {
		return failf(exitBadFile, "--backup %s is damaged: integrity_check says %s", path, result)
	}
	return nil
}

// syncNewFile makes a file just written at path durable: its contents and
// its entry in its directory.
func syncNewFile(path string) error {
	for _, p := range []string{path, filepath.Dir(path)} {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
