// Package checker judges a soak run at quiescence: it reads what the run
// left behind (syncd's database, every client's queue, dead-letter store,
// replica and journal) and says, for each of the six invariants of the
// soak harness, whether it holds, with the first few violations as
// evidence.
//
// # Use
//
//	state, err := checker.Load(ctx, layout) // every process stopped
//	res := checker.Check(state)
//	for _, v := range res.Verdicts { ... v.Holds, v.Evidence ... }
//
// Load does all the I/O; Check is pure over State, so a test can build or
// doctor a State (duplicate an oplog entry, change a replica's value, drop
// a write) and see the invariant it breaks named.
//
// # The invariants
//
//  1. Accounted: every write a client made (a made line in its journal, or
//     a rebase its conflict handler asked for) has a durable outcome:
//     applied (and the oplog holds it), superseded or conflict (the ledger
//     decided it; a conflict reached the app's handler, and a rebase is
//     followed to its own outcome), or dead-lettered with a reason (only
//     poison writes may be, and poison writes must be). Every oplog entry
//     of a client comes from a made write or from a call a crash
//     interrupted (an intent line with no answer).
//  2. ExactlyOnce: no op id twice in the oplog; the ledger and the oplog
//     agree; every outcome a client holds is the ledger's first decision,
//     so every duplicate resend was answered from the ledger.
//  3. ReferenceModel: replaying the oplog per key with the declared
//     policies (versions 1, 2, 3 with no gap; under LWW each entry newer by
//     HLC than the one it replaced; an optimistic write applied at its base
//     version plus one) yields exactly the server's records; LWW losers in
//     the conflict log are not newer than their winners.
//  4. Converged: every replica equals the server's live records of its
//     tenant and readable models, holds nothing else, has an empty pending
//     overlay and a cursor at or past the newest entry it may read. In a
//     model a scope covers (partial sync), the records it must hold are
//     those of the values it follows at quiescence: granted by its token
//     or by a live membership row naming its user, and requested; a live
//     row of any other value in its replica is a leak. Scoped entries do
//     not count for the cursor (a value gained later arrives by backfill,
//     which leaves the cursor where it was). At the wire, while the run
//     went on: every row of a scoped model a client journaled as received
//     (a feed entry at its seq, a backfill row at its page's seq, a
//     snapshot's row at the snapshot's head) is of a
//     value it followed at that seq, by the grants derived from the
//     membership rows' history in the oplog and its token, both the value
//     of the version sent and the key's value at that seq; any other is
//     a leak naming client, row, value and seq. Seqs an oplog compacted
//     from the front no longer covers are not judged, and the verdict
//     says so.
//  5. Drained: every queue is empty but for dead letters (each with a
//     reason, charged at least the refusal that put it there); the oplog's seqs are consecutive up to its head; PRAGMA
//     integrity_check is ok on every database, and every NDJSON queue
//     loads.
//  6. NoLeaks: syncd's goroutine and open-file counts at quiescence are
//     within a stated tolerance of the baseline taken after its last start.
//
// # What it assumes
//
// The schemas it reads are those of the replication, ledger and client
// packages (tables oplog, records, records_state, ledger_decisions,
// ledger_meta, ledger_scopes, conflicts; and the replica's records, pending,
// outcomes and meta): a change there breaks Load loudly, not silently.
// Retention is honoured where it can hide evidence: a tenant whose ledger
// evicted decisions (its floor in ledger_scopes, or the floor ledger_meta
// gives every tenant) has its own ops at or before that floor exempted, and
// no other tenant's, and an oplog compacted from the front is
// replayed from its first retained entry. The journal survives process
// crashes, not power loss.
package checker
