package server

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/syncd-dev/syncd/ledger"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// Group commit bounds: the committer takes every push waiting when it
// starts a transaction, up to these limits, so one commit (one fsync) covers
// many pushes without letting one transaction grow without bound.
const (
	maxGroupPushes    = 64
	maxGroupMutations = 4 * syncproto.MaxBatch
)

// errStoreClosed answers pushes submitted after the store began closing.
var errStoreClosed = errors.New("store closed")

// store is syncd's SQLite state: records, oplog, conflict log and replay
// ledger in one database, changed only by its committer goroutine.
type store struct {
	db        *sql.DB
	writer    *sql.Conn // the committer's own connection: readers never starve it
	ledger    *ledger.SQL
	records   *replication.Records
	log       *replication.SQLiteLog
	conflicts *replication.ConflictLog
	applier   *replication.Applier
	clock     *syncproto.Clock
	// databaseID names this database for clients (welcome.database_id):
	// created with the database, kept for its life.
	databaseID string
	maxSkew    time.Duration
	now        func() time.Time
	metrics    *metrics
	logger     *slog.Logger

	pushes chan *pushRequest
	stop   chan struct{} // closed by close: no more pushes are taken
	done   chan struct{} // closed when the committer has exited
}

// pushRequest is one push message waiting for its commit. results and err
// are written by the committer before done is closed.
type pushRequest struct {
	principal auth.Principal
	mutations []syncproto.Mutation
	arrived   time.Time

	results []syncproto.Result
	err     error
	done    chan struct{}
}

// storeConfig is what the server hands the store.
type storeConfig struct {
	db        *sql.DB
	resolver  *replication.Resolver
	clock     *syncproto.Clock
	maxSkew   time.Duration
	now       func() time.Time
	retention Retention
	metrics   *metrics
	logger    *slog.Logger
}

func openStore(ctx context.Context, c storeConfig) (*store, error) {
	l, err := ledger.NewSQL(ctx, c.db, ledger.Options{MaxAge: c.retention.LedgerMaxAge, MaxEntries: c.retention.LedgerMaxEntries, Now: c.now})
	if err != nil {
		return nil, err
	}
	records, err := replication.NewRecords(ctx, c.db)
	if err != nil {
		return nil, err
	}
	oplog, err := replication.NewSQLiteLog(ctx, c.db, replication.LogOptions{Retention: c.retention.Oplog, Now: c.now})
	if err != nil {
		return nil, err
	}
	conflicts, err := replication.NewConflictLog(ctx, c.db, replication.ConflictLogOptions{Retention: c.retention.Conflicts, Now: c.now})
	if err != nil {
		return nil, err
	}
	s := &store{
		db: c.db, ledger: l, records: records, log: oplog, conflicts: conflicts,
		applier: replication.NewApplier(c.resolver, oplog, records, conflicts), clock: c.clock, maxSkew: c.maxSkew, now: c.now,
		metrics: c.metrics, logger: c.logger,
		pushes: make(chan *pushRequest, maxGroupPushes),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	if s.databaseID, err = databaseID(ctx, c.db); err != nil {
		return nil, err
	}
	b, err := oplog.Bounds(ctx)
	if err != nil {
		return nil, err
	}
	if s.writer, err = c.db.Conn(ctx); err != nil {
		return nil, err
	}
	s.metrics.oplogHead.Set(float64(b.Head))
	s.metrics.oplogOldest.Set(float64(b.Oldest))
	go s.commitLoop()
	return s, nil
}

// databaseID returns the id of the database behind db, creating it (a
// random UUID) the first time. A restored backup keeps its id; a fresh
// database gets a new one, so a client's cursor from another database is
// never mistaken for a position in this one.
func databaseID(ctx context.Context, db *sql.DB) (string, error) {
	const schema = `CREATE TABLE IF NOT EXISTS syncd_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)`
	if _, err := db.ExecContext(ctx, schema); err != nil {
		return "", fmt.Errorf("create syncd_meta: %w", err)
	}
	if _, err := db.ExecContext(ctx, `INSERT OR IGNORE INTO syncd_meta (name, value) VALUES ('database_id', ?)`, uuid.NewString()); err != nil {
		return "", fmt.Errorf("store database id: %w", err)
	}
	var id string
	if err := db.QueryRowContext(ctx, `SELECT value FROM syncd_meta WHERE name = 'database_id'`).Scan(&id); err != nil {
		return "", fmt.Errorf("read database id: %w", err)
	}
	return id, nil
}

// submit queues a push for the committer. The returned request's done
// channel closes once its transaction committed (results set) or failed
// (err set: nothing of the push was applied). Pushes submitted in order by
// one session are applied in that order.
func (s *store) submit(ctx context.Context, p auth.Principal, muts []syncproto.Mutation) (*pushRequest, error) {
	r := &pushRequest{principal: p, mutations: muts, arrived: s.now(), done: make(chan struct{})}
	select {
	case s.pushes <- r:
		return r, nil
	case <-s.stop:
		return nil, errStoreClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// close stops taking pushes, lets the committer finish the ones queued,
// waits for it and returns its connection to the pool.
func (s *store) close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.writer.Close()
}

// commitLoop is the only writer. It takes the pushes waiting, applies them
// in one transaction and commits once: the group commit that keeps
// synchronous=FULL fast. It exits after draining the queue once stop closes.
func (s *store) commitLoop() {
	defer close(s.done)
	for {
		var first *pushRequest
		select {
		case first = <-s.pushes:
		case <-s.stop:
			s.drainQueued()
			return
		}
		s.commitGroup(s.gather(first))
	}
}

// gather collects the pushes already waiting behind first, within the group bounds.
func (s *store) gather(first *pushRequest) []*pushRequest {
	group := []*pushRequest{first}
	n := len(first.mutations)
	for len(group) < maxGroupPushes && n < maxGroupMutations {
		select {
		case r := <-s.pushes:
			group = append(group, r)
			n += len(r.mutations)
		default:
			return group
		}
	}
	return group
}

// drainQueued commits pushes that were queued before stop closed, so an
// accepted push is answered rather than dropped.
func (s *store) drainQueued() {
	for {
		select {
		case r := <-s.pushes:
			s.commitGroup(s.gather(r))
		default:
			return
		}
	}
}

func (s *store) commitGroup(group []*pushRequest) {
	// The transaction is not tied to any session's context: once a push is
	// taken, it commits or fails as a whole, never "perhaps".
	ctx := context.Background()
	head, err := s.applyGroup(ctx, group)
	committed := s.now()
	for _, r := range group {
		if err != nil {
			r.results, r.err = nil, err
		}
		s.metrics.applySeconds.Observe(committed.Sub(r.arrived).Seconds())
	}
	if err != nil {
		s.logger.Error("commit failed; pushes answered as not processed", "pushes", len(group), "err", err)
	} else {
		if head > 0 {
			s.log.Committed(head)
			s.metrics.oplogHead.Set(float64(head))
		}
		s.metrics.commitGroupBatches.Observe(float64(len(group)))
		for _, r := range group {
			s.countResults(r.results)
		}
	}
	for _, r := range group {
		close(r.done)
	}
}

// applyGroup applies every push of the group in one transaction and
// returns the newest oplog seq it appended (0 if none).
func (s *store) applyGroup(ctx context.Context, group []*pushRequest) (head uint64, err error) {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	a := applier{s: s, tx: tx, ledger: s.ledger.In(tx)}
	for _, r := range group {
		r.results = make([]syncproto.Result, len(r.mutations))
		for i := range r.mutations {
			res, seq, err := a.apply(ctx, r.principal, &r.mutations[i])
			if err != nil {
				return 0, err
			}
			r.results[i] = res
			head = max(head, seq)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return head, nil
}

func (s *store) countResults(results []syncproto.Result) {
	for _, r := range results {
		s.metrics.mutations.WithLabelValues(string(r.Status)).Inc()
		switch r.Status {
		case syncproto.StatusDuplicate:
			s.metrics.ledgerHits.Inc()
		case syncproto.StatusApplied, syncproto.StatusSuperseded, syncproto.StatusConflict:
			s.metrics.ledgerRecords.Inc()
		}
	}
}

// applier applies mutations inside one group transaction.
type applier struct {
	s      *store
	tx     *sql.Tx
	ledger ledger.Tx
}

// apply decides one mutation. A refusal is a result, not an error: the
// error return is reserved for storage failures, which fail the group.
// The returned seq is the oplog seq appended, or 0.
func (a applier) apply(ctx context.Context, p auth.Principal, m *syncproto.Mutation) (syncproto.Result, uint64, error) {
	if refusal := a.s.check(p, m); refusal != nil {
		return rejected(m.OpID, refusal), 0, nil
	}
	opTime := time.UnixMilli(m.HLC.Wall)
	digest := []byte(m.Digest())
	prior, outcome, err := a.ledger.Lookup(ctx, p.Tenant, m.OpID, opTime)
	if err != nil {
		return syncproto.Result{}, 0, fmt.Errorf("ledger lookup: %w", err)
	}
	switch outcome {
	case ledger.Hit:
		if string(prior.Digest) != string(digest) {
			return rejected(m.OpID, syncproto.Errorf(syncproto.CodeOpIDReused,
				"op_id %s was already decided for a different mutation", m.OpID)), 0, nil
		}
		return duplicateOf(prior)
	case ledger.Expired:
		return syncproto.Result{OpID: m.OpID, Status: syncproto.StatusExpired,
			Message: "older than the replay ledger covers; it may or may not have been applied, and is not applied again"}, 0, nil
	}

	a.s.clock.Observe(m.HLC)
	d, err := a.s.applier.Apply(ctx, a.tx, proposal(p, m))
	if err != nil {
		if errors.Is(err, replication.ErrBaseVersionRequired) {
			return rejected(m.OpID, syncproto.Errorf(syncproto.CodeMissingBaseVersion, "model %s uses optimistic concurrency: base_version is required", m.Model)), 0, nil
		}
		return syncproto.Result{}, 0, fmt.Errorf("apply: %w", err)
	}
	if d.Fallback != "" {
		a.s.metrics.hookFallbacks.Inc()
	}

	var res syncproto.Result
	var seq uint64
	switch d.Outcome {
	case replication.OutcomeApplied:
		seq = d.Record.Seq
		res = syncproto.Result{OpID: m.OpID, Status: syncproto.StatusApplied, Version: d.Record.Version, Seq: seq, HLC: d.Record.HLC}
	case replication.OutcomeSuperseded:
		res = syncproto.Result{OpID: m.OpID, Status: syncproto.StatusSuperseded, Message: d.Reason, Winner: winner(d.Winner)}
	case replication.OutcomeConflict:
		res = syncproto.Result{OpID: m.OpID, Status: syncproto.StatusConflict, Message: d.Reason, Winner: winner(d.Winner)}
	default:
		return syncproto.Result{}, 0, fmt.Errorf("apply: unknown outcome %q", d.Outcome)
	}
	if d.Conflict != nil {
		a.s.metrics.conflicts.WithLabelValues(string(d.Conflict.Policy)).Inc()
	}
	stored, err := json.Marshal(res)
	if err != nil {
		return syncproto.Result{}, 0, err
	}
	if err := a.ledger.Record(ctx, ledger.Decision{Scope: p.Tenant, OpID: m.OpID, OpTime: opTime, Digest: digest, Result: stored}); err != nil {
		return syncproto.Result{}, 0, fmt.Errorf("ledger record: %w", err)
	}
	return res, seq, nil
}

// check refuses what no policy may see: an invalid mutation, a model the
// principal may not write, a timestamp not the client's own or too far
// ahead of the server's clock. nil means the mutation may be decided.
// Refusals are not recorded in the ledger: nothing was decided, and a
// re-stamped or corrected resend under the same op id must be heard.
func (s *store) check(p auth.Principal, m *syncproto.Mutation) *syncproto.Error {
	if err := m.Validate(); err != nil {
		return asProtoError(err)
	}
	if !p.CanWrite(m.Model) {
		return syncproto.Errorf(syncproto.CodeForbiddenModel, "this token may not write model %s", m.Model)
	}
	if m.HLC.Origin != p.ClientID {
		return syncproto.Errorf(syncproto.CodeInvalidHLC, "hlc origin %q is not this token's client id", m.HLC.Origin)
	}
	if err := replication.CheckSkew(m.HLC, s.now(), s.maxSkew); err != nil {
		return syncproto.Errorf(syncproto.CodeClockSkew, "%v; re-stamp from a corrected clock and resend", err)
	}
	return nil
}

func proposal(p auth.Principal, m *syncproto.Mutation) replication.Proposal {
	return replication.Proposal{
		Tenant: p.Tenant, OpID: m.OpID, Model: m.Model, Key: m.Key,
		Op: replication.Op(m.Op), Value: m.Value, HLC: m.HLC,
		BaseVersion: m.BaseVersion, SeenVersion: m.SeenVersion, ClientID: p.ClientID,
	}
}

// winner is the wire form of the state that stands. A key that was never
// written is version 0 and deleted (PROTOCOL.md, push_result).
func winner(r replication.Record) *syncproto.Winner {
	return &syncproto.Winner{Version: r.Version, Value: r.Value, HLC: r.HLC, Deleted: r.Deleted || r.Version == 0}
}

// rejected is the result refusing a mutation. An op id that is not a
// canonical UUID is not echoed (PROTOCOL.md 5.4): the result would not be
// valid, and the client matches it by position.
func rejected(opID string, e *syncproto.Error) syncproto.Result {
	if syncproto.ValidateOpID(opID) != nil {
		opID = ""
	}
	return syncproto.Result{OpID: opID, Status: syncproto.StatusRejected, Code: e.Code, Message: e.Message}
}

// duplicateOf answers a resend with the stored result of the first decision.
func duplicateOf(prior ledger.Decision) (syncproto.Result, uint64, error) {
	var orig syncproto.Result
	if err := json.Unmarshal(prior.Result, &orig); err != nil {
		return syncproto.Result{}, 0, fmt.Errorf("ledger: stored result of %s: %w", prior.OpID, err)
	}
	orig.OriginalStatus, orig.Status = orig.Status, syncproto.StatusDuplicate
	return orig, 0, nil
}

// asProtoError returns err as a *syncproto.Error, wrapping anything else as
// bad_request.
func asProtoError(err error) *syncproto.Error {
	var pe *syncproto.Error
	if errors.As(err, &pe) {
		return pe
	}
	return syncproto.Errorf(syncproto.CodeBadRequest, "%v", err)
}
