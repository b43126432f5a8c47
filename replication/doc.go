// Package replication decides concurrent writes and keeps their record: a
// deterministic state machine whose step is one pure function, the stores
// it runs on, the per-model conflict policies, the clock-skew bound, the
// oplog that the change feed serves and the conflict log.
//
// # The state machine
//
// A push is decided in two halves, so that one node or many replicas
// decide it the same way:
//
//   - The edge (the node that received the push) admits it: Admit turns
//     the mutations into a Batch, stamped with the edge's time, refusing
//     what no policy may see (invalid, forbidden to the token, a foreign or
//     too-fast timestamp, a missing base version under PolicyOptimistic),
//     and records each model's policy; Resolver.AskHooks asks the
//     embedder's conflict hook about the hook writes against the edge's
//     committed state. Everything that depends on the node, its clock, its
//     configuration or hook code is settled here and carried in the Batch.
//   - The state machine decides the batch: Decide is pure (no clock, no
//     I/O, no randomness) and maps a View of the state (the records the
//     batch writes, the ledger's answers about its op ids, the oplog head)
//     and the Batch to Effects (the answers, oplog entries with their seqs,
//     conflict-log rows, ledger rows). Apply runs Load, Decide and Save on a
//     State: a Store inside one SQLite transaction (Store.In), or Memory for
//     simulation. Two replicas that apply the same batches in the same order
//     hold the same records, oplog (same seqs), ledger and conflict log.
//
// # What it owns
//
//   - Policies, pure and table-tested: Resolve decides a Proposal against
//     the key's current Record under PolicyLWW (the higher HLC wins, ties
//     break on the timestamp's origin) or PolicyOptimistic (applied only
//     when the base version is current). Under PolicyHook the hook's answer
//     is carried out only while the key is still at the version it saw
//     (Effects.Stale lists the others: the edge asks again, at most
//     MaxHookAttempts times, then LWW decides, FallbackStale); a hook that
//     times out, errs, panics or answers nonsense is overruled by LWW.
//   - CheckSkew, the bound on how far ahead of the server's clock a
//     mutation's HLC may be (DefaultMaxClockSkew).
//   - Store: Records (the current state of every key), SQLiteLog (the
//     oplog the change feed serves, behind the Log interface),
//     ConflictLog (every loser with its winner), the replay ledger
//     (package ledger) and the database's identity, in one database.
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
//   - A resend of a decided op is answered with the first decision
//     (duplicate); an op the ledger may have forgotten is answered expired
//     and never applied; an op id reused for other content is refused.
//   - Oplog seqs start at 1 and are consecutive within a batch and across
//     batches; they are gap-free as readers see them: a rolled-back
//     transaction takes its seqs with it. A seq is never reused and the
//     head never moves back, even after the whole log was compacted.
//   - A Read checks its cursor and reads its page in one snapshot; a cursor
//     below its tenant's compaction floor (entries of that tenant after it
//     were compacted) or beyond the head yields a *CursorError. Another
//     tenant's compaction never expires a cursor. A
//     Snapshot of the records is one consistent read and says which head it
//     reflects.
//   - Waiting for the log (Notify, Wait) starts no goroutine; a cancelled
//     waiter leaves nothing behind. A hook call is the one goroutine this
//     package starts: AskHooks waits for it up to the deadline, and
//     Resolver.Wait reports when abandoned calls have returned.
//   - Pruning and compaction remove the oldest rows only, in bounded chunks
//     committed one by one, so the apply path waits at most one chunk. The
//     count bounds of the oplog and the conflict log are per tenant: one
//     tenant's rows never push another's out.
//
// # What the caller must do
//
//  1. Open the database with github.com/mattn/go-sqlite3 in WAL mode, with
//     a busy timeout and synchronous=FULL (acknowledged writes survive a
//     power cut), as internal/sqlitedb does, and OpenStore on it. OpenStore
//     first brings the file to SchemaVersion (Migrate: the numbered
//     migrations of migrations.go, each in one transaction with the
//     PRAGMA user_version it brings the file to) and refuses a file of a
//     newer release (ErrNewerSchema), changing nothing. A change of the
//     layout is one entry appended to that list, never an edit of one
//     that shipped, with the schema golden regenerated and the version
//     added to TestOpenStoreMigratesEveryShippedLayout.
//  2. At the edge: Admit the push with the author taken from the token,
//     never from the message; observe the admitted timestamps into the
//     server's clock (Admit has checked them against the skew bound first,
//     so a refused timestamp cannot drag the clock forward); AskHooks when
//     the batch has hook writes.
//  3. Apply each batch in a write transaction (several batches may share
//     it: group commit). On any error roll the whole transaction back:
//     nothing of it happened.
//  4. Commit, and only then call Store.Committed with the highest seq the
//     transaction appended, and only then answer the clients. Ask the hook
//     again about Effects.Stale writes and apply them as a new batch.
//  5. Serve the change feed with Log.Read, scoped by the token (Scope);
//     when a page is CaughtUp, wait with Log.Notify or Log.Wait before
//     reading again. On ErrCursorExpired or ErrCursorAhead, resync the
//     client from Records.Snapshot and resume reading at its head.
//  6. Run Log.Compact, ConflictLog.Prune and the ledger's Prune
//     periodically (in a cluster, as replicated jobs); nothing prunes by
//     itself.
//  7. At shutdown, after the last AskHooks, call Resolver.Wait.
//
// A Hook must be safe for concurrent use, must not keep or modify the
// slices it is given, and should honor its context. Its errors and panic
// values are logged (without record values); keep payloads out of them.
//
// All exported types are safe for concurrent use unless their
// documentation says otherwise.
package replication
