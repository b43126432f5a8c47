package replication_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mattn/go-sqlite3"
	"github.com/stretchr/testify/require"
)

// stmtLog records the statements run on the connections of a
// recordingConnector while on: the seam for counting a commit's
// statements. Each is kept as its first words (white space folded).
type stmtLog struct {
	mu    sync.Mutex
	on    bool
	stmts []string
}

func (l *stmtLog) ran(query string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.on {
		words := strings.Fields(query)
		l.stmts = append(l.stmts, strings.Join(words[:min(4, len(words))], " "))
	}
}

// record turns recording on, runs fn, and returns what ran meanwhile.
func (l *stmtLog) record(fn func()) []string {
	l.mu.Lock()
	l.on, l.stmts = true, nil
	l.mu.Unlock()
	fn()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on = false
	return l.stmts
}

// recordingConnector opens SQLite connections that report every statement
// run on them, direct or prepared, to log (BEGIN and COMMIT, which the
// driver runs itself, are not reported).
type recordingConnector struct {
	dsn string
	log *stmtLog
	drv sqlite3.SQLiteDriver
}

func (c *recordingConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return recordingConn{conn.(*sqlite3.SQLiteConn), c.log}, nil
}

func (c *recordingConnector) Driver() driver.Driver { return &c.drv }

type recordingConn struct {
	*sqlite3.SQLiteConn
	log *stmtLog
}

func (c recordingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.log.ran(query)
	return c.SQLiteConn.ExecContext(ctx, query, args)
}

func (c recordingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.log.ran(query)
	return c.SQLiteConn.QueryContext(ctx, query, args)
}

func (c recordingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	st, err := c.SQLiteConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return recordingStmt{st.(*sqlite3.SQLiteStmt), c.log, query}, nil
}

type recordingStmt struct {
	*sqlite3.SQLiteStmt
	log   *stmtLog
	query string
}

func (s recordingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.log.ran(s.query)
	return s.SQLiteStmt.ExecContext(ctx, args)
}

func (s recordingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.log.ran(s.query)
	return s.SQLiteStmt.QueryContext(ctx, args)
}

// TestOneWritePushStatements lists the statements of a one-write push's
// transaction as the committer runs it (replication.Apply between BEGIN
// and COMMIT), once its tenant and ledger scope exist: ten. The tenant's
// count (an upsert rewriting oplog_tenants and its index on counts) and
// the savepoint around the ledger's one INSERT (SAVEPOINT, RELEASE) are no
// longer among them; the tenant's row is only added when missing.
func TestOneWritePushStatements(t *testing.T) {
	log := &stmtLog{}
	db := sql.OpenDB(&recordingConnector{dsn: "file:" + filepath.Join(t.TempDir(), "syncd.db") + "?_txlock=immediate&_journal_mode=WAL", log: log})
	t.Cleanup(func() { db.Close() })
	st, conn := committerOf(t, db)
	start := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC).UnixMilli()
	push := func(i int) (stmts []string) {
		commitPush(t, conn, st, oneWrite(i, start+int64(i), []byte(`{"n":1}`)), func(apply func()) {
			stmts = log.record(apply)
		})
		return stmts
	}
	push(0) // the tenant's row, the ledger scope's row
	want := []string{
		"SELECT coalesce((SELECT seq FROM",     // the oplog's head
		"SELECT op_id, op_time, digest,",       // the ledger: the op's decision, if any
		"SELECT floor_ms FROM ledger_scopes",   // the ledger: the scope's floor
		"SELECT tenant, model, key,",           // the record
		"INSERT INTO oplog (seq,",              // the entry
		"INSERT INTO oplog_tenants (tenant,",   // the tenant's row if missing: no page written once it exists
		"UPDATE records_state SET applied_seq", // the applied seq
		"INSERT INTO records (tenant,",         // the record
		"SELECT counted_ms FROM ledger_meta",   // the ledger: which decisions its counts hold
		"INSERT INTO ledger_decisions (scope,", // the decision
	}
	for i := 1; i <= 3; i++ {
		require.Equal(t, want, push(i), "statements of push %d", i)
	}
}
