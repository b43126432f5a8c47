// Package offlinequeue is the client's durable outbox: mutations wait here,
// in enqueue order, until the sync worker has delivered them.
//
// Three implementations share one contract (Queue) and one conformance suite
// (package queuetest): NewMemory for tests, OpenFile (one NDJSON line per
// mutation, no dependency beyond the standard library) and OpenSQLite (an
// indexed table, the choice for deep queues and keyed dedup at volume).
//
// What every implementation promises:
//   - Enqueue order is delivery order; Peek pages through it without removing.
//   - An idempotency key dedups only against pending items, and only when
//     non-empty.
//   - Attempts are durable, so a retry budget survives restarts.
//   - Every queue is bounded (MaxDepth, DefaultMaxDepth 100,000): a full
//     queue refuses the newest item with *FullError; it never evicts.
//   - A dead letter is moved, never dropped on its way: it stays in the
//     dead-letter store with its reason until requeued or purged, or until
//     MaxDeadLetters (DefaultMaxDeadLetters 10,000) newer dead letters
//     push it out, which syncd_client_queue_dead_letters_evicted_total counts.
//   - Queue paths must be regular files or absent (see PathError); files a
//     queue creates are 0600.
//   - For the durable queues, a call that returned nil survives a crash and,
//     by default, a power cut; a call that returned an error left no trace.
//     Concurrent Enqueue calls share one fsync or one transaction (group
//     commit) without weakening that promise for any of them. The one
//     exception is MarkDoneUnsynced (File, SQLite): it survives a crash at
//     once and a power cut once the next synced write, or the queue within
//     Options.UnsyncedWindow (DefaultUnsyncedWindow, 100 ms), synced it;
//     it is never durable before a write made ahead of it.
//
// What the caller must do: pass the same Options (MaxDepth above all) on every
// open, open one path from one process at a time, and reopen a queue whose
// handle reported ErrPoisoned.
package offlinequeue
