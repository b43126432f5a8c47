package auth

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// reloadInterval bounds how often Authenticate stats the token file.
const reloadInterval = time.Second

// Authenticator answers "who is this bearer token" from a token file. A
// newly issued token works at once; a revocation takes effect within
// reloadInterval of its write. It is safe for concurrent use.
type Authenticator struct {
	path string
	now  func() time.Time

	mu        sync.Mutex
	byID      map[string]Token
	modTime   time.Time
	size      int64
	checkedAt time.Time
	reloadErr error
}

// NewAuthenticator loads the token file at path. now is the clock for the
// reload interval; nil means time.Now.
func NewAuthenticator(path string, now func() time.Time) (*Authenticator, error) {
	if now == nil {
		now = time.Now
	}
	a := &Authenticator{path: path, now: now}
	if err := a.reload(); err != nil {
		return nil, err
	}
	return a, nil
}

// Authenticate returns the principal of a bearer token, or ErrUnauthorized.
// If the file changed and no longer parses, the last good set of tokens
// stays in force and ReloadError reports why.
func (a *Authenticator) Authenticate(token string) (Principal, error) {
	id, secret, ok := parseToken(token)
	if !ok {
		return Principal{}, ErrUnauthorized
	}
	a.mu.Lock()
	if now := a.now(); now.Sub(a.checkedAt) >= reloadInterval {
		a.checkedAt = now
		a.reloadErr = a.reloadIfChangedLocked()
	}
	t, found := a.byID[id]
	if !found {
		// A token issued a moment ago works at once: an unknown id costs
		// one stat, and a re-read only when the file changed.
		a.reloadErr = a.reloadIfChangedLocked()
		t, found = a.byID[id]
	}
	a.mu.Unlock()
	if !found || !secretMatches(t, secret) {
		return Principal{}, ErrUnauthorized
	}
	return t.Principal, nil
}

// Active reports whether the token with id tokenID is still in the token
// file (not revoked), re-reading a changed file at most once per
// reloadInterval. Sessions opened with a token ask it periodically and end
// when it turns false.
func (a *Authenticator) Active(tokenID string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if now := a.now(); now.Sub(a.checkedAt) >= reloadInterval {
		a.checkedAt = now
		a.reloadErr = a.reloadIfChangedLocked()
	}
	_, found := a.byID[tokenID]
	return found
}

// ReloadError reports why the last reload of a changed file failed, or nil.
func (a *Authenticator) ReloadError() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reloadErr
}

func (a *Authenticator) reload() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.checkedAt = a.now()
	return a.reloadIfChangedLocked()
}

func (a *Authenticator) reloadIfChangedLocked() error {
	st, err := os.Stat(a.path)
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	if a.byID != nil && st.ModTime().Equal(a.modTime) && st.Size() == a.size {
		return nil
	}
	tokens, err := ReadFile(a.path)
	if err != nil {
		return err
	}
	byID := make(map[string]Token, len(tokens))
	for _, t := range tokens {
		byID[t.TokenID] = t
	}
	a.byID, a.modTime, a.size = byID, st.ModTime(), st.Size()
	return nil
}
