// Package sqlitedb opens SQLite databases the one way syncd trusts: the
// pragmas that decide durability are applied, in the order that makes them
// hold, on every connection the pool opens, and read back.
//
// It is a leaf (it imports nothing of syncd) so that the client side (queue,
// replica) and the server side share one implementation of this
// durability-critical step without depending on each other.
package sqlitedb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mattn/go-sqlite3"
)

// Synchronous is SQLite's durability level.
type Synchronous string

const (
	// Full makes every returned commit survive a power cut. Default.
	Full Synchronous = "FULL"
	// Normal survives a process crash but, under WAL, may roll back the
	// newest commits after a power cut.
	Normal Synchronous = "NORMAL"
)

// DefaultBusyTimeout bounds how long a connection waits for a lock held by
// another connection of the same database.
const DefaultBusyTimeout = 5 * time.Second

// Options configure Open. The zero value means Full and DefaultBusyTimeout.
type Options struct {
	Synchronous Synchronous
	BusyTimeout time.Duration
	// ReadOnly opens the file read-only (operator tools, checkers).
	ReadOnly bool
}

// Open opens (creating, with its directory, unless ReadOnly) the SQLite
// database at path. On every connection: busy_timeout first (switching to
// WAL itself needs a lock), then synchronous, then journal_mode=WAL, read
// back and checked; foreign keys on. Write transactions begin IMMEDIATE, so
// two of them never deadlock upgrading read locks. Each connection caches
// its prepared statements.
//
// The driver's own DSN parameters are not used for these pragmas because
// the driver applies journal_mode before synchronous.
func Open(ctx context.Context, path string, o Options) (*sql.DB, error) {
	if o.Synchronous == "" {
		o.Synchronous = Full
	}
	if o.Synchronous != Full && o.Synchronous != Normal {
		return nil, fmt.Errorf("open %s: synchronous %q: want FULL or NORMAL", path, o.Synchronous)
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = DefaultBusyTimeout
	}
	if !o.ReadOnly {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
	}
	drv := &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		return applyPragmas(c, o)
	}}
	// The driver's statement cache keeps hot statements prepared across
	// calls: re-preparing them was a fifth of the apply path's CPU.
	q := url.Values{"_txlock": {"immediate"}, "_stmt_cache_size": {"64"}}
	if o.ReadOnly {
		q.Set("mode", "ro")
	}
	db := sql.OpenDB(connector{dsn: "file:" + path + "?" + q.Encode(), drv: drv})
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return db, nil
}

func applyPragmas(c *sqlite3.SQLiteConn, o Options) error {
	stmts := []string{
		fmt.Sprintf("PRAGMA busy_timeout = %d", o.BusyTimeout.Milliseconds()),
		"PRAGMA synchronous = " + string(o.Synchronous),
	}
	if !o.ReadOnly {
		stmts = append(stmts, "PRAGMA journal_mode = WAL")
	}
	stmts = append(stmts, "PRAGMA foreign_keys = ON")
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
