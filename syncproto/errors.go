package syncproto

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// Code names why a request, a mutation or a connection was refused. Codes
// are stable strings on the wire; PROTOCOL.md tabulates every one with the
// action a client takes.
type Code string

// Error codes. Each comment says what the code means and what the client does
// next. "Retryable" codes mean nothing was processed: resend the same request
// (same op ids) after a backoff and charge no attempt. Every other code means
// the request or mutation was received and refused: for mutations, charge one
// attempt and dead-letter at the retry budget (CodeClockSkew excepted: only the
// stamp was refused; re-stamp and resend, uncharged).
const (
	// CodeMalformed: the frame is not UTF-8 text holding one JSON object.
	// Fix the client.
	CodeMalformed Code = "malformed"
	// CodeBadRequest: the message is JSON but a field is missing, has the
	// wrong JSON type or is out of range, and no more specific code applies.
	CodeBadRequest Code = "bad_request"
	// CodeUnknownType: the "type" is not one this side accepts.
	CodeUnknownType Code = "unknown_type"
	// CodeFrameTooLarge: the frame exceeds MaxFrameBytes; the connection is
	// closed with CloseMessageTooBig. Send smaller batches.
	CodeFrameTooLarge Code = "frame_too_large"
	// CodeBatchTooLarge: a push holds more than MaxBatch mutations. Split it.
	CodeBatchTooLarge Code = "batch_too_large"
	// CodePayloadTooLarge: a mutation's value exceeds MaxPayloadBytes.
	CodePayloadTooLarge Code = "payload_too_large"
	// CodeInvalidKey: a key is empty, too long, not UTF-8, or holds control
	// characters.
	CodeInvalidKey Code = "invalid_key"
	// CodeInvalidModel: a model name breaks ModelPattern, or names a model
	// the server does not declare while its default policy is "none".
	CodeInvalidModel Code = "invalid_model"
	// CodeInvalidOpID: an op id is not a canonical lowercase UUID.
	CodeInvalidOpID Code = "invalid_op_id"
	// CodeInvalidOp: op is not "put" or "delete", or value is missing on a
	// put or present on a delete.
	CodeInvalidOp Code = "invalid_op"
	// CodeInvalidHLC: an hlc is malformed, zero where required, or its origin
	// is not the sending client's id.
	CodeInvalidHLC Code = "invalid_hlc"
	// CodeInvalidClientID: a client id breaks IDPattern.
	CodeInvalidClientID Code = "invalid_client_id"
	// CodeMissingBaseVersion: a mutation on an optimistic model lacks
	// base_version.
	CodeMissingBaseVersion Code = "missing_base_version"
	// CodeOpIDReused: the op id was already decided for different content
	// (see Mutation.Digest). Never resend it; a new write needs a new op id.
	CodeOpIDReused Code = "op_id_reused"
	// CodeClockSkew: the mutation's hlc is further ahead of the server's
	// clock than the server allows. Re-stamp from a corrected clock (same op
	// id) and resend with backoff, charging no attempt.
	CodeClockSkew Code = "clock_skew"
	// CodeUnauthorized: the bearer token is missing, unknown or revoked.
	CodeUnauthorized Code = "unauthorized"
	// CodeTokenExpired: the bearer token (a JWT) expired, on the upgrade or
	// during the session, which then closes with ClosePolicyViolation.
	// Nothing of the refused request was processed: get a fresh token,
	// reconnect and resend, charging no attempt.
	CodeTokenExpired Code = "token_expired"
	// CodeForbiddenOrigin: the upgrade request's Origin is not allowed.
	CodeForbiddenOrigin Code = "forbidden_origin"
	// CodeForbiddenModel: the token may not write (or read) this model.
	CodeForbiddenModel Code = "forbidden_model"
	// CodeWrongClientID: hello's client_id is not the one the token may act
	// as.
	CodeWrongClientID Code = "wrong_client_id"
	// CodeHelloRequired: a request arrived before hello, or a second hello
	// arrived.
	CodeHelloRequired Code = "hello_required"
	// CodeCursorAhead: a cursor is beyond the server's head (the server's
	// data was restored, or a cluster node lags). Reconnect; if it persists,
	// resync from a snapshot.
	CodeCursorAhead Code = "cursor_ahead"
	// CodeRateLimited: the connection sent requests faster than its rate
	// limit. Retryable after Error.RetryAfter.
	CodeRateLimited Code = "rate_limited"
	// CodeServerBusy: the server is at a capacity limit. Retryable.
	CodeServerBusy Code = "server_busy"
	// CodeShuttingDown: the server is draining. Retryable on a new
	// connection.
	CodeShuttingDown Code = "shutting_down"
	// CodeInternal: the server failed before committing anything of the
	// request. Retryable.
	CodeInternal Code = "internal"
	// CodeHookUnavailable: the mutation's model is decided by a conflict
	// hook whose circuit breaker is open (the hook kept failing or timing
	// out), so the server refused the mutation at once without deciding or
	// recording it. Retryable: resend the same mutation (same op id) after
	// a backoff, charging no attempt; never dead-letter it for this.
	CodeHookUnavailable Code = "hook_unavailable"
	// CodeIdleTimeout: nothing arrived on the connection for
	// Limits.IdleTimeoutMS; it closes with CloseIdleTimeout. Reconnect when
	// there is something to do.
	CodeIdleTimeout Code = "idle_timeout"
	// CodeNeedsUpgrade: the server does not accept the mutation's
	// value_version for its model (the device is newer than the server, or
	// older than any version it still upcasts). Result.AcceptedVersions
	// names the versions it accepts. Not processed and not a fault of the
	// write: keep it and every later write of its model queued, in order,
	// and resend once a welcome announces its version (PROTOCOL.md 5.4).
	CodeNeedsUpgrade Code = "needs_upgrade"
	// CodeUpcastFailed: the server accepts the mutation's value_version
	// but turning its value into the model's current shape failed (the
	// server's upcaster erred or returned an invalid value). Nothing was
	// recorded; the client keeps the write queued as for CodeNeedsUpgrade,
	// since a corrected server may accept it.
	CodeUpcastFailed Code = "upcast_failed"
	// CodeForbiddenScope: the mutation's record has, or would get, a scope
	// value the writer's principal is not granted (PROTOCOL.md section 19).
	// Permanent: dead-letter it.
	CodeForbiddenScope Code = "forbidden_scope"
	// CodeInvalidScopeValue: the value of a put to a scoped model is not a
	// JSON object whose scope member is a valid scope value
	// (ValidateScopeValue). Permanent.
	CodeInvalidScopeValue Code = "invalid_scope_value"
	// CodeInvalidScope: a subscribe or pull names a scope the server does
	// not declare, or its scope members are malformed.
	CodeInvalidScope Code = "invalid_scope"
	// CodeTooManyScopeValues: a subscription would follow more scope values
	// than Limits.MaxScopeValues.
	CodeTooManyScopeValues Code = "too_many_scope_values"
)

// Codes lists every code this version defines, in PROTOCOL.md's order.
var Codes = []Code{
	CodeMalformed, CodeBadRequest, CodeUnknownType, CodeFrameTooLarge,
	CodeBatchTooLarge, CodePayloadTooLarge, CodeInvalidKey, CodeInvalidModel,
	CodeInvalidOpID, CodeInvalidOp, CodeInvalidHLC, CodeInvalidClientID,
	CodeMissingBaseVersion, CodeOpIDReused, CodeClockSkew, CodeUnauthorized,
	CodeForbiddenOrigin, CodeForbiddenModel, CodeWrongClientID,
	CodeHelloRequired, CodeCursorAhead, CodeRateLimited, CodeServerBusy,
	CodeShuttingDown, CodeInternal, CodeIdleTimeout, CodeTokenExpired, CodeHookUnavailable,
	CodeNeedsUpgrade, CodeUpcastFailed, CodeForbiddenScope, CodeInvalidScopeValue,
	CodeInvalidScope, CodeTooManyScopeValues,
}

// Retryable reports whether a request refused with c was not processed at
// all, so that the client resends it unchanged after a backoff and charges
// no attempt (the queue's "undelivered"). For every other code the request
// or mutation was delivered and refused (the queue's "rejected": charge one
// attempt). An unknown code is not retryable: "I don't know" is rejected.
func (c Code) Retryable() bool {
	switch c {
	case CodeRateLimited, CodeServerBusy, CodeShuttingDown, CodeInternal, CodeIdleTimeout, CodeTokenExpired, CodeHookUnavailable:
		return true
	}
	return false
}

// Error is a refusal: the Go error every validator and Decode return, and
// the "error" message on the wire, so a server can send it back verbatim.
//
// On the wire: {"type":"error","id":...,"code":...,"message":...,
// "retryable":...,"retry_after_ms":...}.
type Error struct {
	// ID echoes the id of the request refused, "" when the refusal is about
	// the connection or the id could not be read.
	ID string `json:"id,omitempty"`
	// Code is the machine-readable reason.
	Code Code `json:"code"`
	// Message is for humans and logs; never parse it.
	Message string `json:"message,omitempty"`
	// Retryable is Code.Retryable() when the error was built by this
	// package; a received error keeps the sender's value, so a client acts on
	// codes newer than itself.
	Retryable bool `json:"retryable"`
	// RetryAfterMS, when positive, is how long to wait before resending, in
	// milliseconds.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}

// Errorf returns an *Error with code c, a formatted message (cut to
// MaxMessageBytes) and Retryable set from c.
func Errorf(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Message: capMessage(fmt.Sprintf(format, args...)), Retryable: c.Retryable()}
}

// capMessage cuts s to at most MaxMessageBytes on a UTF-8 boundary.
func capMessage(s string) string {
	if len(s) <= MaxMessageBytes {
		return s
	}
	cut := MaxMessageBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// Error returns "syncproto: <code>: <message>".
func (e *Error) Error() string {
	if e.Message == "" {
		return "syncproto: " + string(e.Code)
	}
	return "syncproto: " + string(e.Code) + ": " + e.Message
}

// RetryAfter returns RetryAfterMS as a duration.
func (e *Error) RetryAfter() time.Duration {
	return time.Duration(e.RetryAfterMS) * time.Millisecond
}

// WithID returns a copy of e that echoes request id.
func (e *Error) WithID(id string) *Error {
	c := *e
	c.ID = id
	return &c
}
