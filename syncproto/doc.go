// Package syncproto is the wire contract between the syncd client library
// and the syncd server: message types, the frame codec, validation of every
// field, limits, error and close codes, the hybrid logical clock, and the
// snapshot format. It is the only package both sides import, and it imports
// nothing else of syncd. PROTOCOL.md at the repository root is the
// language-neutral specification; this package is its Go form, and a test
// keeps the two in step.
//
// # What it owns
//
//   - Messages: one Go type per message type (Hello, Welcome, Push,
//     PushResult, Pull, Subscribe, Unsubscribe, Ping, Pong, Changes, Resync,
//     Error), all satisfying Message.
//   - The codec: Decode / DecodeRequest turn one websocket text frame into a
//     validated Message; Encode turns a Message into a frame. Every refusal
//     is an *Error ready to be sent back as the "error" message.
//   - Validation: Validate on every message, Mutation, Result, Change,
//     Limits and SnapshotRecord; ValidateID, ValidateModel, ValidateKey and
//     ValidateOpID for single fields.
//   - Meaning: Code.Retryable says whether a refused request was processed;
//     Result.Action and (*Error).Action say what a client's queue does with
//     a mutation once answered; CloseFor picks a close code.
//   - Time: Timestamp and Clock, the hybrid logical clock both sides run.
//     They live here rather than in package replication because the client
//     stamps every write and may import only this package of the server's
//     world; both sides must follow one set of send and receive rules.
//     replication adds the server's policy on top (the skew bound).
//   - Mutation.Digest, the content fingerprint the server's ledger uses to
//     detect an op id reused for different content.
//   - Snapshots: SnapshotWriter and SnapshotReader for the NDJSON body of
//     GET /v1/snapshot.
//
// Nothing here does network or disk I/O or keeps state beyond a Clock's last
// reading; the session loops, sockets and stores belong to the client and
// server packages.
//
// # What it promises
//
//   - Decode never panics, and accepts exactly what Encode can produce plus
//     leniencies documented on Decode (unknown fields ignored, field names
//     matched case-insensitively). A decoded message re-encodes to a frame
//     that decodes to the same message (fuzzed by FuzzDecode).
//   - A push decodes even when some of its mutations are invalid: each
//     mutation is judged by its own Validate, so one bad write is refused in
//     its own Result and never takes its batch down with it. Validate (of a
//     mutation, and of hello) refuses the first wrong member in
//     PROTOCOL.md's member order, whether its JSON type or its rule is
//     wrong, so the code does not depend on the order of the members.
//   - Encode refuses invalid messages and frames over MaxFrameBytes, so what
//     one side sends the other side decodes.
//   - Every Clock reading is strictly greater than the clock's previous
//     readings and, after Observe, than the observed reading.
//   - Limits and codes are the ones PROTOCOL.md states (checked by a test).
//
// # What a server must do
//
//  1. Accept websocket connections on SyncPath only after authenticating
//     the bearer token of the upgrade request (HTTP 401 otherwise), checking
//     Origin (403), and seeing Subprotocol offered (400); set the read limit
//     to MaxFrameBytes (or the announced Limits.MaxFrameBytes).
//  2. Decode each frame with DecodeRequest. Require hello first and only
//     once (CodeHelloRequired); answer a refused hello with its *Error and
//     close. Answer other refusals with the *Error as is and keep the
//     connection, except those PROTOCOL.md lists as closing it (CloseFor
//     gives the number).
//  3. For a push, judge each mutation in order: Mutation.Validate, then what
//     needs state (model known and writable, hlc origin equal to the
//     session's client id (else CodeInvalidHLC), Clock.Ahead within the skew
//     bound, base_version required for optimistic models), then the ledger
//     (Mutation.Digest against op id reuse), then the conflict policy. Answer one Result per
//     mutation, in order, only after the batch is durable. Record applied,
//     superseded and conflict results in the ledger; never record rejected
//     or expired ones, so a corrected resend is judged afresh.
//  4. Observe every accepted mutation's hlc with the server Clock, and
//     hello's hlc only when Clock.Ahead says it is within the skew bound
//     (it is ignored, not refused, beyond it); stamp welcome's server_hlc
//     with Clock.Now afterwards.
//  5. Scope every change entry and snapshot record to the principal's
//     tenant and readable models.
//
// # What a client must do
//
//  1. Stamp each write with NewOpID and Clock.Now, validate it with
//     Mutation.Validate before queueing it, and resend it with the same op
//     id and the same value bytes until it is answered.
//  2. Send hello first; honour the Limits in welcome; Observe the server's
//     timestamps (welcome's server_hlc, change entries) with its Clock.
//  3. For each Result apply Result.Action; for a push answered by an error
//     apply (*Error).Action to every mutation of that push; a push with no
//     answer before the connection dropped is undelivered (charge nothing).
//  4. On CodeClockSkew re-stamp the write from a clock corrected by the
//     server's time (same op id) before resending.
//  5. On resync, read the snapshot with SnapshotReader, replace the local
//     replica with it, then subscribe from SnapshotReader.Head.
//
// # Concurrency
//
// A Clock is safe for concurrent use. Messages are plain values: not safe
// for concurrent mutation, safe to read concurrently. SnapshotReader and
// SnapshotWriter are for one goroutine. Every function is safe to call
// concurrently.
package syncproto
