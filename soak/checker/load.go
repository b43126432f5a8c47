package checker

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/soak/journal"
	"github.com/syncd-dev/syncd/syncproto"
)

// Layout says where a soak run left its state.
type Layout struct {
	// ServerDB is syncd's SQLite database; Policies its declared models.
	ServerDB string
	Policies map[string]string
	// Scopes are the scopes syncd declares (nil: none).
	Scopes  []Scope
	Clients []ClientLayout
	// Process is syncd's goroutine and file counts, measured by the
	// harness while syncd ran (the one part of the state not in a file).
	Process Process
}

// ClientLayout names one client's files.
type ClientLayout struct {
	ID, Tenant string
	Read       []string
	// User, Grants and Want are its token's user and scope grants and its
	// request (Client).
	User      string
	Grants    syncproto.ScopeSet
	Want      syncproto.ScopeSet
	QueueKind string // ndjson, sqlite or memory
	QueuePath string
	// ReplicaPath is the replica's own file. When a SQLite queue's file
	// holds the replica's tables (a client over offlinequeue.SQLite keeps
	// them there, client.Config.ReplicaPath), that file is read instead.
	ReplicaPath string
	JournalPath string
}

// Queue kinds.
const (
	QueueNDJSON = "ndjson"
	QueueSQLite = "sqlite"
	QueueMemory = "memory"
)

// pageSize is how many queue items Load reads at a time.
const pageSize = 500

// Load reads the state a run left. Every process must have stopped: the
// server database, replicas and SQLite queues are opened read-only for the
// integrity checks and reads; an NDJSON queue is read through its own
// loader (which takes its lock and may compact it: the same state,
// rewritten). A file that cannot be read is an error, except that a damaged
// database or queue is recorded in its Integrity field for the checker to
// judge.
func Load(ctx context.Context, l Layout) (*State, error) {
	s := &State{Process: l.Process}
	var err error
	if s.Server, err = loadServer(ctx, l.ServerDB); err != nil {
		return nil, fmt.Errorf("load syncd database: %w", err)
	}
	s.Server.Policies, s.Server.Scopes = l.Policies, l.Scopes
	for _, cl := range l.Clients {
		c, err := loadClient(ctx, cl)
		if err != nil {
			return nil, fmt.Errorf("load client %s: %w", cl.ID, err)
		}
		s.Clients = append(s.Clients, c)
	}
	return s, nil
}

func openReadOnly(ctx context.Context, path string) (*sql.DB, error) {
	return sqlitedb.Open(ctx, path, sqlitedb.Options{ReadOnly: true})
}

func integrityCheck(ctx context.Context, db *sql.DB) []string {
	rows, err := db.QueryContext(ctx, `PRAGMA integrity_check`)
	if err != nil {
		return []string{"integrity_check failed: " + err.Error()}
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return []string{"integrity_check failed: " + err.Error()}
		}
		out = append(out, line)
	}
	if err := rows.Err(); err != nil {
		return []string{"integrity_check failed: " + err.Error()}
	}
	return out
}

// each runs query and calls scan for every row.
func each(ctx context.Context, db *sql.DB, query string, scan func(*sql.Rows) error) error {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func timestamp(wall int64, logical int64, origin string) syncproto.Timestamp {
	return syncproto.Timestamp{Wall: wall, Logical: uint32(logical), Origin: origin}
}

// loadServer reads syncd's tables (oplog, records, records_state,
// ledger_decisions, ledger_meta, conflicts) as the replication and ledger
// packages lay them out.
func loadServer(ctx context.Context, path string) (Server, error) {
	var s Server
	db, err := openReadOnly(ctx, path)
	if err != nil {
		return s, err
	}
	defer db.Close()
	s.Integrity = integrityCheck(ctx, db)
	err = each(ctx, db, `SELECT seq, tenant, model, key, op_id, op, value, version, wall, logical, origin, client_id,
			coalesce(scope_old, ''), coalesce(scope_value, ''), coalesce(member, ''), grants FROM oplog ORDER BY seq`,
		func(r *sql.Rows) error {
			var e OplogEntry
			var wall, logical int64
			var origin string
			var grants []byte
			if err := r.Scan(&e.Seq, &e.Tenant, &e.Model, &e.Key, &e.OpID, &e.Op, &e.Value, &e.Version, &wall, &logical, &origin, &e.ClientID,
				&e.ScopeOld, &e.ScopeValue, &e.Member, &grants); err != nil {
				return err
			}
			if grants != nil {
				if err := json.Unmarshal(grants, &e.Grants); err != nil {
					return fmt.Errorf("grants of seq %d: %w", e.Seq, err)
				}
			}
			e.HLC = timestamp(wall, logical, origin)
			s.Oplog = append(s.Oplog, e)
			return nil
		})
	if err != nil {
		return s, fmt.Errorf("oplog: %w", err)
	}
	if err := db.QueryRowContext(ctx, `SELECT seq FROM sqlite_sequence WHERE name = 'oplog'`).Scan(&s.Head); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return s, fmt.Errorf("oplog head: %w", err)
	}
	if err := db.QueryRowContext(ctx, `SELECT applied_seq FROM records_state WHERE id = 1`).Scan(&s.AppliedSeq); err != nil {
		return s, fmt.Errorf("records_state: %w", err)
	}
	err = each(ctx, db, `SELECT tenant, model, key, value, version, wall, logical, origin, deleted, op_id, seq, coalesce(scope_value, ''), coalesce(member, '') FROM records`,
		func(r *sql.Rows) error {
			var rec Record
			var wall, logical int64
			var origin string
			if err := r.Scan(&rec.Tenant, &rec.Model, &rec.Key, &rec.Value, &rec.Version, &wall, &logical, &origin, &rec.Deleted, &rec.OpID, &rec.Seq, &rec.ScopeValue, &rec.Member); err != nil {
				return err
			}
			rec.HLC = timestamp(wall, logical, origin)
			s.Records = append(s.Records, rec)
			return nil
		})
	if err != nil {
		return s, fmt.Errorf("records: %w", err)
	}
	err = each(ctx, db, `SELECT scope, op_id, result FROM ledger_decisions`, func(r *sql.Rows) error {
		var d Decision
		var result []byte
		if err := r.Scan(&d.Tenant, &d.OpID, &result); err != nil {
			return err
		}
		if err := json.Unmarshal(result, &d.Result); err != nil {
			return fmt.Errorf("decision of %s: %w", d.OpID, err)
		}
		s.Ledger = append(s.Ledger, d)
		return nil
	})
	if err != nil {
		return s, fmt.Errorf("ledger: %w", err)
	}
	var base sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT floor_ms FROM ledger_meta WHERE id = 1`).Scan(&base); err != nil {
		return s, fmt.Errorf("ledger base floor: %w", err)
	}
	if base.Valid {
		s.LedgerBaseFloor = time.UnixMilli(base.Int64)
	}
	s.LedgerFloors = map[string]time.Time{}
	err = each(ctx, db, `SELECT scope, floor_ms FROM ledger_scopes WHERE floor_ms IS NOT NULL`, func(r *sql.Rows) error {
		var tenant string
		var floor int64
		if err := r.Scan(&tenant, &floor); err != nil {
			return err
		}
		s.LedgerFloors[tenant] = time.UnixMilli(floor)
		return nil
	})
	if err != nil {
		return s, fmt.Errorf("ledger floors: %w", err)
	}
	err = each(ctx, db, `SELECT tenant, model, key, policy, reason, loser_op_id, loser_version, loser_hlc, winner_op_id, winner_version, winner_hlc FROM conflicts ORDER BY id`,
		func(r *sql.Rows) error {
			var c Conflict
			var loser, winner string
			if err := r.Scan(&c.Tenant, &c.Model, &c.Key, &c.Policy, &c.Reason, &c.LoserOpID, &c.LoserVersion, &loser, &c.WinnerOpID, &c.WinnerVersion, &winner); err != nil {
				return err
			}
			var err error
			if c.LoserHLC, err = syncproto.ParseTimestamp(loser); err != nil {
				return fmt.Errorf("conflict loser hlc: %w", err)
			}
			if c.WinnerHLC, err = syncproto.ParseTimestamp(winner); err != nil {
				return fmt.Errorf("conflict winner hlc: %w", err)
			}
			s.Conflicts = append(s.Conflicts, c)
			return nil
		})
	if err != nil {
		return s, fmt.Errorf("conflicts: %w", err)
	}
	return s, nil
}

func loadClient(ctx context.Context, l ClientLayout) (Client, error) {
	c := Client{ID: l.ID, Tenant: l.Tenant, Read: l.Read, User: l.User, Grants: l.Grants, Want: l.Want}
	var err error
	if c.Journal, err = journal.Read(l.JournalPath); err != nil {
		return c, err
	}
	if c.Queue, err = loadQueue(ctx, l.QueueKind, l.QueuePath); err != nil {
		return c, fmt.Errorf("queue: %w", err)
	}
	replicaPath := l.ReplicaPath
	if l.QueueKind == QueueSQLite && holdsReplica(ctx, l.QueuePath) {
		replicaPath = l.QueuePath
	}
	if c.Replica, err = loadReplica(ctx, replicaPath); err != nil {
		return c, fmt.Errorf("replica: %w", err)
	}
	return c, nil
}

// loadQueue reads a queue's pending items and dead letters through its own
// implementation. A queue that does not open is recorded as unsound, not an
// error: invariant 5 judges it.
func loadQueue(ctx context.Context, kind, path string) (Queue, error) {
	q := Queue{Kind: kind}
	var oq offlinequeue.Queue
	switch kind {
	case QueueMemory:
		q.Integrity = []string{"ok"} // it died with its process; nothing to read
		return q, nil
	case QueueSQLite:
		db, err := openReadOnly(ctx, path)
		if err != nil {
			q.Integrity = []string{err.Error()}
			return q, nil
		}
		q.Integrity = integrityCheck(ctx, db)
		db.Close()
		if oq, err = offlinequeue.OpenSQLite(path, offlinequeue.SQLiteOptions{}); err != nil {
			q.Integrity = append(q.Integrity, "open: "+err.Error())
			return q, nil
		}
	case QueueNDJSON:
		f, err := offlinequeue.OpenFile(path, offlinequeue.FileOptions{})
		if err != nil {
			q.Integrity = []string{"open: " + err.Error()}
			return q, nil
		}
		q.Integrity = []string{"ok"}
		oq = f
	default:
		return q, fmt.Errorf("unknown queue kind %q", kind)
	}
	defer oq.Close()
	var after offlinequeue.ID
	for {
		items, err := oq.Peek(ctx, after, pageSize)
		if err != nil {
			return q, err
		}
		if len(items) == 0 {
			break
		}
		for _, it := range items {
			q.Pending = append(q.Pending, QueueItem{ID: uint64(it.ID), OpID: it.Key, Attempts: uint32(it.Attempts)})
		}
		after = items[len(items)-1].ID
	}
	after = 0
	for {
		dead, err := oq.DeadLetters(ctx, after, pageSize)
		if err != nil {
			return q, err
		}
		if len(dead) == 0 {
			break
		}
		for _, d := range dead {
			q.DeadLetters = append(q.DeadLetters, DeadLetter{QueueItem: QueueItem{ID: uint64(d.ID), OpID: d.Key, Attempts: uint32(d.Attempts)}, Reason: d.Reason})
		}
		after = dead[len(dead)-1].ID
	}
	return q, nil
}

// loadReplica reads the client replica's tables (records, pending,
// outcomes, meta) as the client package lays them out.
// holdsReplica reports whether the SQLite file at path has the replica's
// records table. A file that does not open holds none.
func holdsReplica(ctx context.Context, path string) bool {
	db, err := openReadOnly(ctx, path)
	if err != nil {
		return false
	}
	defer db.Close()
	var n int
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'records'`).Scan(&n)
	return err == nil && n > 0
}

func loadReplica(ctx context.Context, path string) (Replica, error) {
	r := Replica{Outcomes: map[string]Outcome{}}
	db, err := openReadOnly(ctx, path)
	if err != nil {
		return r, err
	}
	defer db.Close()
	r.Integrity = integrityCheck(ctx, db)
	err = each(ctx, db, `SELECT model, key, value, version, deleted FROM records`, func(rows *sql.Rows) error {
		var rec ReplicaRecord
		if err := rows.Scan(&rec.Model, &rec.Key, &rec.Value, &rec.Version, &rec.Deleted); err != nil {
			return err
		}
		r.Records = append(r.Records, rec)
		return nil
	})
	if err != nil {
		return r, fmt.Errorf("records: %w", err)
	}
	err = each(ctx, db, `SELECT op_id FROM pending ORDER BY queue_id`, func(rows *sql.Rows) error {
		var op string
		if err := rows.Scan(&op); err != nil {
			return err
		}
		r.Pending = append(r.Pending, op)
		return nil
	})
	if err != nil {
		return r, fmt.Errorf("pending: %w", err)
	}
	err = each(ctx, db, `SELECT op_id, model, key, status, version, seq, reason, rebased_as, decided_at FROM outcomes`, func(rows *sql.Rows) error {
		var o Outcome
		var decided int64
		if err := rows.Scan(&o.OpID, &o.Model, &o.Key, &o.Status, &o.Version, &o.Seq, &o.Reason, &o.RebasedAs, &decided); err != nil {
			return err
		}
		o.DecidedAt = time.UnixMilli(decided)
		r.Outcomes[o.OpID] = o
		return nil
	})
	if err != nil {
		return r, fmt.Errorf("outcomes: %w", err)
	}
	if err := db.QueryRowContext(ctx, `SELECT value FROM meta WHERE name = 'cursor'`).Scan(&r.Cursor); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("cursor: %w", err)
	}
	return r, nil
}
