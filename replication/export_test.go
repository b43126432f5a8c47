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
