package server

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mattn/go-sqlite3"
)

// Synchronous is the SQLite durability level of syncd's database.
type Synchronous string

const (
	// SyncFull makes every acknowledged commit survive a power cut. Default.
	SyncFull Synchronous = "FULL"
	// SyncNormal survives a process crash but, under WAL, may roll back the
	// newest commits after a power cut: acknowledged results can be lost.
	SyncNormal Synchronous = "NORMAL"
)

// defaultBusyTimeout bounds how long a connection waits for a lock held by
// another connection of the same database.
const defaultBusyTimeout = 5 * time.Second

// openDB opens (creating if needed) the SQLite database at path with the
// pragmas applied in the order that makes them hold on every connection:
// busy_timeout first (switching to WAL itself needs a lock), then
// synchronous, then journal_mode=WAL, read back and checked.
//
// The driver's DSN parameters are not used for these because the driver
// applies journal_mode before synchronous.
func openDB(ctx context.Context, path string, sync Synchronous) (*sql.DB, error) {
	if sync == "" {
		sync = SyncFull
	}
	if sync != SyncFull && sync != SyncNormal {
		return nil, fmt.Errorf("open database: synchronous %q: want FULL or NORMAL", sync)
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("open database: %w", err)
		}
	}
	drv := &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		return applyPragmas(c, sync)
	}}
	// _txlock=immediate: every write transaction takes the write lock at
	// BEGIN, so two transactions never deadlock upgrading read locks.
	dsn := "file:" + path + "?_txlock=immediate"
	db := sql.OpenDB(connector{dsn: dsn, drv: drv})
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open database %s: %w", path, err)
	}
	return db, nil
}

func applyPragmas(c *sqlite3.SQLiteConn, sync Synchronous) error {
	stmts := []string{
		fmt.Sprintf("PRAGMA busy_timeout = %d", defaultBusyTimeout.Milliseconds()),
		"PRAGMA synchronous = " + string(sync),
		"PRAGMA journal_mode = WAL",
		"PRAGMA foreign_keys = ON",
	}
	for _, s := range stmts {
		if _, err := c.Exec(s, nil); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	mode, err := queryPragma(c, "journal_mode")
	if err != nil {
		return err
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal_mode is %q, want wal (is the file on a file system without shared memory?)", mode)
	}
	return nil
}

func queryPragma(c *sqlite3.SQLiteConn, name string) (string, error) {
	rows, err := c.Query("PRAGMA "+name, nil)
	if err != nil {
		return "", fmt.Errorf("read back %s: %w", name, err)
	}
	defer rows.Close()
	dest := make([]driver.Value, 1)
	if err := rows.Next(dest); err != nil {
		return "", fmt.Errorf("read back %s: %w", name, err)
	}
	return fmt.Sprint(dest[0]), nil
}

// connector opens connections with one driver instance (and its hook)
// without registering a global driver name.
type connector struct {
	dsn string
	drv *sqlite3.SQLiteDriver
}

func (c connector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c connector) Driver() driver.Driver                       { return c.drv }
