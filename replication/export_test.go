package replication

import (
	"context"
	"database/sql"
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
	next := make([]Entry, len(es))
	for i, e := range es {
		if e.Seq == 0 {
			e.Seq = head + 1 + uint64(i)
		}
		next[i] = e
	}
	return l.appendAfter(ctx, tx, head, next)
}
