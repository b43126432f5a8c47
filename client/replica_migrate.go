package client

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/internal/crashpoint"
	"github.com/syncd-dev/syncd/internal/sqlitedb"
)

// Migrating a device's replica (and its outcome store, which lives in the
// same tables) is crash-safe: in a file of its own every schema version
// is one transaction with its user_version (sqlitedb.Migrate); in a SQLite
// queue's file every missing version runs in one transaction of the
// queue's committer with the meta row metaReplicaSchema (migrateShared).
// A process killed at any step leaves the file at the version before the
// transaction or after it, never between: TestKillDuringDeviceMigration
// kills a child at every crashpoint step of opening each golden file of
// an earlier release and replays what it left against a real syncd.

// replicaSchemaStatements are replicaSchema's statements, in order, which
// migration 1 runs one at a time (each a crashpoint step). replicaSchema
// holds no semicolon but the ones that end its statements.
func replicaSchemaStatements() []string {
	var out []string
	for stmt := range strings.SplitSeq(replicaSchema, ";") {
		if stmt = strings.TrimSpace(stmt); stmt != "" {
			out = append(out, stmt)
		}
	}
	return out
}

// setMigratedVersion records, in the migration's transaction of a
// replica in a queue's file, that its tables are at the newest version
// this build knows, having been at from.
func setMigratedVersion(ctx context.Context, tx *sql.Tx, from int) error {
	if err := setMeta(ctx, tx, metaReplicaSchema, uint64(len(replicaMigrations))); err != nil {
		return err
	}
	crashpoint.Reach(fmt.Sprintf("replica schema version %d (from %d) set, not committed", len(replicaMigrations), from))
	return nil
}

// newerReplica turns the refusal of a replica written by a newer build
// into the error every device file of a newer build is refused with
// (*offlinequeue.NewerFormatError, naming both versions); other errors
// pass unchanged.
func newerReplica(err error) error {
	if ne, ok := errors.AsType[*sqlitedb.NewerSchemaError](err); ok {
		return &offlinequeue.NewerFormatError{Format: "replica schema", File: ne.File, Known: ne.Known}
	}
	return err
}
