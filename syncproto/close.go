package syncproto

// CloseCode is a websocket close status (RFC 6455 section 7.4) as syncd uses
// it. It converts directly to the websocket library's status type.
type CloseCode uint16

// Close codes. Before closing for a reason other than CloseNormal the server
// sends an error message with the matching Code, when the connection still
// allows it; the close reason text is that code.
const (
	// CloseNormal: the peer is done (client unsubscribes and leaves, or the
	// server answered a client's close).
	CloseNormal CloseCode = 1000
	// CloseGoingAway: the server is shutting down (CodeShuttingDown) or the
	// client is leaving. Reconnect with backoff, preferably elsewhere.
	CloseGoingAway CloseCode = 1001
	// CloseProtocolError: the client broke the protocol (CodeHelloRequired,
	// a refused hello, CodeMalformed including binary frames). Do not
	// reconnect unchanged: fix the client.
	CloseProtocolError CloseCode = 1002
	// ClosePolicyViolation: authorization failed or was revoked
	// (CodeUnauthorized, CodeWrongClientID). Do not reconnect until the
	// credentials change.
	ClosePolicyViolation CloseCode = 1008
	// CloseMessageTooBig: a frame exceeded MaxFrameBytes (CodeFrameTooLarge).
	// Reconnect and send smaller batches.
	CloseMessageTooBig CloseCode = 1009
	// CloseInternalError: the server failed (CodeInternal). Reconnect with
	// backoff and resend what had no answer.
	CloseInternalError CloseCode = 1011
	// CloseTryAgainLater: the server is overloaded (CodeServerBusy) or the
	// connection kept exceeding its rate limit (CodeRateLimited). Reconnect
	// with backoff.
	CloseTryAgainLater CloseCode = 1013
	// CloseIdleTimeout: no frame arrived within Limits.IdleTimeoutMS.
	// Reconnect when there is something to do.
	CloseIdleTimeout CloseCode = 4000
)

// CloseCodes lists every close code syncd uses, in PROTOCOL.md's order.
var CloseCodes = []CloseCode{
	CloseNormal, CloseGoingAway, CloseProtocolError, ClosePolicyViolation, CloseMessageTooBig, CloseInternalError,
	CloseTryAgainLater, CloseIdleTimeout,
}

// CloseFor returns the close code a server uses when a refusal with code c
// ends the connection. Which refusals end the connection is the server's
// protocol duty (PROTOCOL.md, "Close codes"): any error answering hello, a
// request before hello, a malformed or oversize frame, a revoked token,
// shutdown, and a session failure. CloseFor only picks the number.
func CloseFor(c Code) CloseCode {
	switch c {
	case CodeUnauthorized, CodeTokenExpired, CodeWrongClientID, CodeForbiddenOrigin:
		return ClosePolicyViolation
	case CodeFrameTooLarge:
		return CloseMessageTooBig
	case CodeShuttingDown:
		return CloseGoingAway
	case CodeServerBusy, CodeRateLimited:
		return CloseTryAgainLater
	case CodeInternal:
		return CloseInternalError
	case CodeIdleTimeout:
		return CloseIdleTimeout
	}
	return CloseProtocolError
}
