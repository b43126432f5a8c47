package client

import (
	"context"
	"database/sql"
	"errors"
)

// metaDatabaseID names the id of the database (welcome.database_id,
// PROTOCOL.md 5.2) the replica's records and cursor came from.
const metaDatabaseID = "database_id"

// databaseID returns the id of the database the replica was synced from;
// "" before the first sync, or for a replica made before it was recorded.
func (r *replica) databaseID(ctx context.Context) (string, error) {
	var id string
	err := r.db.QueryRowContext(ctx, `SELECT value FROM meta_text WHERE name = ?`, metaDatabaseID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return id, err
}

func (r *replica) setDatabaseID(ctx context.Context, id string) error {
	return r.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO meta_text (name, value) VALUES (?, ?)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`, metaDatabaseID, id)
		return err
	})
}

// otherDatabase reports whether the replica was synced from another
// database than the server's welcome names (the server was replaced, or
// restored into a new database, or the app points at another cluster): its
// cursor then means nothing to this server, and the bind must replace the
// replica by a snapshot. It says so in the log. An unknown id (a fresh
// replica, or one made before the id was recorded) is not another one.
func (c *Client) otherDatabase(ctx context.Context, id string) (bool, error) {
	had, err := c.replica.databaseID(ctx)
	if err != nil || had == "" || had == id {
		return false, err
	}
	c.log.Warn("the server's database is not the one this replica was synced from; resyncing from a snapshot",
		"replica_database_id", had, "server_database_id", id)
	return true, nil
}

// rememberDatabase records the database the replica now follows. The bind
// calls it once the replica's cursor is that database's (after the
// snapshot, when one was needed); a crash before it costs one more snapshot
// at most.
func (c *Client) rememberDatabase(ctx context.Context, id string) error {
	had, err := c.replica.databaseID(ctx)
	if err != nil || had == id {
		return err
	}
	if err := c.replica.setDatabaseID(ctx, id); err != nil {
		return err
	}
	c.statusChanged()
	return nil
}
