package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"
)

// TokenRefreshMargin is how long before a token's exp the client asks its
// TokenSource for a fresh one: a connection is never opened with a token
// that would expire within it.
const TokenRefreshMargin = 30 * time.Second

// ErrTokenExpired says the server ended the session because its token (a
// JWT) expired. With a TokenSource the client gets a fresh token and
// reconnects by itself; without one, the app must reopen the client with a
// new token.
var ErrTokenExpired = errors.New("client: token expired")

// TokenSourceError says Config.TokenSource failed: the client stays
// offline (its queued writes wait, none is charged) and asks again on each
// reconnect attempt. Status.LastError holds it until the source succeeds.
type TokenSourceError struct {
	Err error
}

func (e *TokenSourceError) Error() string { return "client: token source: " + e.Err.Error() }
func (e *TokenSourceError) Unwrap() error { return e.Err }

// tokens hands out the bearer token: Config.Token, or Config.TokenSource's
// latest answer, fetched anew when missing, invalidated by the server
// (token_expired, unauthorized), or within TokenRefreshMargin of its exp.
// It is safe for concurrent use.
type tokens struct {
	static string
	source func(context.Context) (string, error)
	now    func() time.Time

	mu      sync.Mutex
	current string
	exp     time.Time // the current token's exp; zero when it has none
	lastErr *TokenSourceError
}

func newTokens(cfg Config) *tokens {
	return &tokens{static: cfg.Token, source: cfg.TokenSource, now: cfg.Now}
}

// get returns the token to dial with.
func (t *tokens) get(ctx context.Context) (string, error) {
	if t.source == nil {
		return t.static, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.current != "" && (t.exp.IsZero() || t.now().Add(TokenRefreshMargin).Before(t.exp)) {
		return t.current, nil
	}
	tok, err := t.source(ctx)
	if err == nil && tok == "" {
		err = errors.New("returned an empty token")
	}
	if err != nil {
		t.lastErr = &TokenSourceError{Err: err}
		return "", t.lastErr
	}
	t.current, t.exp, t.lastErr = tok, unverifiedExp(tok), nil
	return tok, nil
}

// invalidate drops the current token: the server refused it.
func (t *tokens) invalidate() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.current, t.exp = "", time.Time{}
}

// err is the source's last failure, nil once it succeeded.
func (t *tokens) err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lastErr == nil {
		return nil
	}
	return t.lastErr
}

// unverifiedExp reads a JWT's exp without verifying anything (the server
// verifies; the client only schedules its refresh), or zero when tok is
// not a JWT with a numeric exp.
func unverifiedExp(tok string) time.Time {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}
	}
	var claims struct {
		Exp *float64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == nil {
		return time.Time{}
	}
	sec := int64(*claims.Exp)
	return time.Unix(sec, int64((*claims.Exp-float64(sec))*1e9))
}
