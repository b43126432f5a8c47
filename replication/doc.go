// Package replication decides concurrent writes and keeps their record: the
// per-model conflict policies, the clock-skew bound, the oplog that the
// change feed serves, the records it materializes, and the conflict log.
//
// # What it owns
//
//   - Policies, pure and table-tested: Resolve decides a Proposal against
//     the key's current Record under PolicyLWW (the higher HLC wins, ties
//     break on the timestamp's origin) or PolicyOptimistic (applied only
//     when the base version is current). Resolver adds the per-model Config
//     and PolicyHook: an embedder's Hook under a deadline, overruled by LWW
//     when it times out, errs, panics or answers nonsense.
//   - CheckSkew, the bound on how far ahead of the server's clock a
//     mutation's HLC may be (DefaultMaxClockSkew).
//   - Log, the abstraction the change feed reads, and SQLiteLog, the oplog
//     kept beside the records. A replicated implementation can satisfy the
//     same interface later.
//   - Records, the current state of every key, and its materializer
//     (Records.Apply), which applies log entries idempotently by seq.
//   - ConflictLog, every loser with its winner, bounded by Prune.
//   - Applier, which carries one decision out inside the caller's
//     transaction: read, resolve, append, store, log the conflict.
//
// # What it promises
//
//   - Versions per key count applied writes: 1 for the first, exactly one
//     more for each later write under every policy, deletes included (a
//     delete leaves a tombstone with its own version). Records enforces it:
//     a write that would skip or repeat a version fails with ErrVersionGap.
//   - LWW is deterministic: whatever order unconditional writes arrive in,
//     a key ends as the write with the highest HLC. An equal HLC never
//     replaces the current record. A write that names its base version is
//     conditional under every policy: a stale base is a conflict, whatever
//     its HLC. Every write that loses gets a conflict-log row.
//   - Oplog seqs start at 1, are assigned inside the appending transaction
//     (appends in one transaction are consecutive), and are gap-free as
//     readers see them: a rolled-back transaction takes its seqs with it. A
//     seq is never reused and the head never moves back, even after the
//     whole log was compacted.
//   - A Read checks its cursor and reads its page in one snapshot; a cursor
//     behind the retained log or beyond the head yields a *CursorError. A
//     Snapshot of the records is one consistent read and says which head it
//     reflects.
//   - Waiting for the log (Notify, Wait) starts no goroutine; a cancelled
//     waiter leaves nothing behind. A hook call is the one goroutine this
//     package starts: Resolve waits for it up to the deadline, and
//     Resolver.Wait reports when abandoned calls have returned.
//   - Pruning and compaction remove the oldest rows only, in bounded chunks
//     committed one by one, so the apply path waits at most one chunk.
//
// # What the caller must do
//
//  1. Open the database with github.com/mattn/go-sqlite3 in WAL mode, with
//     a busy timeout and synchronous=FULL (acknowledged writes survive a
//     power cut), and create the stores on it (NewSQLiteLog, NewRecords,
//     NewConflictLog create their tables if missing). Readers here use their
//     own deferred transactions, so the handle may use _txlock=immediate for
//     the apply path. Without a driver statement cache (_stmt_cache_size)
//     every per-mutation statement is prepared anew.
//  2. Apply a pushed batch in one write transaction (several batches may
//     share it: group commit). Per mutation: validate it with syncproto;
//     CheckSkew its HLC before observing it into the server's clock, so a
//     refused timestamp cannot drag the clock forward; look the op id up in
//     the ledger; Applier.Apply (or the same steps by hand: Records.Get,
//     Resolver.Resolve, Log.Append, Records.Put or Records.Apply,
//     ConflictLog.Insert); record the decision in the ledger. Fill
//     Proposal.Tenant from the token, never from the message.
//  3. On any error from these calls, roll the whole transaction back:
//     nothing of it happened.
//  4. Commit, and only then call Log.Committed with the highest seq the
//     transaction appended, and only then answer the clients.
//  5. Serve the change feed with Log.Read, scoped by the token (Scope);
//     when a page is CaughtUp, wait with Log.Notify or Log.Wait before
//     reading again. On ErrCursorExpired or ErrCursorAhead, resync the
//     client from Records.Snapshot and resume reading at its head.
//  6. Run Log.Compact and ConflictLog.Prune periodically (in a cluster, on
//     one node at a time); nothing prunes by itself.
//  7. At shutdown, after the last Resolve, call Resolver.Wait.
//
// A Hook must be safe for concurrent use, must not keep or modify the
// slices it is given, and should honor its context. Its errors and panic
// values are logged (without record values); keep payloads out of them.
//
// All exported types are safe for concurrent use unless their
// documentation says otherwise.
package replication
