package auth

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrNoTokenFile says the Authenticator was configured without a token
// file (JWT only), so it can neither list, issue nor revoke tokens.
var ErrNoTokenFile = errors.New("auth: no token file is configured (syncd --tokens)")

// Tokens returns the token file's tokens in force, sorted by id, re-read
// first when the file changed. Their secrets are not in them (the file
// holds hashes only).
func (a *Authenticator) Tokens() ([]Token, error) {
	if !a.tokenFile {
		return nil, ErrNoTokenFile
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.reloadTokensLocked(); err != nil {
		return nil, err
	}
	out := make([]Token, 0, len(a.byID))
	for _, t := range a.byID {
		out = append(out, t)
	}
	slices.SortFunc(out, func(x, y Token) int { return strings.Compare(x.TokenID, y.TokenID) })
	return out, nil
}

// IssueToken adds a token for p to the token file (Issue) and puts it in
// force at once; it returns the bearer token, which exists only in this
// answer, and the token as the file holds it. Changes through one Authenticator are serialised; a
// concurrent writer of the same file in another process may lose its
// change.
func (a *Authenticator) IssueToken(p Principal) (string, Token, error) {
	if !a.tokenFile {
		return "", Token{}, ErrNoTokenFile
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	bearer, err := Issue(a.tokens.path, p, a.now())
	if err != nil {
		return "", Token{}, err
	}
	if err := a.forceReloadTokensLocked(); err != nil {
		return "", Token{}, err
	}
	return bearer, a.byID[TokenIDOf(bearer)], nil
}

// RevokeToken removes the token with id from the token file (Revoke) and
// puts the removal in force at once: Check refuses the token from its
// return. ErrNoSuchToken when the file has no such token.
func (a *Authenticator) RevokeToken(id string) error {
	if !a.tokenFile {
		return ErrNoTokenFile
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := Revoke(a.tokens.path, id); err != nil {
		return err
	}
	return a.forceReloadTokensLocked()
}

// forceReloadTokensLocked re-reads the token file whatever its stat says:
// a rewrite within the file system's timestamp resolution and of the same
// size would otherwise look unchanged.
func (a *Authenticator) forceReloadTokensLocked() error {
	a.tokens = fileWatch{path: a.tokens.path}
	if err := a.reloadTokensLocked(); err != nil {
		return fmt.Errorf("reload token file: %w", err)
	}
	return nil
}
