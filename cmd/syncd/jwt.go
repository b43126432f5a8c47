package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/server/auth"
)

// jwtOptions are the flags of JWT verification (docs/operations.md,
// Identity). JWT verification is on when a key source is set.
type jwtOptions struct {
	jwksURL, jwksFile, secretFile string
	jwksCA                        string
	algorithms                    string
	issuer, audience              string
	leeway, maxLifetime           time.Duration
	maxBytes                      int
	tenantClaim, defaultTenant    string
	readClaim, writeClaim         string
	scopesClaim, clientIDClaim    string
	refresh, minRefresh, timeout  time.Duration
	denyFile                      string
}

func (j *jwtOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&j.jwksURL, "jwt-jwks-url", "", "verify JWTs with the keys of this https:// JWKS URL (an OIDC provider's jwks_uri); cached, refreshed every --jwt-jwks-refresh and on an unknown kid")
	fs.StringVar(&j.jwksFile, "jwt-jwks-file", "", "verify JWTs with the keys of this JWKS file (syncctl jwt keygen writes one)")
	fs.StringVar(&j.secretFile, "jwt-hs256-secret-file", "", "verify HS256 JWTs with the shared secret in this file (at least 32 bytes); never combined with a JWKS")
	fs.StringVar(&j.jwksCA, "jwt-jwks-ca", "", "CA certificate (PEM) to verify the JWKS URL's server (default: the system roots)")
	fs.StringVar(&j.algorithms, "jwt-algorithms", strings.Join(auth.DefaultJWTAlgorithms, ","), "comma-separated JWT algorithms accepted with a JWKS (none and HMAC are never accepted with one)")
	fs.StringVar(&j.issuer, "jwt-issuer", "", "required iss of every JWT")
	fs.StringVar(&j.audience, "jwt-audience", "", "a value every JWT's aud must hold")
	fs.DurationVar(&j.leeway, "jwt-leeway", auth.DefaultJWTLeeway, "clock leeway on exp, nbf and iat (at most 5m)")
	fs.DurationVar(&j.maxLifetime, "jwt-max-lifetime", auth.DefaultJWTMaxLifetime, "longest exp - iat accepted")
	fs.IntVar(&j.maxBytes, "jwt-max-bytes", auth.DefaultMaxJWTBytes, "largest encoded JWT accepted, in bytes")
	fs.StringVar(&j.tenantClaim, "jwt-tenant-claim", auth.DefaultTenantClaim, "claim holding the tenant")
	fs.StringVar(&j.defaultTenant, "jwt-default-tenant", "", "tenant of a JWT without the tenant claim (default: such tokens are refused)")
	fs.StringVar(&j.readClaim, "jwt-read-claim", auth.DefaultReadClaim, "claim listing the models a JWT may read (array or space-separated; * for all)")
	fs.StringVar(&j.writeClaim, "jwt-write-claim", auth.DefaultWriteClaim, "claim listing the models a JWT may write (array or space-separated; * for all)")
	fs.StringVar(&j.scopesClaim, "jwt-scopes-claim", auth.DefaultScopesClaim, "claim holding scope grants (object of scope name to values)")
	fs.StringVar(&j.clientIDClaim, "jwt-client-id-claim", "", "claim holding the device's client id; empty: the device chooses one in its user's namespace (PROTOCOL.md section 1.1)")
	fs.DurationVar(&j.refresh, "jwt-jwks-refresh", auth.DefaultJWKSRefresh, "how often the JWKS is fetched in the background")
	fs.DurationVar(&j.minRefresh, "jwt-jwks-min-refresh", auth.DefaultJWKSMinRefresh, "least time between two JWKS fetches caused by unknown kids")
	fs.DurationVar(&j.timeout, "jwt-jwks-timeout", auth.DefaultJWKSFetchTimeout, "bound on one JWKS fetch")
	fs.StringVar(&j.denyFile, "jwt-deny-file", "var/jwt-deny.json", "JWT deny list (syncctl jwt revoke writes it; re-read within a second of a change)")
}

// enabled reports whether a JWT key source is configured.
func (j *jwtOptions) enabled() bool {
	return j.jwksURL != "" || j.jwksFile != "" || j.secretFile != ""
}

// config is the auth package's JWT configuration, or nil when JWT is off.
func (j *jwtOptions) config() (*auth.JWTConfig, error) {
	if !j.enabled() {
		return nil, nil
	}
	c := &auth.JWTConfig{
		JWKSURL: j.jwksURL, JWKSFile: j.jwksFile, HS256SecretFile: j.secretFile,
		Issuer: j.issuer, Audience: j.audience, Leeway: j.leeway, MaxLifetime: j.maxLifetime, MaxTokenBytes: j.maxBytes,
		TenantClaim: j.tenantClaim, DefaultTenant: j.defaultTenant, ReadClaim: j.readClaim, WriteClaim: j.writeClaim,
		ScopesClaim: j.scopesClaim, ClientIDClaim: j.clientIDClaim,
		RefreshInterval: j.refresh, MinRefreshInterval: j.minRefresh, FetchTimeout: j.timeout,
	}
	if j.secretFile == "" {
		c.Algorithms = strings.Split(j.algorithms, ",")
	}
	if j.jwksCA != "" {
		pem, err := os.ReadFile(j.jwksCA)
		if err != nil {
			return nil, fmt.Errorf("--jwt-jwks-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("--jwt-jwks-ca: no PEM certificate in the file")
		}
		c.HTTPClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	}
	return c, nil
}

// newAuthenticator builds syncd's authenticator: the token file (required
// unless JWT verification is configured, then used when present) and JWT
// verification with its deny list.
func newAuthenticator(o options, log *slog.Logger, reg prometheus.Registerer, stderr io.Writer) (*auth.Authenticator, error) {
	jc, err := o.jwt.config()
	if err != nil {
		return nil, err
	}
	tokens := o.tokens
	if _, statErr := os.Stat(tokens); jc != nil && errors.Is(statErr, os.ErrNotExist) && !o.devTokens {
		log.Info("no token file: JWTs only, and the admin API refuses every request", "tokens", tokens)
		tokens = ""
	} else if err := ensureTokens(tokens, o.devTokens, log, stderr); err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	cfg := auth.Config{TokenFile: tokens, JWT: jc, Logger: log, Registerer: reg}
	if jc != nil {
		cfg.DenyFile = o.jwt.denyFile
	}
	a, err := auth.New(cfg)
	if err != nil {
		return nil, err
	}
	if jc != nil {
		log.Info("JWT verification on", "issuer", jc.Issuer, "audience", jc.Audience, "jwks_url", jc.JWKSURL, "jwks_file", jc.JWKSFile, "hs256", jc.HS256SecretFile != "")
	}
	return a, nil
}
