package replication

import (
	"context"
	"database/sql"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
)

// DecideWrite exposes the per-write decision of Decide to the external tests.
var DecideWrite = decideWrite

// PutLogged exposes Records.putLogged, the Store's way of writing records.
func (r *Records) PutLogged(ctx context.Context, tx *sql.Tx, recs []Record) error {
	return r.putLogged(ctx, tx, recs)
}

// AppendNext appends es within tx as the log's next entries and returns
// them as logged: the tests' way of writing an oplog alone (the state
// machine assigns seqs itself when it decides). An entry whose Seq is 0
// gets the next seq; one whose Seq is set keeps it, and appendAfter
// refuses it unless it is the next.
func (l *SQLiteLog) AppendNext(ctx context.Context, tx *sql.Tx, es ...Entry) ([]Entry, error) {
	head, err := l.head(ctx, tx)
	if err != nil {
		return nil, err
	}
	return l.appendAfter(ctx, tx, head, numbered(es, head))
}

// numbered returns es as the entries after head: an entry whose Seq is 0
// gets its place's seq, one whose Seq is set keeps it (the log refuses it
// unless it is that seq).
func numbered(es []Entry, head uint64) []Entry {
	next := make([]Entry, len(es))
	for i, e := range es {
		if e.Seq == 0 {
			e.Seq = head + 1 + uint64(i)
		}
		next[i] = e
	}
	return next
}

// AppendNext appends es to m's oplog as its next entries, alone (no
// records, no ledger), and returns them as logged; it does not report the
// commit: the tests' way of writing the memory's oplog alone, as
// SQLiteLog.AppendNext is for SQLite. An entry whose Seq is 0 gets the
// next seq; a malformed entry (see ErrInvalidEntry) appends nothing.
func (m *Memory) AppendNext(es ...Entry) ([]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	logged, err := nextEntries(numbered(es, m.head), m.head, m.now)
	if err != nil {
		return nil, err
	}
	m.entries = append(m.entries, logged...)
	m.head = logged[len(logged)-1].Seq
	return logged, nil
}

// MigrateTo brings db's file to schema version n of this build's
// migrations (at most SchemaVersion()): the tests' way of making a file
// of an earlier version.
func MigrateTo(ctx context.Context, db *sql.DB, n int) error {
	_, err := sqlitedb.Migrate(ctx, db, migrations[:n])
	return err
}
