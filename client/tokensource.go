package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// TokenRefreshMargin is how long before a token's exp the client asks its
// TokenSource for a fresh one, at most: the margin of a token is
// TokenRefreshMargin, or a quarter of its lifetime (exp minus the time the
// source returned it) when that is shorter, plus up to half that margin
// again of random jitter, so that devices whose tokens share an exp do not
// all renew at once. A connection is never opened with a token past its
// refresh time, and a connected client renews at that time: it asks the
// source and reconnects with the fresh token (Status.TokenRefresh is true
// meanwhile) before the server would end the session at exp. Writes in
// flight then are answered on the new connection (duplicate when the
// server had applied them); none is lost or charged.
const TokenRefreshMargin = 30 * time.Second

// tokenRefreshRetry bounds the wait between a failed renewal and the next
// ask, while the old token is still valid.
const tokenRefreshRetry = time.Second

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

	mu        sync.Mutex
	current   string
	exp       time.Time // the current token's exp; zero when it has none
	refreshAt time.Time // when to renew the current token; zero when it has no exp
	lastErr   *TokenSourceError
	// renewing is the link being replaced to present a fresh token, nil
	// when none is.
	renewing *link
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
	if t.current != "" && (t.refreshAt.IsZero() || t.now().Before(t.refreshAt)) {
		return t.current, nil
	}
	return t.fetchLocked(ctx)
}

// renew asks the source for a new token whatever the current one's exp,
// and reports whether it gave another one than the current.
func (t *tokens) renew(ctx context.Context) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	had := t.current
	tok, err := t.fetchLocked(ctx)
	return err == nil && tok != had, err
}

func (t *tokens) fetchLocked(ctx context.Context) (string, error) {
	tok, err := t.source(ctx)
	if err == nil && tok == "" {
		err = errors.New("returned an empty token")
	}
	if err != nil {
		t.lastErr = &TokenSourceError{Err: err}
		return "", t.lastErr
	}
	now := t.now()
	t.current, t.exp, t.lastErr = tok, unverifiedExp(tok), nil
	t.refreshAt = refreshTime(now, t.exp, rand.Float64())
	return tok, nil
}

// refreshTime is when a token obtained at now that expires at exp is
// renewed (TokenRefreshMargin says how), for a jitter draw r in [0, 1);
// zero when the token has no exp.
func refreshTime(now, exp time.Time, r float64) time.Time {
	if exp.IsZero() {
		return time.Time{}
	}
	margin := min(TokenRefreshMargin, exp.Sub(now)/4)
	margin = max(margin, 0)
	return exp.Add(-margin - time.Duration(r*float64(margin)/2))
}

// nextRefresh is when the current token is to be renewed, and whether it
// is (a source's token with an exp).
func (t *tokens) nextRefresh() (at, exp time.Time, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.refreshAt, t.exp, t.source != nil && !t.refreshAt.IsZero()
}

// setRenewing records that l is being replaced to present a fresh token
// (nil once a new link is bound).
func (t *tokens) setRenewing(l *link) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.renewing = l
}

// replacing reports whether l is the link being replaced for a fresh
// token, or any link is when l is nil.
func (t *tokens) replacing(l *link) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.renewing != nil && (l == nil || t.renewing == l)
}

// invalidate drops the current token: the server refused it.
func (t *tokens) invalidate() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.current, t.exp, t.refreshAt = "", time.Time{}, time.Time{}
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

// renewBeforeExpiry runs on l (a bound link) while it lives: at the
// current token's refresh time it asks the source for a new token and,
// once it has one, closes l, which the client replaces at once by a
// connection that presents the new token. A source that fails, or answers
// with the token the client holds (it caches tokens until they expire),
// is asked again every tokenRefreshRetry while the old token is valid (a
// failure shows in Status.LastError); at exp the server ends the session
// (token_expired) and the reconnect asks the source as usual.
func (c *Client) renewBeforeExpiry(l *link) {
	at, exp, ok := c.tokens.nextRefresh()
	if !ok {
		return
	}
	for {
		timer := time.NewTimer(max(at.Sub(c.now()), 0))
		select {
		case <-l.ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		fresh, err := c.tokens.renew(l.ctx)
		if fresh {
			break
		}
		if err != nil {
			c.statusChanged()
			c.log.Warn("renewing the token before it expires failed; asking again", "err", err, "exp", exp)
		}
		if l.ctx.Err() != nil || !c.now().Add(tokenRefreshRetry).Before(exp) {
			return
		}
		at = c.now().Add(tokenRefreshRetry)
	}
	c.log.Info("renewing the session's token before it expires: reconnecting with the fresh one", "server", l.conn.url, "exp", exp)
	c.tokens.setRenewing(l)
	c.metrics.tokenRenewals.Inc()
	c.statusChanged()
	l.conn.abandon()
}
