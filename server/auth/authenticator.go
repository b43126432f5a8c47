package auth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// reloadInterval bounds how often the token file and the deny list are
// checked for changes.
const reloadInterval = time.Second

// Config configures an Authenticator: a token file, JWT verification, or
// both.
type Config struct {
	// TokenFile is the token file; "" means none (then JWT is required).
	TokenFile string
	// JWT, when set, verifies JWTs (any bearer token not starting "sdk_"
	// or "sda_").
	JWT *JWTConfig
	// DenyFile is the JWT deny list (syncctl jwt revoke); a missing file is
	// an empty list; "" means none.
	DenyFile string
	// Now is the clock for expiry and reloads; nil means time.Now.
	Now func() time.Time
	// Logger receives JWKS refresh failures; nil discards.
	Logger *slog.Logger
	// Registerer receives the JWT metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Authenticator answers "who is this bearer token" from a token file
// and, when configured, by verifying JWTs. A newly issued token works at
// once; a revocation (token file or deny list) takes effect within
// reloadInterval of its write. It is safe for concurrent use; Close stops
// its JWKS refresh.
type Authenticator struct {
	tokenFile bool
	now       func() time.Time
	jwt       *jwtVerifier
	stop      context.CancelFunc
	done      sync.WaitGroup

	mu        sync.Mutex
	tokens    fileWatch
	byID      map[string]Token
	deny      *fileWatch
	denied    DenyList
	checkedAt time.Time
	reloadErr error
}

// NewAuthenticator loads the token file at path. now is the clock for the
// reload interval; nil means time.Now.
func NewAuthenticator(path string, now func() time.Time) (*Authenticator, error) {
	return New(Config{TokenFile: path, Now: now})
}

// New builds an Authenticator from cfg: it loads the token file and the
// deny list and, for a JWKS, fetches the keys once (a failure is logged
// and counted, and the background refresh keeps trying) and starts the
// background refresh.
func New(cfg Config) (*Authenticator, error) {
	if cfg.TokenFile == "" && cfg.JWT == nil {
		return nil, errors.New("auth: configure a token file, JWT verification, or both")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	a := &Authenticator{tokenFile: cfg.TokenFile != "", now: cfg.Now, tokens: fileWatch{path: cfg.TokenFile}, denied: DenyList{Version: denyVersion}}
	if cfg.DenyFile != "" {
		a.deny = &fileWatch{path: cfg.DenyFile}
	}
	if err := a.reload(); err != nil {
		return nil, err
	}
	if cfg.JWT != nil {
		jc := *cfg.JWT
		if err := jc.validate(); err != nil {
			return nil, fmt.Errorf("auth: jwt: %w", err)
		}
		m := newAuthMetrics(cfg.Registerer)
		if jc.HS256SecretFile != "" {
			secret, err := readSecret(jc.HS256SecretFile)
			if err != nil {
				return nil, fmt.Errorf("auth: jwt: %w", err)
			}
			a.jwt = newVerifier(jc, secret, nil, cfg.Now, m)
		} else {
			keys := newKeySet(jc.JWKSURL, jc.JWKSFile, jc.HTTPClient, jc.FetchTimeout, jc.MinRefreshInterval, cfg.Now, cfg.Logger, m)
			a.jwt = newVerifier(jc, nil, keys, cfg.Now, m)
			ctx, cancel := context.WithCancel(context.Background())
			a.stop = cancel
			keys.refresh(ctx, false)
			a.done.Add(1)
			go func() {
				defer a.done.Done()
				keys.run(ctx, jc.RefreshInterval)
			}()
		}
	}
	return a, nil
}

// Close stops the JWKS refresh and waits for it. It is idempotent.
func (a *Authenticator) Close() error {
	if a.stop != nil {
		a.stop()
	}
	a.done.Wait()
	return nil
}

// Authenticate returns the principal of a bearer token. A token-file token
// ("sdk_...", an admin's "sda_...") that is malformed, unknown or revoked,
// or has the admin prefix without being an admin's, is ErrUnauthorized and
// no more. A JWT refusal wraps ErrUnauthorized and says why, or is
// ErrTokenExpired. If a watched file changed and no longer parses, the last
// good version stays in force and ReloadError reports why.
func (a *Authenticator) Authenticate(token string) (Principal, error) {
	if IsFileToken(token) || a.jwt == nil {
		return a.fromTokenFile(token)
	}
	p, err := a.jwt.verify(context.Background(), token)
	if err != nil {
		return Principal{}, err
	}
	if err := a.Check(p); err != nil {
		return Principal{}, err
	}
	return p, nil
}

func (a *Authenticator) fromTokenFile(token string) (Principal, error) {
	id, secret, adminPrefix, ok := parseToken(token)
	if !ok || !a.tokenFile {
		return Principal{}, ErrUnauthorized
	}
	a.mu.Lock()
	a.maybeReloadLocked()
	t, found := a.byID[id]
	if !found {
		// A token issued a moment ago works at once: an unknown id costs
		// one stat, and a re-read only when the file changed.
		a.reloadErr = a.reloadTokensLocked()
		t, found = a.byID[id]
	}
	a.mu.Unlock()
	if !found || !secretMatches(t, secret) || (adminPrefix && !t.Admin) {
		return Principal{}, ErrUnauthorized
	}
	return t.Principal, nil
}

// Check reports whether an authenticated principal still holds: nil, or
// ErrTokenExpired once a JWT's exp passed (no leeway: a session ends at
// exp), or an error wrapping ErrUnauthorized once its token was revoked
// (token file) or denied (deny list). Open sessions call it periodically
// and end when it fails.
func (a *Authenticator) Check(p Principal) error {
	if p.IsJWT() && !a.now().Before(p.ExpiresAt) {
		return fmt.Errorf("%w at %s", ErrTokenExpired, p.ExpiresAt.UTC().Format(time.RFC3339))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.maybeReloadLocked()
	if why := a.denied.denies(p, a.now()); why != "" {
		return fmt.Errorf("%w: %s", ErrUnauthorized, why)
	}
	if !p.IsJWT() {
		if _, found := a.byID[p.TokenID]; !found {
			return fmt.Errorf("%w: the token was revoked", ErrUnauthorized)
		}
	}
	return nil
}

// Active reports whether the token-file token with id tokenID is still in
// the token file (not revoked).
func (a *Authenticator) Active(tokenID string) bool {
	return a.Check(Principal{TokenID: tokenID}) == nil
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
	if err := a.reloadTokensLocked(); err != nil {
		return err
	}
	return a.reloadDenyLocked()
}

// maybeReloadLocked re-reads changed files at most once per reloadInterval.
func (a *Authenticator) maybeReloadLocked() {
	if now := a.now(); now.Sub(a.checkedAt) >= reloadInterval {
		a.checkedAt = now
		a.reloadErr = errors.Join(a.reloadTokensLocked(), a.reloadDenyLocked())
	}
}

func (a *Authenticator) reloadTokensLocked() error {
	if !a.tokenFile {
		return nil
	}
	st, changed, err := a.tokens.changed()
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	if !changed {
		return nil
	}
	tokens, err := ReadFile(a.tokens.path)
	if err != nil {
		return err
	}
	byID := make(map[string]Token, len(tokens))
	for _, t := range tokens {
		byID[t.TokenID] = t
	}
	a.byID = byID
	a.tokens.accept(st)
	return nil
}

func (a *Authenticator) reloadDenyLocked() error {
	if a.deny == nil {
		return nil
	}
	st, changed, err := a.deny.changed()
	if errors.Is(err, os.ErrNotExist) {
		a.denied, *a.deny = DenyList{Version: denyVersion}, fileWatch{path: a.deny.path}
		return nil
	}
	if err != nil {
		return fmt.Errorf("deny list: %w", err)
	}
	if !changed {
		return nil
	}
	d, err := ReadDenyList(a.deny.path)
	if err != nil {
		return err
	}
	a.denied = d
	a.deny.accept(st)
	return nil
}

// ErrNoDenyFile says the Authenticator was configured without a deny list
// (Config.DenyFile), so it can neither list nor change one.
var ErrNoDenyFile = errors.New("auth: no JWT deny list is configured (syncd --jwt-deny-file)")

// DenyList returns the deny list in force, re-read first when its file
// changed.
func (a *Authenticator) DenyList() (DenyList, error) {
	if a.deny == nil {
		return DenyList{}, ErrNoDenyFile
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.reloadDenyLocked(); err != nil {
		return DenyList{}, err
	}
	return a.denied.clone(), nil
}

// Deny applies d to the deny list file (Deny) and puts the result in force
// at once: Check refuses the denied tokens from its return. Changes through
// one Authenticator are serialised; a concurrent writer of the same file in
// another process may lose its change.
func (a *Authenticator) Deny(d Denial) (DenyList, error) {
	return a.changeDenyList(func(path string, now time.Time) (DenyList, error) { return Deny(path, d, now) })
}

// Allow removes the entry of jti or user (Allow) and puts the result in
// force at once; ErrNotDenied when the list has no such entry.
func (a *Authenticator) Allow(jti, user string) (DenyList, error) {
	return a.changeDenyList(func(path string, now time.Time) (DenyList, error) { return Allow(path, jti, user, now) })
}

func (a *Authenticator) changeDenyList(change func(path string, now time.Time) (DenyList, error)) (DenyList, error) {
	if a.deny == nil {
		return DenyList{}, ErrNoDenyFile
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	d, err := change(a.deny.path, a.now())
	if err != nil {
		return DenyList{}, err
	}
	a.denied = d
	if st, err := os.Stat(a.deny.path); err == nil {
		a.deny.accept(st)
	}
	return d.clone(), nil
}

func (d DenyList) clone() DenyList {
	d.JTIs, d.Users = slices.Clone(d.JTIs), slices.Clone(d.Users)
	return d
}
