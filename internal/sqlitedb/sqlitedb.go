// Package sqlitedb opens SQLite databases the one way syncd trusts: the
// pragmas that decide durability are applied, in the order that makes them
// hold, on every connection the pool opens, and read back on that connection
// before it is used.
//
// It is a leaf (it imports nothing of syncd) so that the client side (queue,
// replica) and the server side share one implementation of this
// durability-critical step without depending on each other.
//
// # Schema versions
//
// It also holds the one schema-version scheme of every SQLite file the
// project writes: the file's PRAGMA user_version, moved only by Migrate.
// The code that opens a file owns one ordered list of Migrations for it
// (syncd's database: replication's migrations; a device's queue: the
// queue's), and calls Migrate with it on every open, before anything else
// reads the file. Migration i brings a file from version i to i+1, in one
// transaction that also sets the version; a file newer than the list is
// refused with a *NewerSchemaError naming both versions and left as it is.
//
// Adding a migration is one line appended to the owner's list, never an
// edit of an earlier one (files in the field already ran those):
//
//	var migrations = []sqlitedb.Migration{
//		adoptLayout1, // 0 -> 1
//		sqlitedb.Statements(`ALTER TABLE oplog ADD COLUMN scope_value TEXT`), // 1 -> 2
//	}
//
// then the schema goldens (testdata/schema_*.sql, go test -update) are
// regenerated, and the owner's test of every earlier version shows a file
// of each opening, migrating and reading back the same data.
package sqlitedb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/syncd-dev/syncd/internal/dirsync"
)

// Synchronous is the durability level of a SQLite database the project
// writes (PRAGMA synchronous): syncd's database, a device's queue and its
// replica. The zero value is Full. It is the one type of the concept:
// embedders name it as server.Synchronous (syncd's Config) and
// offlinequeue.Synchronous (a device's files), aliases of this type, with
// the constants those packages re-export.
type Synchronous int

const (
	// Full makes every returned commit survive a power cut. Default.
	Full Synchronous = iota
	// Normal survives a process crash but, under WAL, may roll back the
	// newest commits after a power cut.
	Normal
)

// ErrUnknownSynchronous is wrapped when a Synchronous value or name is
// neither Full nor Normal: a configuration error, refused before any file
// is touched.
var ErrUnknownSynchronous = errors.New("unknown Synchronous value")

// String returns the level as PRAGMA synchronous names it: "FULL" or
// "NORMAL" ("Synchronous(n)" for any other value).
func (s Synchronous) String() string {
	switch s {
	case Full:
		return "FULL"
	case Normal:
		return "NORMAL"
	}
	return fmt.Sprintf("Synchronous(%d)", int(s))
}

// ParseSynchronous returns the level named name: "full" or "normal" in any
// case. Any other name wraps ErrUnknownSynchronous.
func ParseSynchronous(name string) (Synchronous, error) {
	switch strings.ToUpper(name) {
	case "FULL":
		return Full, nil
	case "NORMAL":
		return Normal, nil
	}
	return 0, fmt.Errorf("%w %q: want FULL or NORMAL", ErrUnknownSynchronous, name)
}

// level is the number PRAGMA synchronous reads back as.
func (s Synchronous) level() (int64, error) {
	switch s {
	case Full:
		return 2, nil
	case Normal:
		return 1, nil
	}
	return 0, fmt.Errorf("%w %d: want FULL or NORMAL", ErrUnknownSynchronous, int(s))
}

// DefaultBusyTimeout bounds how long a connection waits for a lock held by
// another connection of the same database.
const DefaultBusyTimeout = 5 * time.Second

// Options configure Open. The zero value means Full, DefaultBusyTimeout,
// read-write, and no hooks.
type Options struct {
	// Synchronous is the durability level; the zero value is Full.
	Synchronous Synchronous
	// BusyTimeout bounds the wait for a lock held by another connection
	// (another process, an operator's tool). 0 means DefaultBusyTimeout; a
	// negative value is refused. It is rounded down to whole milliseconds,
	// but never below one.
	BusyTimeout time.Duration
	// ReadOnly opens an existing file read-only (operator tools, checkers):
	// nothing is created, the journal mode is not switched (the file must
	// already be in WAL mode), and writes fail.
	ReadOnly bool
	// Inspect, if set, runs on every new connection once busy_timeout,
	// synchronous and foreign_keys are set and before the switch to WAL,
	// which is the first step that can write to the file. It must only
	// read. An error refuses the file: the connection is closed, Open
	// returns that error (wrapped), and a file that existed is left
	// byte-for-byte as it was. Use it to refuse a database that belongs to
	// something else. QueryValue runs a query on the connection it is given.
	Inspect func(*sqlite3.SQLiteConn) error
	// NoAutoCheckpoint sets wal_autocheckpoint to 0 on every connection:
	// no commit checkpoints the log. The caller must then run the
	// checkpoints, with a Checkpointer its writers tell of their writes,
	// or the log grows without bound.
	NoAutoCheckpoint bool
	// Configure, if set, runs on every new connection after all of Open's
	// settings, for what a caller adds to a connection (commit hooks,
	// functions). The settings are read back after it, so a Configure that
	// undoes one of them fails the connection.
	Configure func(*sqlite3.SQLiteConn) error
}

// settings are validated Options.
type settings struct {
	Options
	busyMillis int64
	syncLevel  int64
}

func (o Options) settings() (settings, error) {
	level, err := o.Synchronous.level()
	if err != nil {
		return settings{}, err
	}
	switch {
	case o.BusyTimeout < 0:
		return settings{}, fmt.Errorf("negative BusyTimeout %v", o.BusyTimeout)
	case o.BusyTimeout == 0:
		o.BusyTimeout = DefaultBusyTimeout
	case o.BusyTimeout.Milliseconds() > math.MaxInt32:
		return settings{}, fmt.Errorf("BusyTimeout %v is beyond SQLite's limit of %d ms", o.BusyTimeout, math.MaxInt32)
	}
	return settings{Options: o, busyMillis: max(1, o.BusyTimeout.Milliseconds()), syncLevel: level}, nil
}

// Open opens the SQLite database at path, creating it and its missing
// directories unless o.ReadOnly. Invalid Options are refused before anything
// is created.
//
// Every connection the pool opens, now or later, is set up in this order:
//  1. busy_timeout, first: the switch to WAL needs an exclusive lock, so it
//     can itself meet a lock held by another connection and must wait.
//  2. synchronous, before journal_mode, so the level holds whether or not
//     the switch to WAL takes; foreign_keys on.
//  3. o.Inspect, before the switch to WAL rewrites the file's header.
//  4. journal_mode=WAL (not when ReadOnly); wal_autocheckpoint=0 if
//     o.NoAutoCheckpoint.
//  5. o.Configure.
//  6. busy_timeout, synchronous, foreign_keys, journal_mode and (if
//     o.NoAutoCheckpoint) wal_autocheckpoint are read back;
//     a connection on which one does not hold is closed and refused. WAL
//     fails to hold on file systems without shared memory (network and some
//     overlay mounts).
//
// Write transactions begin IMMEDIATE, so two of them never deadlock
// upgrading read locks, and a conflict waits under busy_timeout at BEGIN.
// Each connection caches its prepared statements.
//
// path may contain any character: it is made absolute and escaped into a
// SQLite URI, so '?', '#' and '%' stay part of the file name. When Open
// created the file it fsyncs the directory entries naming it and every
// directory it created (a file system that cannot sync a directory is not an
// error), since SQLite syncs the files it writes but not those entries.
//
// Open fails if the file is not a SQLite database. A failed Open has closed
// every connection it made.
func Open(ctx context.Context, path string, o Options) (*sql.DB, error) {
	db, err := open(ctx, path, o)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return db, nil
}

func open(ctx context.Context, path string, o Options) (*sql.DB, error) {
	s, err := o.settings()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	var toSync []string
	if !s.ReadOnly {
		if toSync, err = createDirs(abs); err != nil {
			return nil, err
		}
		created, err := createPrivate(abs)
		if err != nil {
			return nil, err
		}
		if created {
			toSync = append(toSync, filepath.Dir(abs))
		}
	}
	db := sql.OpenDB(connector{
		dsn: dsn(abs, s.ReadOnly),
		drv: &sqlite3.SQLiteDriver{ConnectHook: s.setUp},
	})
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	for _, dir := range toSync {
		if err := dirsync.Sync(dir); err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	return db, nil
}

// FileMode is the mode of database files Open creates: readable by their
// owner only (the data holds every tenant's values). SQLite gives the -wal
// and -shm files it creates the main file's mode.
const FileMode = 0o600

// createPrivate creates an empty database file at path with FileMode when
// none exists, so that SQLite never creates it with the process umask's
// wider mode, and reports whether it did.
func createPrivate(path string) (bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, FileMode)
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, f.Close()
}

// dsn is the driver's data source name for the file at absPath: a SQLite URI
// whose path is escaped so that '%', '?' and '#' in a file name stay part of
// it, followed by the driver's parameters.
func dsn(absPath string, readOnly bool) string {
	escaped := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(filepath.ToSlash(absPath))
	// The driver's statement cache keeps hot statements prepared across
	// calls: re-preparing them was a fifth of the server's apply path CPU.
	q := url.Values{"_txlock": {"immediate"}, "_stmt_cache_size": {"64"}}
	if readOnly {
		q.Set("mode", "ro")
	}
	return "file:" + escaped + "?" + q.Encode()
}

// setUp is the driver's connect hook: Open's steps 1 to 6. The driver's own
// DSN parameters are not used for the pragmas because the driver applies
// journal_mode before synchronous and runs nothing between them.
func (s settings) setUp(c *sqlite3.SQLiteConn) error {
	if err := exec(c,
		fmt.Sprintf("PRAGMA busy_timeout = %d", s.busyMillis),
		"PRAGMA synchronous = "+s.Synchronous.String(),
		"PRAGMA foreign_keys = ON",
	); err != nil {
		return err
	}
	if s.Inspect != nil {
		if err := s.Inspect(c); err != nil {
			return err
		}
	}
	if !s.ReadOnly {
		if err := exec(c, "PRAGMA journal_mode = WAL"); err != nil {
			return err
		}
	}
	if s.NoAutoCheckpoint {
		if err := exec(c, "PRAGMA wal_autocheckpoint = 0"); err != nil {
			return err
		}
	}
	if s.Configure != nil {
		if err := s.Configure(c); err != nil {
			return err
		}
	}
	return s.verify(c)
}

func exec(c *sqlite3.SQLiteConn, stmts ...string) error {
	for _, stmt := range stmts {
		if _, err := c.Exec(stmt, nil); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}

// verify reads the settings back and fails unless each holds.
func (s settings) verify(c *sqlite3.SQLiteConn) error {
	type want struct {
		pragma string
		value  int64
	}
	wants := []want{{"busy_timeout", s.busyMillis}, {"synchronous", s.syncLevel}, {"foreign_keys", 1}}
	if s.NoAutoCheckpoint {
		wants = append(wants, want{"wal_autocheckpoint", 0})
	}
	for _, want := range wants {
		got, err := QueryValue(c, "PRAGMA "+want.pragma)
		if err != nil {
			return fmt.Errorf("read %s back: %w", want.pragma, err)
		}
		if got != want.value {
			return fmt.Errorf("%s reads back as %v, want %d", want.pragma, got, want.value)
		}
	}
	got, err := QueryValue(c, "PRAGMA journal_mode")
	if err != nil {
		return fmt.Errorf("read journal_mode back: %w", err)
	}
	mode := fmt.Sprint(got)
	switch {
	case strings.EqualFold(mode, "wal"):
		return nil
	case s.ReadOnly:
		return fmt.Errorf(`journal_mode is %q, not "wal": a read-only open does not switch it; open the file read-write once`, mode)
	}
	return fmt.Errorf(`journal_mode is %q, not "wal": the file system does not support SQLite's WAL mode `+
		"(network and some overlay mounts do not); put the database on a local disk", mode)
}

// QueryValue runs query on a driver connection, such as the one an
// Options.Inspect or Options.Configure hook is given, and returns the first
// column of its first row. A query that returns no row or no column is an
// error. SQLite integers come back as int64 and text as string.
func QueryValue(c *sqlite3.SQLiteConn, query string) (driver.Value, error) {
	rows, err := c.Query(query, nil)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if len(rows.Columns()) == 0 {
		return nil, fmt.Errorf("%q returned no column", query)
	}
	dest := make([]driver.Value, len(rows.Columns()))
	if err := rows.Next(dest); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%q returned no row", query)
		}
		return nil, err
	}
	return dest[0], nil
}

// createDirs creates the missing directories above file and returns the
// directories to fsync once file exists: none if file already exists,
// otherwise its directory and the parent of every directory created here.
// A file whose state cannot be read is left to SQLite to report.
func createDirs(file string) ([]string, error) {
	if _, err := os.Lstat(file); !errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	dir := filepath.Dir(file)
	toSync := []string{dir}
	for d := dir; ; d = filepath.Dir(d) {
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		toSync = append(toSync, parent)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	return toSync, nil
}

// connector opens connections with one driver instance (and its hook)
// without registering a global driver name.
type connector struct {
	dsn string
	drv *sqlite3.SQLiteDriver
}

func (c connector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c connector) Driver() driver.Driver                        { return c.drv }
