// Package ledger is syncd's replay ledger: it answers "was op X of scope S
// already decided, and what was the answer?" inside the caller's own
// transaction, and records the answer in that same transaction, so the
// check and the write commit or roll back together with the effect they
// guard. It owns nothing else and imports nothing of syncd.
//
// # Decisions and lookups
//
// A decision is keyed by (scope, op id): the scope is the tenant id, the op
// id is the mutation's idempotency key (a UUIDv7 in practice; the ledger
// assumes nothing of its form). It stores the op's time, a digest of the
// op's content and the result the caller answered with. Lookup has three
// outcomes:
//
//   - Miss: the op was never decided. Apply it, then Record the decision in
//     the same transaction.
//   - Hit: the op was decided before. Never apply it again. Compare the
//     stored Digest with the incoming op's: equal means a resend, answer with
//     the stored Result (response replay) or just skip the op (skip-only; the
//     ledger does not care which); different means the op id was reused for
//     different content, refuse it.
//   - Expired: the op is not in the ledger and its op time is at or before
//     its scope's floor. Refuse it as expired; never apply it.
//
// An empty op id is not an identity, so it is never decided: Lookup returns
// Miss for it and Record refuses it with ErrEmptyOpID. The caller should
// refuse such ops before they reach the ledger.
//
// # Retention, per scope
//
// Each scope is bounded on its own, by age (Options.MaxAge, default 7 days)
// and count (Options.MaxEntries, default 1,000,000): one tenant's volume
// never evicts another tenant's decisions. Retention goes by decision time,
// the server's clock (Decision.DecidedAt), never by op time, which is the
// client's: pruning as of now evicts, in each scope, every decision decided
// at or before now-MaxAge, then the oldest decided beyond MaxEntries.
//
// Eviction follows one total order, so that two ledgers holding the same
// decisions evict the same ones whatever order they were recorded in:
// scopes in byte order of their names, and within a scope decisions by
// decision time (milliseconds), then op id in byte order. Tx.Prune(now,
// limit) evicts the first limit decisions of that order that are due, inside
// the caller's transaction, and says whether more are due. Its result
// depends on nothing but the ledger's state, now and limit.
//
// # The floor: what a scope may have forgotten
//
// A scope's floor is the highest op time among the decisions ever evicted
// from it; a scope that never had a decision evicted has no floor. Each
// eviction raises the floor in the transaction that evicts; the floor never
// goes down and, for SQL, is persisted with the decisions.
//
// Why eviction never reopens the door to a double apply: Record refuses an
// op at or before its scope's floor (ErrExpired), and every evicted op's
// time is at or before the floor it raised. So for an op that is not held,
// an op time after the floor proves it was never evicted, hence never
// decided (Miss, safe to apply), and an op time at or before the floor
// leaves it unknowable (Expired, refuse). A held decision is a Hit wherever
// it lies; an evicted op is never a Miss; and a ledger, or a scope, that
// never evicted anything never answers Expired, however old the op time.
//
// The price is availability, never safety: an op at or before its scope's
// floor is refused although it was perhaps never applied, e.g. from a device
// offline for longer than MaxAge, or one whose clock ran far behind the
// scope's other devices. A device stamping far ahead raises the floor of its
// own scope when its decisions are evicted, never another scope's.
// Floor(scope) is the horizon a server can announce to a client.
//
// # What the caller must do
//
//  1. Look up and record in the transaction that applies the op, with the
//     ledger bound to it (SQL.In, or a MemoryTx): Lookup, then on Miss apply
//     and Record, then commit once per batch. A Record without a Lookup in
//     the same transaction can fail with ErrAlreadyDecided or ErrExpired.
//  2. Pass the op's own time: the wall part of the mutation's HLC, which the
//     client's clock keeps monotonic, the same value on every resend. A
//     client may re-stamp an op only after the server refused it outright
//     (never applied); re-stamping an op that may have been applied could
//     carry it past the floor.
//  3. Apply retention regularly (for example once a minute). Either call
//     Prune(ctx, now), which runs Tx.Prune in chunks of Options.PruneChunk,
//     each in a transaction of its own, so it never holds the write lock
//     for long, and stops between chunks when its context is done; or, where
//     every replica must evict the same decisions, run Tx.Prune(now, limit)
//     in the transaction that applies a replicated "prune as of now" command,
//     with now and limit carried in the command, repeating while it reports
//     more. Export the evicted count.
//  4. Where replicas must agree, decide DecidedAt before replicating and
//     pass it in the Decision: a zero DecidedAt is filled from Options.Now,
//     the local clock, which differs between replicas.
//
// # SQLite
//
// NewSQL keeps the ledger in the caller's database, in tables named
// ledger_*, which the steps of Migrations create: the caller runs them, in
// order and once each, among the migrations of its own database (the
// database's schema version is the caller's; syncd's is PRAGMA
// user_version, moved by replication's migrations). The caller opens the database with
// github.com/mattn/go-sqlite3 and these settings:
//
//	file:/path/syncd.db?_busy_timeout=5000&_synchronous=FULL&_journal_mode=WAL&_txlock=immediate
//
// Adding &_stmt_cache_size=64 (as syncd does) keeps the statements the
// ledger prepares in every transaction prepared per connection.
//
// WAL lets Get, Floor, Stats and other readers run beside the one writer.
// synchronous=FULL makes a committed decision survive a power cut, not only a
// crash. busy_timeout makes a writer wait for the lock instead of failing at
// once. _txlock=immediate makes every transaction take the write lock at
// BEGIN, so lookups and the record that follows them see one state and no
// transaction fails half way through for a lock. A caller that keeps
// transactions deferred is still safe, never wrong: a transaction that looked
// up before a concurrent write committed fails its first write with
// SQLITE_BUSY (snapshot), and must be retried whole. Limiting the pool to one
// connection (SetMaxOpenConns(1)) is the other way to have a single writer,
// but then Get and Stats wait for every open transaction.
//
// Releases before the database carried one schema version kept the
// ledger's own in ledger_meta.schema_version (1: one floor for the whole
// ledger, eviction by op time; 2: per scope). Step 0 of Migrations brings
// either to layout 1 in the caller's migration transaction: decisions are
// kept and a version-1 floor becomes the floor of every scope, those it
// holds decisions for and any other, since a scope whose decisions were all
// evicted left no other trace.
//
// Memory has the same semantics without a database, for tests.
//
// The conformance suite every implementation passes is package
// ledger/ledgertest.
package ledger
