package replication

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/syncd-dev/syncd/ledger"
)

// State is where batches are decided and carried out: one transaction of a
// store. Load reads the View a batch is decided against; Save writes the
// Effects of its decision. Apply runs the three steps.
type State interface {
	Load(ctx context.Context, b *Batch) (View, error)
	Save(ctx context.Context, fx *Effects) error
}

// Apply decides b against st and carries the decision out in st: the
// state machine's one step. On error nothing of b is to be kept (the
// caller rolls its transaction back).
func Apply(ctx context.Context, st State, b *Batch) (Effects, error) {
	v, err := st.Load(ctx, b)
	if err != nil {
		return Effects{}, err
	}
	fx, err := Decide(v, *b)
	if err != nil {
		return Effects{}, err
	}
	if err := st.Save(ctx, &fx); err != nil {
		return Effects{}, err
	}
	return fx, nil
}

// StoreOptions configures a Store. The zero value means the packages'
// defaults and time.Now.
type StoreOptions struct {
	Ledger    ledger.Options
	Log       Retention
	Conflicts Retention
	// Now is the reference for retention (and stamps rows written outside
	// a batch, which only tests do); nil means time.Now.
	Now func() time.Time
	// ID is the identity the database must have: a cluster's id, which
	// every node's database takes. "" means the database keeps the id it
	// has, or gets a random one when new.
	ID string
	// Scopes are the declared scopes (partial sync): writes of the models
	// they cover are checked and stamped with scope values. nil: none.
	Scopes *Scopes
	// Checkpoints, when the database was opened without checkpoints on
	// commit (internal/sqlitedb's NoAutoCheckpoint), runs them: the
	// store's writer (a single node's committer, a cluster node's
	// materializer) calls Store.Wrote after each write transaction. nil
	// means the database checkpoints on commit.
	Checkpoints Checkpointer
}

// Checkpointer is told of each write transaction of a store's writer, so
// that the database's checkpoints run beside the writer rather than inside
// its commits (internal/sqlitedb's Checkpointer is one). weight is about
// the transaction's size (CheckpointWeight).
type Checkpointer interface{ Wrote(weight int) }

// ErrOtherDatabase is wrapped by OpenStore when the database holds another
// identity than StoreOptions.ID: it belongs to another cluster (or another
// single node). Nothing was changed; point the node at its own data
// directory, or start it empty to restore from the cluster's snapshot.
var ErrOtherDatabase = errors.New("database belongs to another cluster")

// Store is the state machine's SQLite state: the records, the oplog, the
// conflict log and the replay ledger, in one database, so that a batch's
// decision commits in one transaction. The handle stays the caller's.
type Store struct {
	DB        *sql.DB
	Records   *Records
	Log       *SQLiteLog
	Conflicts *ConflictLog
	Ledger    *ledger.SQL
	// ID names this database (see Identity).
	ID string
	// SchemaVersion is the database's schema version, SchemaVersion()
	// once OpenStore returns; MigratedFrom the version OpenStore found
	// (equal when nothing ran; 0 for a new file or one of a release before
	// versions).
	SchemaVersion, MigratedFrom int
	// Checkpoints is StoreOptions.Checkpoints; the writer reaches it
	// through Wrote.
	Checkpoints Checkpointer
	// Scopes is StoreOptions.Scopes.
	Scopes *Scopes
	// ScopesReindexed counts the records whose scope value or member
	// changed at open because the declarations changed (Records.Reindex);
	// when positive on a single node, the database got a new ID.
	ScopesReindexed int
}

// Wrote tells the store's checkpointer, if any, of a write transaction of
// weight (CheckpointWeight). Only the store's writer calls it, after the
// transaction ended and before the next begins: with internal/sqlitedb's
// Checkpointer it never waits for the checkpoint running beside the
// writer, and copies into the database at most InlineFrames frames (what
// that checkpoint left, so that the log starts over), except when the log
// reached the checkpointer's LimitLogPages.
func (s *Store) Wrote(weight int) {
	if s.Checkpoints != nil {
		s.Checkpoints.Wrote(weight)
	}
}

// OpenStore brings db's file to this build's schema version (Migrate) and
// returns the store. A file of a newer version is refused, unchanged, with
// an error wrapping *sqlitedb.NewerSchemaError (ErrNewerSchema). db is
// opened as internal/sqlitedb opens it.
func OpenStore(ctx context.Context, db *sql.DB, o StoreOptions) (*Store, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Ledger.Now == nil {
		o.Ledger.Now = o.Now
	}
	found, err := Migrate(ctx, db)
	if err != nil {
		return nil, err
	}
	s := &Store{DB: db, Checkpoints: o.Checkpoints, SchemaVersion: SchemaVersion(), MigratedFrom: found, Scopes: o.Scopes}
	if s.Ledger, err = ledger.NewSQL(ctx, db, o.Ledger); err != nil {
		return nil, err
	}
	if s.Records, err = NewRecords(ctx, db); err != nil {
		return nil, err
	}
	if s.ScopesReindexed, err = s.Records.Reindex(ctx, o.Scopes); err != nil {
		return nil, err
	}
	if s.Log, err = NewSQLiteLog(ctx, db, LogOptions{Retention: o.Log, Now: o.Now}); err != nil {
		return nil, err
	}
	if s.Conflicts, err = NewConflictLog(ctx, db, ConflictLogOptions{Retention: o.Conflicts, Now: o.Now}); err != nil {
		return nil, err
	}
	if s.ID, err = identity(ctx, db, o.ID); err != nil {
		return nil, err
	}
	if s.ScopesReindexed > 0 && o.ID == "" {
		// What devices may see changed under their cursors: a new id makes
		// every device resync from a snapshot at its next welcome, so none
		// keeps rows the new declarations no longer give it. (A cluster's
		// id is the cluster's; its operator changes declarations as
		// docs/operations.md says.)
		if _, s.ID, err = Reidentify(ctx, db); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// identity returns the id of the database behind db, creating it the first
// time (want, or a random UUID). A fresh database gets a new one, so a
// client's cursor from another database is never mistaken for a position
// in this one; a copy keeps its id, and a restore gives it a new one
// (Reidentify).
func identity(ctx context.Context, db *sql.DB, want string) (string, error) {
	id := want
	if id == "" {
		id = uuid.NewString()
	}
	if _, err := db.ExecContext(ctx, `INSERT OR IGNORE INTO syncd_meta (name, value) VALUES ('database_id', ?)`, id); err != nil {
		return "", fmt.Errorf("store database id: %w", err)
	}
	if err := db.QueryRowContext(ctx, `SELECT value FROM syncd_meta WHERE name = 'database_id'`).Scan(&id); err != nil {
		return "", fmt.Errorf("read database id: %w", err)
	}
	if want != "" && id != want {
		return "", fmt.Errorf("open store: %w: it is %s, not %s", ErrOtherDatabase, id, want)
	}
	return id, nil
}

// ErrNotSyncdDatabase is returned by Reidentify for a database that has no
// syncd identity.
var ErrNotSyncdDatabase = errors.New("not a syncd database (no database_id in syncd_meta)")

// Reidentify gives the database behind db a new random id and returns the
// old and the new one. A database restored from a backup must get one
// before syncd serves it (syncctl restore does it): the restored oplog
// gives its next seqs to other writes than the ones devices saw before the
// restore, so a device whose cursor came from the lost history would
// resume from it, silently missing writes, once the head passes it again.
// With a new id every device sees another database at its next welcome
// and resyncs from a snapshot, keeping its queued writes. Run it with
// syncd stopped; its cluster nodes must not share the restored file.
func Reidentify(ctx context.Context, db *sql.DB) (old, id string, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return "", "", fmt.Errorf("reidentify: %w", err)
	}
	defer tx.Rollback()
	err = tx.QueryRowContext(ctx, `SELECT value FROM syncd_meta WHERE name = 'database_id'`).Scan(&old)
	if errors.Is(err, sql.ErrNoRows) || (err != nil && strings.Contains(err.Error(), "no such table")) {
		return "", "", ErrNotSyncdDatabase
	}
	if err != nil {
		return "", "", fmt.Errorf("reidentify: read database id: %w", err)
	}
	id = uuid.NewString()
	if _, err := tx.ExecContext(ctx, `UPDATE syncd_meta SET value = ? WHERE name = 'database_id'`, id); err != nil {
		return "", "", fmt.Errorf("reidentify: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return "", "", fmt.Errorf("reidentify: %w", err)
	}
	return old, id, nil
}

// In returns the State of s inside tx, a write transaction of s.DB. The
// oplog must be appended to in tx only through it (Apply): it reads the
// head once and follows what it appends.
func (s *Store) In(tx *sql.Tx) State {
	return &sqlState{s: s, tx: tx, ledger: s.Ledger.In(tx)}
}

// Committed reports a commit that appended up to head to the change feed's
// waiters (SQLiteLog.Committed). Call it after every commit that appended.
func (s *Store) Committed(head uint64) { s.Log.Committed(head) }

// sqlState is a Store inside one write transaction.
type sqlState struct {
	s      *Store
	tx     *sql.Tx
	ledger ledger.Tx
	// head is the oplog's head in tx once read (headRead): within its own
	// write transaction only Save moves it, so it is read once per
	// transaction, not by every Load and Save.
	head     uint64
	headRead bool
}

// logHead returns the oplog's head in tx.
func (st *sqlState) logHead(ctx context.Context) (uint64, error) {
	if !st.headRead {
		head, err := st.s.Log.head(ctx, st.tx)
		if err != nil {
			return 0, err
		}
		st.head, st.headRead = head, true
	}
	return st.head, nil
}

func (st *sqlState) Load(ctx context.Context, b *Batch) (View, error) {
	v := View{}
	var err error
	if v.Head, err = st.logHead(ctx); err != nil {
		return View{}, fmt.Errorf("load batch: %w", err)
	}
	if v.Ledger, err = lookupBatch(ctx, st.ledger, b); err != nil {
		return View{}, err
	}
	admitted := b.admitted()
	keys := make([]RecordKey, 0, len(admitted))
	seen := make(map[RecordKey]bool, len(admitted))
	for _, m := range admitted {
		if key := (RecordKey{m.Model, m.Key}); !seen[key] {
			seen[key] = true
			keys = append(keys, key)
		}
	}
	if v.Records, err = st.s.Records.GetAll(ctx, st.tx, b.Tenant, keys); err != nil {
		return View{}, fmt.Errorf("load batch: %w", err)
	}
	if err := loadScopes(ctx, st.s.Scopes, &v, b, txMembers{st.s.Records, st.tx}); err != nil {
		return View{}, err
	}
	return v, nil
}

// lookupBatch reads the ledger's answer for every admitted op of b in one
// LookupAll.
func lookupBatch(ctx context.Context, tx ledger.Tx, b *Batch) (map[string]ledger.Answer, error) {
	admitted := b.admitted()
	answers := make(map[string]ledger.Answer, len(admitted))
	ops := make([]ledger.Op, 0, len(admitted))
	for _, m := range admitted {
		if _, seen := answers[m.OpID]; !seen {
			answers[m.OpID] = ledger.Answer{}
			ops = append(ops, ledger.Op{ID: m.OpID, Time: time.UnixMilli(m.HLC.Wall)})
		}
	}
	got, err := tx.LookupAll(ctx, b.Tenant, ops)
	if err != nil {
		return nil, fmt.Errorf("load batch: ledger: %w", err)
	}
	for i, op := range ops {
		answers[op.ID] = got[i]
	}
	return answers, nil
}

func (st *sqlState) Save(ctx context.Context, fx *Effects) error {
	head, err := st.logHead(ctx)
	if err != nil {
		return fmt.Errorf("save batch: %w", err)
	}
	if _, err := st.s.Log.appendAfter(ctx, st.tx, head, fx.Entries); err != nil {
		st.headRead = false // the transaction is rolled back
		return fmt.Errorf("save batch: %w", err)
	}
	if n := len(fx.Entries); n > 0 {
		st.head = fx.Entries[n-1].Seq
	}
	recs := make([]Record, len(fx.Entries))
	for i, e := range fx.Entries {
		recs[i] = e.Record()
	}
	if err := st.s.Records.putLogged(ctx, st.tx, recs); err != nil {
		return fmt.Errorf("save batch: %w", err)
	}
	for _, c := range fx.Conflicts {
		if _, err := st.s.Conflicts.Insert(ctx, st.tx, c); err != nil {
			return fmt.Errorf("save batch: %w", err)
		}
	}
	if err := st.ledger.RecordAll(ctx, fx.Decisions); err != nil {
		return fmt.Errorf("save batch: %w", err)
	}
	if fx.Requested != nil {
		if err := saveRequested(ctx, st.tx, fx.Requested); err != nil {
			return fmt.Errorf("save batch: %w", err)
		}
	}
	return nil
}
