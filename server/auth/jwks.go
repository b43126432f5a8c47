package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"os"
	"sync"
	"time"
)

// MaxJWKSBytes bounds a JWKS document, from a file or a URL.
const MaxJWKSBytes = 1 << 20

// minRSABits is the smallest RSA modulus a JWKS key may have.
const minRSABits = 2048

// jwk is one key of a JWKS document (RFC 7517), as far as syncd reads it.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// publicKey is a verification key and the algorithms it may verify.
type publicKey struct {
	kid string
	key crypto.PublicKey
	alg string // the JWK's alg, "" when it names none
}

// fits reports whether k may verify a token signed with alg: its type must
// be the algorithm's family, and a JWK that names an alg must name alg.
func (k publicKey) fits(alg string) bool {
	if k.alg != "" && k.alg != alg {
		return false
	}
	switch key := k.key.(type) {
	case *rsa.PublicKey:
		return alg == "RS256" || alg == "RS384" || alg == "RS512" || alg == "PS256" || alg == "PS384" || alg == "PS512"
	case *ecdsa.PublicKey:
		return (alg == "ES256" && key.Curve == elliptic.P256()) || (alg == "ES384" && key.Curve == elliptic.P384()) || (alg == "ES512" && key.Curve == elliptic.P521())
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

// parseJWKS reads a JWKS document. Keys of a type syncd does not verify
// with, or meant for encryption, are skipped; a key of a known type that
// does not parse fails the whole document, so a broken publication never
// half-replaces the keys in force. A document with no usable key fails.
func parseJWKS(b []byte) ([]publicKey, error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("not a JWKS document: %w", err)
	}
	var keys []publicKey
	for i, raw := range doc.Keys {
		var k jwk
		if err := json.Unmarshal(raw, &k); err != nil {
			return nil, fmt.Errorf("key %d: %w", i, err)
		}
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		pub, err := k.publicKey()
		if err != nil {
			return nil, fmt.Errorf("key %d (kid %q): %w", i, k.Kid, err)
		}
		if pub != nil {
			keys = append(keys, publicKey{kid: k.Kid, key: pub, alg: k.Alg})
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("the JWKS document holds no signature key syncd can use (RSA, EC P-256/P-384/P-521, Ed25519)")
	}
	return keys, nil
}

// publicKey decodes k, or returns nil for a key type syncd skips.
func (k jwk) publicKey() (crypto.PublicKey, error) {
	switch k.Kty {
	case "RSA":
		n, err := b64Int(k.N)
		if err != nil {
			return nil, fmt.Errorf("n: %w", err)
		}
		e, err := b64Int(k.E)
		if err != nil {
			return nil, fmt.Errorf("e: %w", err)
		}
		if n.BitLen() < minRSABits {
			return nil, fmt.Errorf("RSA key of %d bits, want at least %d", n.BitLen(), minRSABits)
		}
		if !e.IsInt64() || e.Int64() < 3 || e.Int64() > 1<<31-1 {
			return nil, errors.New("RSA exponent out of range")
		}
		return &rsa.PublicKey{N: n, E: int(e.Int64())}, nil
	case "EC":
		var curve elliptic.Curve
		switch k.Crv {
		case "P-256":
			curve = elliptic.P256()
		case "P-384":
			curve = elliptic.P384()
		case "P-521":
			curve = elliptic.P521()
		default:
			return nil, nil
		}
		x, err := b64Int(k.X)
		if err != nil {
			return nil, fmt.Errorf("x: %w", err)
		}
		y, err := b64Int(k.Y)
		if err != nil {
			return nil, fmt.Errorf("y: %w", err)
		}
		// The uncompressed point encoding lets the standard library check
		// that the point is on the curve.
		size := (curve.Params().BitSize + 7) / 8
		if len(x.Bytes()) > size || len(y.Bytes()) > size {
			return nil, errors.New("EC coordinates too long for the curve")
		}
		point := make([]byte, 1+2*size)
		point[0] = 4
		x.FillBytes(point[1 : 1+size])
		y.FillBytes(point[1+size:])
		pub, err := ecdsa.ParseUncompressedPublicKey(curve, point)
		if err != nil {
			return nil, fmt.Errorf("EC point: %w", err)
		}
		return pub, nil
	case "OKP":
		if k.Crv != "Ed25519" {
			return nil, nil
		}
		x, err := base64.RawURLEncoding.DecodeString(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, errors.New("x: not a base64url Ed25519 public key")
		}
		return ed25519.PublicKey(x), nil
	}
	return nil, nil
}

func b64Int(s string) (*big.Int, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) == 0 {
		return nil, errors.New("not a base64url integer")
	}
	return new(big.Int).SetBytes(b), nil
}

// keySet is the JWKS in force: fetched from a file or an HTTPS URL at
// start, every refresh interval in the background, and on a token whose
// kid it does not hold at most once per minRefresh. A fetch that fails
// (unreachable, hanging past the fetch timeout, a non-200 answer, a
// document that does not parse) keeps the last good keys in force, logs
// and counts the failure, and marks the set stale until a fetch succeeds.
// It is safe for concurrent use.
type keySet struct {
	source     string // URL or file path, for logs
	fetchDoc   func(ctx context.Context) ([]byte, error)
	timeout    time.Duration
	minRefresh time.Duration
	now        func() time.Time
	log        *slog.Logger
	m          *authMetrics

	fetchMu sync.Mutex // one fetch at a time
	mu      sync.Mutex
	keys    []publicKey
	fetched time.Time // when the last fetch (good or bad) started
	lastErr error
}

// newKeySet returns a key set reading from url (an https:// URL fetched
// with client) or, when url is "", from the file at path.
func newKeySet(url, path string, client *http.Client, timeout, minRefresh time.Duration, now func() time.Time, log *slog.Logger, m *authMetrics) *keySet {
	ks := &keySet{timeout: timeout, minRefresh: minRefresh, now: now, log: log, m: m}
	if url != "" {
		ks.source = url
		ks.fetchDoc = func(ctx context.Context) ([]byte, error) { return getJWKS(ctx, client, url) }
	} else {
		ks.source = path
		ks.fetchDoc = func(context.Context) ([]byte, error) { return readJWKSFile(path) }
	}
	return ks
}

func getJWKS(ctx context.Context, client *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return readCapped(resp.Body)
}

func readJWKSFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readCapped(f)
}

func readCapped(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxJWKSBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxJWKSBytes {
		return nil, fmt.Errorf("JWKS document over %d bytes", MaxJWKSBytes)
	}
	return b, nil
}

// refresh fetches the document once and, if it parses, puts its keys in
// force. It reports the fetch's error, after logging and counting it. With
// onlyIfDue it does nothing when a fetch started within minRefresh, so
// tokens with unknown kids cannot make it fetch more often than that.
func (ks *keySet) refresh(ctx context.Context, onlyIfDue bool) error {
	ks.fetchMu.Lock()
	defer ks.fetchMu.Unlock()
	ks.mu.Lock()
	if onlyIfDue && !ks.fetched.IsZero() && ks.now().Sub(ks.fetched) < ks.minRefresh {
		ks.mu.Unlock()
		return nil
	}
	ks.fetched = ks.now()
	ks.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, ks.timeout)
	defer cancel()
	b, err := ks.fetchDoc(ctx)
	var keys []publicKey
	if err == nil {
		keys, err = parseJWKS(b)
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("jwks %s: %w", ks.source, err)
		ks.lastErr = err
		ks.m.jwksFetches.WithLabelValues("error").Inc()
		if len(ks.keys) > 0 {
			ks.m.jwksStale.Set(1)
			ks.log.Warn("JWKS refresh failed; the last good keys stay in force", "err", err, "keys", len(ks.keys))
		} else {
			ks.log.Error("JWKS fetch failed and no keys were ever fetched: every JWT is refused until one succeeds", "err", err)
		}
		return err
	}
	if ks.lastErr != nil && len(ks.keys) > 0 {
		ks.log.Info("JWKS refresh succeeded again", "source", ks.source, "keys", len(keys))
	}
	ks.keys, ks.lastErr = keys, nil
	ks.m.jwksFetches.WithLabelValues("ok").Inc()
	ks.m.jwksStale.Set(0)
	ks.m.jwksKeys.Set(float64(len(keys)))
	ks.m.jwksLastSuccess.Set(float64(ks.now().UnixMilli()) / 1000)
	return nil
}

// lookup returns the keys that may verify a token with kid and alg. A kid
// the set lacks triggers one refresh, unless one started within
// minRefresh; a token without kid is tried against every fitting key.
func (ks *keySet) lookup(ctx context.Context, kid, alg string) []crypto.PublicKey {
	if found := ks.match(kid, alg); len(found) > 0 || kid == "" {
		return found
	}
	ks.refresh(ctx, true)
	return ks.match(kid, alg)
}

func (ks *keySet) match(kid, alg string) []crypto.PublicKey {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	var out []crypto.PublicKey
	for _, k := range ks.keys {
		if (kid == "" || k.kid == kid) && k.fits(alg) {
			out = append(out, k.key)
		}
	}
	return out
}

// run refreshes the set every interval until ctx ends.
func (ks *keySet) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ks.refresh(ctx, false)
		}
	}
}
