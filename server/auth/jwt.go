package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/syncd-dev/syncd/syncproto"
)

// Defaults and bounds of JWTConfig.
const (
	DefaultJWTLeeway          = 30 * time.Second
	MaxJWTLeeway              = 5 * time.Minute
	DefaultJWTMaxLifetime     = 24 * time.Hour
	DefaultMaxJWTBytes        = 8 << 10
	DefaultJWKSRefresh        = 10 * time.Minute
	DefaultJWKSMinRefresh     = 30 * time.Second
	DefaultJWKSFetchTimeout   = 10 * time.Second
	DefaultTenantClaim        = "tenant"
	DefaultReadClaim          = "read"
	DefaultWriteClaim         = "write"
	DefaultScopesClaim        = "scopes"
	minHS256SecretBytes       = 32
	maxScopes, maxScopeValues = 64, 256
)

// DefaultJWTAlgorithms is the algorithm allow-list for keys from a JWKS.
var DefaultJWTAlgorithms = []string{"RS256", "ES256", "EdDSA"}

// publicAlgorithms are the algorithms JWTConfig.Algorithms may name when
// keys come from a JWKS. HMAC is never among them: a JWKS holds public
// keys, and accepting HS256 against one is the algorithm-confusion attack.
var publicAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// ErrTokenExpired says a JWT's exp passed (beyond the leeway). The device
// should get a fresh token from its provider and reconnect.
var ErrTokenExpired = errors.New("auth: token expired")

// JWTConfig configures JWT verification. Exactly one key source is set:
// JWKSURL, JWKSFile or HS256SecretFile. The zero value of every other field
// means its default.
type JWTConfig struct {
	// JWKSURL is an https:// URL serving the provider's JWKS (an OIDC
	// provider's jwks_uri).
	JWKSURL string
	// JWKSFile is a JWKS document on disk, re-read on the same schedule.
	JWKSFile string
	// HS256SecretFile holds a shared secret (at least 32 bytes; one
	// trailing newline is ignored). With it, HS256 is the only algorithm
	// accepted; it never combines with a JWKS.
	HS256SecretFile string
	// Algorithms is the allow-list for JWKS keys (DefaultJWTAlgorithms);
	// "none" and HMAC algorithms are refused.
	Algorithms []string
	// Issuer is the required iss. Required.
	Issuer string
	// Audience is a value aud must hold. Required.
	Audience string
	// Leeway absorbs clock differences on exp, nbf and iat
	// (DefaultJWTLeeway, at most MaxJWTLeeway).
	Leeway time.Duration
	// MaxLifetime bounds exp - iat, and exp - now for a token without iat
	// (DefaultJWTMaxLifetime).
	MaxLifetime time.Duration
	// MaxTokenBytes bounds the encoded token (DefaultMaxJWTBytes).
	MaxTokenBytes int
	// TenantClaim names the claim holding the tenant (DefaultTenantClaim).
	TenantClaim string
	// DefaultTenant is the tenant of a token without TenantClaim; "" refuses
	// such tokens.
	DefaultTenant string
	// ReadClaim and WriteClaim name the claims listing the models the
	// token may read and write: a JSON array of strings or one
	// space-separated string, "*" for all (DefaultReadClaim,
	// DefaultWriteClaim). An absent claim grants nothing.
	ReadClaim, WriteClaim string
	// ScopesClaim names the claim holding scope grants, an object of scope
	// name to an array of values (DefaultScopesClaim).
	ScopesClaim string
	// ClientIDClaim, when set, names a claim holding the device's client
	// id, which hello must then name exactly. When "", the device chooses
	// its client id inside its user's namespace (syncproto.DeviceNamespace).
	ClientIDClaim string
	// RefreshInterval is how often the JWKS is fetched in the background
	// (DefaultJWKSRefresh); MinRefreshInterval is the least time between two
	// fetches caused by tokens with unknown kids (DefaultJWKSMinRefresh).
	RefreshInterval, MinRefreshInterval time.Duration
	// FetchTimeout bounds one JWKS fetch (DefaultJWKSFetchTimeout).
	FetchTimeout time.Duration
	// HTTPClient fetches JWKSURL; nil means a client with default TLS
	// settings.
	HTTPClient *http.Client
}

func (c *JWTConfig) validate() error {
	sources := 0
	for _, s := range []string{c.JWKSURL, c.JWKSFile, c.HS256SecretFile} {
		if s != "" {
			sources++
		}
	}
	if sources != 1 {
		return errors.New("set exactly one of the JWKS URL, the JWKS file and the HS256 secret file")
	}
	if c.JWKSURL != "" {
		u, err := url.Parse(c.JWKSURL)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("JWKS URL %q: want an https:// URL", c.JWKSURL)
		}
	}
	if c.Issuer == "" || c.Audience == "" {
		return errors.New("the issuer and the audience are required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Leeway, DefaultJWTLeeway)
	def(&c.MaxLifetime, DefaultJWTMaxLifetime)
	def(&c.RefreshInterval, DefaultJWKSRefresh)
	def(&c.MinRefreshInterval, DefaultJWKSMinRefresh)
	def(&c.FetchTimeout, DefaultJWKSFetchTimeout)
	if c.Leeway < 0 || c.Leeway > MaxJWTLeeway {
		return fmt.Errorf("leeway %s: want 0 to %s", c.Leeway, MaxJWTLeeway)
	}
	if c.MaxLifetime < 0 || c.RefreshInterval < 0 || c.MinRefreshInterval < 0 || c.FetchTimeout < 0 {
		return errors.New("durations must not be negative")
	}
	if c.MaxTokenBytes == 0 {
		c.MaxTokenBytes = DefaultMaxJWTBytes
	}
	if c.MaxTokenBytes < 0 {
		return errors.New("the token size limit must not be negative")
	}
	for p, v := range map[*string]string{&c.TenantClaim: DefaultTenantClaim, &c.ReadClaim: DefaultReadClaim, &c.WriteClaim: DefaultWriteClaim, &c.ScopesClaim: DefaultScopesClaim} {
		if *p == "" {
			*p = v
		}
	}
	if c.DefaultTenant != "" {
		if err := syncproto.ValidateID(c.DefaultTenant); err != nil {
			return fmt.Errorf("default tenant: %w", err)
		}
	}
	if c.HS256SecretFile != "" {
		if len(c.Algorithms) > 0 && !slices.Equal(c.Algorithms, []string{"HS256"}) {
			return errors.New("with an HS256 secret, HS256 is the only algorithm")
		}
		c.Algorithms = []string{"HS256"}
		return nil
	}
	if len(c.Algorithms) == 0 {
		c.Algorithms = DefaultJWTAlgorithms
	}
	for _, a := range c.Algorithms {
		if !slices.Contains(publicAlgorithms, a) {
			return fmt.Errorf("algorithm %q is not allowed with a JWKS (allowed: %s)", a, strings.Join(publicAlgorithms, ", "))
		}
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	return nil
}

// jwtVerifier turns a JWT into a principal.
type jwtVerifier struct {
	cfg    JWTConfig
	parser *jwt.Parser
	secret []byte  // HS256
	keys   *keySet // JWKS
	now    func() time.Time
	m      *authMetrics
}

// newVerifier verifies with secret (HS256) or keys (a JWKS), per a
// validated cfg, on the clock now.
func newVerifier(cfg JWTConfig, secret []byte, keys *keySet, now func() time.Time, m *authMetrics) *jwtVerifier {
	return &jwtVerifier{cfg: cfg, secret: secret, keys: keys, now: now, m: m,
		parser: jwt.NewParser(jwt.WithValidMethods(cfg.Algorithms), jwt.WithIssuer(cfg.Issuer), jwt.WithAudience(cfg.Audience),
			jwt.WithLeeway(cfg.Leeway), jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithTimeFunc(now))}
}

func readSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("HS256 secret: %w", err)
	}
	b = []byte(strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"))
	if len(b) < minHS256SecretBytes {
		return nil, fmt.Errorf("HS256 secret %s: %d bytes, want at least %d", path, len(b), minHS256SecretBytes)
	}
	return b, nil
}

// verify checks token and maps its claims to a principal. Every refusal
// wraps ErrUnauthorized, or is ErrTokenExpired, and says why.
func (v *jwtVerifier) verify(ctx context.Context, token string) (Principal, error) {
	p, result, err := v.check(ctx, token)
	v.m.verifications.WithLabelValues(result).Inc()
	return p, err
}

func refused(result, format string, args ...any) (Principal, string, error) {
	return Principal{}, result, fmt.Errorf("%w: jwt: %s", ErrUnauthorized, fmt.Sprintf(format, args...))
}

func (v *jwtVerifier) check(ctx context.Context, token string) (Principal, string, error) {
	if len(token) > v.cfg.MaxTokenBytes {
		return refused("too_large", "token of %d bytes, over the %d-byte limit", len(token), v.cfg.MaxTokenBytes)
	}
	claims := jwt.MapClaims{}
	parsed, err := v.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		alg := t.Method.Alg()
		if v.secret != nil {
			return v.secret, nil
		}
		kid, _ := t.Header["kid"].(string)
		keys := v.keys.lookup(ctx, kid, alg)
		if len(keys) == 0 {
			return nil, errUnknownKey{kid: kid, alg: alg}
		}
		set := jwt.VerificationKeySet{}
		for _, k := range keys {
			set.Keys = append(set.Keys, k)
		}
		return set, nil
	})
	if err != nil {
		if parsed != nil && !slices.Contains(v.cfg.Algorithms, fmt.Sprint(parsed.Header["alg"])) {
			return refused("bad_algorithm", "algorithm %v is not accepted (accepted: %s)", parsed.Header["alg"], strings.Join(v.cfg.Algorithms, ", "))
		}
		return classify(err)
	}
	return v.principal(claims)
}

type errUnknownKey struct{ kid, alg string }

func (e errUnknownKey) Error() string {
	return fmt.Sprintf("no key with kid %q for %s in the JWKS (after a refresh)", e.kid, e.alg)
}

// classify names a parse or validation failure.
func classify(err error) (Principal, string, error) {
	var unknown errUnknownKey
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return Principal{}, "expired", fmt.Errorf("%w: jwt: %v", ErrTokenExpired, err)
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return refused("not_yet_valid", "%v", err)
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return refused("issued_in_future", "%v", err)
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return refused("bad_issuer", "%v", err)
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return refused("bad_audience", "%v", err)
	case errors.As(err, &unknown):
		return refused("unknown_kid", "%v", unknown)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return refused("bad_signature", "%v", err)
	case errors.Is(err, jwt.ErrTokenMalformed):
		return refused("malformed", "%v", err)
	}
	return refused("bad_claims", "%v", err)
}

// principal maps verified claims to a principal.
func (v *jwtVerifier) principal(c jwt.MapClaims) (Principal, string, error) {
	sub, err := c.GetSubject()
	if err != nil || syncproto.ValidateUser(sub) != nil {
		return refused("bad_claims", "sub must name the user (1 to %d bytes of UTF-8)", syncproto.MaxUserBytes)
	}
	exp, _ := c.GetExpirationTime()
	iat, _ := c.GetIssuedAt()
	now := v.now()
	lifetime := exp.Sub(now)
	if iat != nil {
		lifetime = exp.Sub(iat.Time)
	}
	if lifetime > v.cfg.MaxLifetime {
		return refused("too_long_lived", "the token lives %s, over the %s limit", lifetime.Round(time.Second), v.cfg.MaxLifetime)
	}
	p := Principal{TokenID: "jwt:" + sub, User: sub, ExpiresAt: exp.Time}
	if iat != nil {
		p.IssuedAt = iat.Time
	}
	if jti, ok := c["jti"]; ok {
		s, isString := jti.(string)
		if !isString || validateJTI(s) != nil {
			return refused("bad_claims", "jti must be a string of 1 to %d bytes", maxJTIBytes)
		}
		p.JTI = s
	}
	p.Tenant = v.cfg.DefaultTenant
	if t, ok := c[v.cfg.TenantClaim]; ok {
		s, isString := t.(string)
		if !isString {
			return refused("bad_claims", "claim %q (tenant) must be a string", v.cfg.TenantClaim)
		}
		p.Tenant = s
	}
	if err := syncproto.ValidateID(p.Tenant); err != nil {
		return refused("bad_claims", "claim %q (tenant): %v", v.cfg.TenantClaim, err)
	}
	if p.Read, err = modelsClaim(c, v.cfg.ReadClaim); err != nil {
		return refused("bad_claims", "%v", err)
	}
	if p.Write, err = modelsClaim(c, v.cfg.WriteClaim); err != nil {
		return refused("bad_claims", "%v", err)
	}
	if p.Scopes, err = scopesClaim(c, v.cfg.ScopesClaim); err != nil {
		return refused("bad_claims", "%v", err)
	}
	if v.cfg.ClientIDClaim != "" {
		id, isString := c[v.cfg.ClientIDClaim].(string)
		if !isString || syncproto.ValidateID(id) != nil {
			return refused("bad_claims", "claim %q (client id) must be a client id matching %s", v.cfg.ClientIDClaim, syncproto.IDPattern)
		}
		p.ClientID = id
	} else {
		p.ClientIDPrefix = syncproto.DeviceNamespace(sub)
	}
	return p, "ok", nil
}

// modelsClaim reads a model list: an array of strings or one
// space-separated string; absent is none.
func modelsClaim(c jwt.MapClaims, name string) ([]string, error) {
	raw, ok := c[name]
	if !ok {
		return nil, nil
	}
	var models []string
	switch v := raw.(type) {
	case string:
		models = strings.Fields(v)
	case []any:
		for _, m := range v {
			s, ok := m.(string)
			if !ok {
				return nil, fmt.Errorf("claim %q must list model names as strings", name)
			}
			models = append(models, s)
		}
	default:
		return nil, fmt.Errorf("claim %q must be an array of model names or a space-separated string", name)
	}
	for _, m := range models {
		if m == Wildcard {
			continue
		}
		if err := syncproto.ValidateModel(m); err != nil {
			return nil, fmt.Errorf("claim %q: %w", name, err)
		}
	}
	return models, nil
}

// scopesClaim reads scope grants: an object of scope name to an array of
// string values; absent is none.
func scopesClaim(c jwt.MapClaims, name string) (map[string][]string, error) {
	raw, ok := c[name]
	if !ok {
		return nil, nil
	}
	obj, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("claim %q must be an object of scope name to values", name)
	}
	scopes := make(map[string][]string, len(obj))
	for k, vs := range obj {
		list, ok := vs.([]any)
		if !ok {
			return nil, fmt.Errorf("claim %q: scope %q must be an array of strings", name, k)
		}
		for _, v := range list {
			s, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("claim %q: scope %q must be an array of strings", name, k)
			}
			scopes[k] = append(scopes[k], s)
		}
	}
	if err := validateScopes(scopes); err != nil {
		return nil, fmt.Errorf("claim %q: %w", name, err)
	}
	return scopes, nil
}

// validateScopes checks scope grants: at most 64 scopes named like models,
// each with at most 256 values of 1 to MaxUserBytes bytes.
func validateScopes(scopes map[string][]string) error {
	if len(scopes) > maxScopes {
		return fmt.Errorf("%d scopes, over the limit of %d", len(scopes), maxScopes)
	}
	for name, values := range scopes {
		if err := syncproto.ValidateModel(name); err != nil {
			return fmt.Errorf("scope name %q must match %s", name, syncproto.ModelPattern)
		}
		if len(values) > maxScopeValues {
			return fmt.Errorf("scope %q: %d values, over the limit of %d", name, len(values), maxScopeValues)
		}
		for _, v := range values {
			if syncproto.ValidateUser(v) != nil {
				return fmt.Errorf("scope %q: a value must be 1 to %d bytes of UTF-8 without control characters", name, syncproto.MaxUserBytes)
			}
		}
	}
	return nil
}
