package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"github.com/syncd-dev/syncd/syncproto"
)

var (
	// ErrWrongClientID says the token acts as another client id than the
	// one configured: fix the configuration (or take the id from the token).
	ErrWrongClientID = errors.New("client: token belongs to another client id")
	// ErrServerBusy says the server turned the connection away for now;
	// the RefusedError's RetryAfter says when to expect it back.
	ErrServerBusy = errors.New("client: server busy")
	// ErrIncompatible says the server does not speak this client's
	// protocol version.
	ErrIncompatible = errors.New("client: incompatible protocol")
)

// RefusedError says why the server refused this client's session: the
// typed cause Sync, Await and Status report instead of "offline".
//
// errors.Is matches it against ErrUnauthorized (a bad or revoked token),
// ErrWrongClientID, ErrServerBusy (busy or shutting down: transient) and
// ErrIncompatible.
type RefusedError struct {
	// Code is the server's error code (unauthorized, wrong_client_id,
	// server_busy, shutting_down, ...).
	Code    syncproto.Code
	Message string
	// RetryAfter is the server's hint for a transient refusal; 0 if none.
	RetryAfter time.Duration
}

func (e *RefusedError) Error() string {
	s := fmt.Sprintf("client: server refused the session: %s", e.Code)
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %s)", e.RetryAfter)
	}
	return s
}

// Is matches the sentinel of e's cause.
func (e *RefusedError) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.Code == syncproto.CodeUnauthorized
	case ErrTokenExpired:
		return e.Code == syncproto.CodeTokenExpired
	case ErrWrongClientID:
		return e.Code == syncproto.CodeWrongClientID
	case ErrServerBusy:
		return e.Code == syncproto.CodeServerBusy || e.Code == syncproto.CodeShuttingDown || e.Code == syncproto.CodeRateLimited
	case ErrIncompatible:
		return e.Code == codeIncompatible
	}
	return false
}

// RetryHint is the server's hint of when to try again (the reconnect
// coordinator waits at least this long before its next attempt).
func (e *RefusedError) RetryHint() time.Duration { return e.RetryAfter }

// Transient reports whether the refusal may end by itself (the server is
// busy or restarting), as opposed to one only the app can fix.
func (e *RefusedError) Transient() bool { return errors.Is(e, ErrServerBusy) }

// codeIncompatible is the code of a server that did not negotiate the
// subprotocol: it answers in no syncproto code of its own.
const codeIncompatible syncproto.Code = "incompatible_protocol"

// maxRefusalBody bounds how much of a refused upgrade's body is read.
const maxRefusalBody = 4 << 10

// upgradeRefusal turns a refused websocket upgrade into a RefusedError,
// or nil when resp says nothing the app can act on (no answer, a 5xx
// without a code).
func upgradeRefusal(resp *http.Response) *RefusedError {
	if resp == nil {
		return nil
	}
	e := &RefusedError{}
	if resp.Body != nil {
		var body syncproto.Error
		if b, err := io.ReadAll(io.LimitReader(resp.Body, maxRefusalBody)); err == nil && json.Unmarshal(b, &body) == nil {
			e.Code, e.Message = body.Code, body.Message
			e.RetryAfter = time.Duration(body.RetryAfterMS) * time.Millisecond
		}
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 && e.RetryAfter == 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	if e.Code == "" {
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			e.Code = syncproto.CodeUnauthorized
		case http.StatusServiceUnavailable, http.StatusTooManyRequests:
			e.Code = syncproto.CodeServerBusy
		default:
			return nil
		}
	}
	return e
}

// sessionRefusal returns the RefusedError err carries: an error answer to
// hello, or a close whose reason is a refusal code (a revoked token closes
// 1008 with reason unauthorized; a shutdown 1001 with shutting_down).
func sessionRefusal(err error) *RefusedError {
	var re *RefusedError
	if errors.As(err, &re) {
		return re
	}
	var pe *syncproto.Error
	if errors.As(err, &pe) && refusalCode(pe.Code) {
		return &RefusedError{Code: pe.Code, Message: pe.Message, RetryAfter: time.Duration(pe.RetryAfterMS) * time.Millisecond}
	}
	var ce websocket.CloseError
	if errors.As(err, &ce) && refusalCode(syncproto.Code(ce.Reason)) {
		return &RefusedError{Code: syncproto.Code(ce.Reason)}
	}
	return nil
}

// refusalCode reports whether code refuses a whole session.
func refusalCode(code syncproto.Code) bool {
	switch code {
	case syncproto.CodeUnauthorized, syncproto.CodeTokenExpired, syncproto.CodeWrongClientID, syncproto.CodeServerBusy,
		syncproto.CodeShuttingDown, syncproto.CodeRateLimited, syncproto.CodeForbiddenOrigin:
		return true
	}
	return false
}
