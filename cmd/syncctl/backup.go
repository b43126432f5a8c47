package main

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

// backupView is the --json output of syncctl backup.
type backupView struct {
	Data  string `json:"data"`
	Out   string `json:"out"`
	Bytes int64  `json:"bytes"`
}

func (a *app) backupCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backup --data FILE --out FILE",
		Short: "Take a consistent copy of syncd's database while it runs",
		Long: `Backup writes a consistent copy of syncd's database (SQLite's VACUUM INTO: one
read transaction, so syncd keeps writing meanwhile) to --out, which must not
exist. The copy is private (mode 0600: it holds every tenant's data), checked
(PRAGMA integrity_check) and durable (fsynced, then renamed into place) before
the command returns. syncctl restore puts it back.`,
		Args: exactArgs(0, "no arguments"),
	}
	data := cmd.Flags().String("data", "", "the database syncd's --data names (required)")
	out := cmd.Flags().String("out", "", "the backup file to write; it must not exist (required)")
	cmd.MarkFlagRequired("data")
	cmd.MarkFlagRequired("out")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		v, err := backup(*data, *out)
		if err != nil {
			return err
		}
		if a.json {
			return printJSON(a.stdout, v)
		}
		fmt.Fprintf(a.stdout, "backed up %s to %s (%d bytes, mode 0600)\n", v.Data, v.Out, v.Bytes)
		return nil
	}
	return cmd
}

// backup copies data to out by VACUUM INTO, through a private directory
// beside out so that the copy is never readable by others, not even while
// SQLite writes it. On any failure nothing is left at out.
func backup(data, out string) (backupView, error) {
	v := backupView{Data: data, Out: out}
	st, err := os.Stat(data)
	if errors.Is(err, os.ErrNotExist) {
		return v, failf(exitNotFound, "--data %s does not exist", data)
	}
	if err != nil {
		return v, err
	}
	if !st.Mode().IsRegular() {
		return v, failf(exitBadFile, "--data %s is not a regular file", data)
	}
	if _, err := os.Lstat(out); err == nil {
		return v, failf(exitUsage, "--out %s exists: a backup never replaces a file", out)
	}
	work, err := os.MkdirTemp(filepath.Dir(out), ".syncctl-backup-")
	if err != nil {
		return v, err
	}
	defer os.RemoveAll(work)
	tmp := filepath.Join(work, "copy.db")
	// Read-write but never created (mode=rw): a reader of a WAL database
	// needs its shared memory, which a read-only open of a stopped syncd's
	// database cannot create.
	db, err := sql.Open("sqlite3", "file:"+escapePath(data)+"?mode=rw&_busy_timeout=10000")
	if err != nil {
		return v, err
	}
	defer db.Close()
	if _, err := db.Exec(`VACUUM INTO ?`, tmp); err != nil {
		return v, failf(exitBadFile, "--data %s: %v", data, err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return v, err
	}
	if err := checkBackup(tmp); err != nil {
		return v, err
	}
	if err := syncNewFile(tmp); err != nil {
		return v, err
	}
	if err := os.Link(tmp, out); err != nil {
		if errors.Is(err, os.ErrExist) {
			return v, failf(exitUsage, "--out %s appeared while the backup ran; nothing replaced", out)
		}
		return v, err
	}
	if err := syncNewFile(out); err != nil {
		os.Remove(out)
		return v, err
	}
	fi, err := os.Stat(out)
	if err != nil {
		return v, err
	}
	v.Bytes = fi.Size()
	return v, nil
}

// escapePath makes a file path safe inside a SQLite URI (a '?' or '#' in
// it would end the path).
func escapePath(p string) string { return (&url.URL{Path: p}).EscapedPath() }
