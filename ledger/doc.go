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
//     the coverage floor. Refuse it as expired; never apply it.
//
// An empty op id is not an identity, so it is never decided: Lookup returns
// Miss for it and Record refuses it with ErrEmptyOpID. The caller should
// refuse such ops before they reach the ledger.
//
// # Retention and the coverage floor
//
// The ledger is bounded by age (Options.MaxAge, default 7 days) and count
// (Options.MaxEntries, default 1,000,000). Prune(now) evicts every decision
// whose op time is at or before now-MaxAge, then the oldest decisions by op
// time beyond MaxEntries. Each eviction raises the coverage floor, in the
// same atomic step, to now-MaxAge or to the newest op time it evicted,
// whichever is later; the floor never goes down and, for SQL, is persisted
// with the decisions.
//
// Why eviction never reopens the door to a double apply: the ledger keeps
// one invariant, "every decision recorded with an op time after the floor
// is still held". Eviction only removes decisions at or before the floor it
// sets, and Record refuses an op at or before the floor (ErrExpired). So
// for an op that is not held, an op time after the floor proves it was never
// decided (Miss, safe to apply), and an op time at or before the floor
// leaves it unknowable (Expired, refuse). A held decision is a Hit wherever
// it lies; an evicted op is never a Miss.
//
// The price is availability, never safety: an op that reaches the server
// with an op time older than the floor is refused although it was perhaps
// never applied, e.g. from a device offline for longer than MaxAge, or one
// whose clock ran far behind. A server clock that jumps forward by more than
// MaxAge raises the floor past current ops, and the floor does not come back
// down; pass Prune a sane clock.
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
//  3. Schedule Prune (for example once a minute, on one node at a time) and
//     export its evicted count; it works in chunks of Options.PruneChunk, so
//     it never holds the write lock for long, and stops between chunks when
//     its context is done.
//
// # SQLite
//
// NewSQL keeps the ledger in the caller's database, in tables named
// ledger_*, created if missing. The caller opens the database with
// github.com/mattn/go-sqlite3 and these settings:
//
//	file:/path/syncd.db?_busy_timeout=5000&_synchronous=FULL&_journal_mode=WAL&_txlock=immediate
//
// WAL lets Get, Stats and other readers run beside the one writer.
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
// Memory has the same semantics without a database, for tests.
//
// The conformance suite every implementation passes is package
// ledger/ledgertest.
package ledger
