// Package client is what an app embeds to work offline and sync with syncd.
//
// # Quick start
//
// The runnable examples in client/example_test.go (Example,
// ExampleClient_WatchStatus, Example_errorHandling, ExampleClient_Changes,
// ExampleCollection, ExampleConflictHandler, Example_partialSync; pkg.go.dev shows them beside
// the API, `go test -run Example ./client` runs them) grow this sketch:
//
//	q, err := offlinequeue.OpenSQLite("notes.db", offlinequeue.SQLiteOptions{})
//	if err != nil { ... }
//	c, err := client.Open(ctx, client.Config{
//		ServerURLs: []string{"https://sync.example.com"}, // one node is enough: a cluster announces the others
//		Credential: "sdc_phone-7@sdk_...",                // syncctl token issue --credential
//		Queue:      q,                                    // the client owns it from here
//	})
//	if err != nil { ... }
//	defer c.Close()
//	op, err := c.Put(ctx, "notes", "n1", []byte(`{"text":"milk"}`)) // durable; works offline
//	out, err := c.Await(ctx, op)                                      // its outcome, once the server decided
//	err = c.WaitConnected(ctx)                                        // only when the app must be online
//
// # Defaults that shape syncing
//
// Every Config field has a default for its zero value. Those an app meets
// first: the server is probed every DefaultProbeInterval (5 s) while it
// answers and every DefaultOfflineProbeInterval (400 ms, jittered) while it
// does not, so a write queued during an outage is replayed within about a
// second of the server's return; a failed replay or a lost link is retried
// after DefaultRetryInterval (2 s), doubling to DefaultMaxRetryInterval (1
// min), each wait jittered between half and all of it; a refused write is
// dead-lettered after DefaultMaxAttempts attempts; DefaultInFlight pushes
// await their answers at once.
//
// # Writing
//
// Put, Delete and PutIfVersion stamp the write with an op id (a UUIDv7, the
// idempotency key) and a hybrid logical clock reading, append it to the
// durable queue (package offlinequeue) and to the local replica's pending
// overlay, and return the op id once the write is durable. No network is on
// that path: a write made offline returns as fast as one made online.
//
// # Reading your writes
//
// Get and List read the local replica: the server's records as the change
// feed delivered them, with this device's pending writes laid over them
// (Record.Pending). Reads see a write the moment Put returns, online or
// not, and converge to the server's state after sync, also when a pending
// write lost last-writer-wins or was refused: its outcome folds the winner
// into the replica.
//
// # Outcomes
//
// Every write ends with one durable Outcome: applied (with its version and
// oplog seq), superseded (with the winner), conflict (with the winner and
// what the ConflictHandler did) or dead_lettered (with the reason). Await
// waits for it; Lookup reads it; both work after a restart, for
// Config.OutcomeRetention.
//
// What "durable outcome" means. A conflict's or a dead letter's outcome is
// durable (at the queue's Synchronous level) before Await returns it. An
// applied or superseded one, which the server's replay ledger keeps, is
// recorded without waiting for the disk: Await returns once it is
// committed on the device, where it survives a crash of the app at once
// and a power cut once synced, by the device's next write or at the latest
// offlinequeue.DefaultUnsyncedWindow (Options.UnsyncedWindow) later. A
// power cut inside that window can lose the record, never the write: the
// write stays queued (its removal from the queue is lost with, or after,
// its outcome, never before), is replayed, and the server answers it from
// its ledger with the same outcome, so Await after the restart returns
// what it returned before and nothing is applied twice. That re-learning
// works while the server's ledger covers the op (welcome's
// ledger_retention_ms, 7 days by default); a device that lost such a
// record to a power cut and stays offline longer gets the write
// dead-lettered as expired instead. Outcomes are pruned at Open and while the client
// runs (every OutcomeRetention/2, at most MaxOutcomePruneInterval), and
// never more than MaxOutcomes are kept (the oldest go first).
//
// # Syncing
//
// A network monitor probes the servers' /healthz from the start (the first
// probe decides the first state; there is no silent first interval). When
// it reports online, the reconnect coordinator runs, strictly in order:
// reconnect (dial, trying each server URL), activate, bind (hello/welcome;
// a replica that never synced loads a snapshot, and so does one synced from
// another database than the welcome's database_id, which Status.DatabaseID
// then names; subscribe to the change feed) and replay (the driver's first
// pass over the queue). Going offline cancels a run between steps without
// waiting on any lock, so no replay starts on a connection known to be
// down. While connected, new writes are replayed as they come.
//
// The driver pages through the queue (a million queued writes never load
// at once), sends pushes within the server's batch and frame limits, keeps
// several in flight, and acts on each result as package synccore decides
// (fully, even if the connection drops meanwhile): applied, duplicate and
// superseded are marked done; a conflict goes to the ConflictHandler
// (Rebase or Drop); a rejection charges one durable attempt and the attempt
// that reaches MaxAttempts dead-letters the write with the server's reason
// (it stays in the queue's dead-letter store); a write the server never
// answered is left as it was, charged nothing. A refusal for clock skew is
// not the write's fault: the client corrects its clock from the server's
// and resends, uncharged.
//
// # Status
//
// Sync right after Open waits for the connection being made; it fails with
// ErrOffline only when the monitor says the server is unreachable.
// WaitConnected returns once a connection is bound (or the session is
// refused for good). Status reports what the client is doing (State: offline, connecting,
// syncing, idle, refused) with the counts an app shows, and LastError: the
// server's refusal of the session as a *RefusedError (errors.Is
// ErrUnauthorized, ErrWrongClientID, ErrServerBusy, ErrIncompatible).
// WatchStatus delivers every change of it on a channel that keeps only the
// newest status, so a slow reader never holds the client up; it ends with
// StateClosed when the Client is closed.
//
// # Partial sync
//
// A server may declare scopes (PROTOCOL.md section 19): scope "project"
// covering tasks by project_id, say. The device then holds, of a covered
// model, only the rows whose scope value it follows: granted to its
// principal (by its token, or by rows of the scope's membership model) and
// requested by the app. Config.Scopes is the first request; a declared
// scope it does not name follows every value granted now or later, so an
// app that says nothing follows all its grants. SetScopes(ctx, "project",
// "p1", "p2") changes one scope's request: durable before it returns,
// checked against the last welcome (a *ScopeError names an undeclared
// scope or an ungranted value), sent again on every connect. The client
// subscribes again from its cursor: an added value is backfilled (applied
// by version, the cursor never moves back, nothing held is downloaded
// again; WaitScope returns when it is in), and rows leave the replica only
// by explicit evictions: a row moved to a value not followed, a value no
// longer requested, a grant revoked. Each evicted row is a ChangeEvent
// with Evicted set to the reason and Deleted true, and Get says not found
// (a row with queued writes shows them until they are answered; the
// server refuses them forbidden_scope, which dead-letters them,
// requeueable). Status.Scopes says, per value, backfilling, ready,
// revoked, not_granted or unsubscribed. A conflict winner of a value the
// device may not read arrives without its value (Winner.ValueWithheld).
//
// # Crash safety
//
// With a SQLite queue the replica lives in the queue's file, and a write
// and its overlay row are one commit, as are a decided batch's outcomes
// and the removal of its queue items: a crash leaves both or neither. With
// another queue the replica has a file of its own (Config.ReplicaPath): the
// queue is written before the overlay (which is repaired from the queue at
// Open), and an outcome is recorded before its queue item is marked done.
// A crash between two steps therefore resends a write, and the server's
// ledger answers "duplicate" with the original result: nothing is lost and
// nothing is applied twice.
//
// With a SQLite queue at SyncFull a write is handed to the replay as soon
// as only its commit is left, so it may be sent, and applied by syncd,
// while that commit syncs; Put still returns only once it is durable, and the
// settling of its outcome commits after it. A crash (or a failed commit,
// ErrPoisoned) during that Put may therefore leave a write applied on
// syncd that the device did not keep: its Put never returned an op id,
// and the feed brings the record back like any other change. It is never
// applied twice.
//
// Durability is the queue's synchronous level (offlinequeue.SyncFull by
// default; Config.ReplicaSynchronous for a replica file of its own).
// SyncNormal survives a process crash; a power cut may roll back the last
// commits, never corrupt the files.
//
// # Typed values
//
// Collection[T] is a typed view of one model for apps that do not want to
// marshal JSON by hand: Put, Get, Delete, List and Watch take and return
// Go values, and a stored value that does not decode as T is a
// *DecodeError naming its key.
//
// # The caller's duties
//
// Open the queue and hand it to the client (which then owns and closes it);
// give each device its own credential (Config.Credential, the
// "sdc_<client id>@<token>" string syncctl token issue --credential prints;
// or Token and ClientID), queue and replica; call Close.
package client
