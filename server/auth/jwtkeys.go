package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"

	"github.com/golang-jwt/jwt/v5"
)

// SigningKey is a private key that signs JWTs, for development and tests
// (syncctl jwt keygen and sign): an identity provider holds these in
// production. Alg is RS256, ES256 or EdDSA.
type SigningKey struct {
	Kid     string
	Alg     string
	Private crypto.Signer
}

// GenerateSigningKey makes a fresh key for alg (RS256: RSA 2048, ES256:
// P-256, EdDSA: Ed25519) with a random kid.
func GenerateSigningKey(alg string) (SigningKey, error) {
	var priv crypto.Signer
	var err error
	switch alg {
	case "RS256":
		priv, err = rsa.GenerateKey(rand.Reader, minRSABits)
	case "ES256":
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "EdDSA":
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		return SigningKey{}, fmt.Errorf("generate key: algorithm %q: want RS256, ES256 or EdDSA", alg)
	}
	if err != nil {
		return SigningKey{}, fmt.Errorf("generate key: %w", err)
	}
	kid := make([]byte, 8)
	if _, err := rand.Read(kid); err != nil {
		return SigningKey{}, fmt.Errorf("generate key: %w", err)
	}
	return SigningKey{Kid: hex.EncodeToString(kid), Alg: alg, Private: priv}, nil
}

// Sign returns a JWT over claims, with k's kid and alg in its header.
func (k SigningKey) Sign(claims map[string]any) (string, error) {
	method := jwt.GetSigningMethod(k.Alg)
	if method == nil {
		return "", fmt.Errorf("sign: unknown algorithm %q", k.Alg)
	}
	t := jwt.NewWithClaims(method, jwt.MapClaims(claims))
	t.Header["kid"] = k.Kid
	s, err := t.SignedString(k.Private)
	if err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	return s, nil
}

// SignHS256 returns an HS256 JWT over claims with secret.
func SignHS256(secret []byte, claims map[string]any) (string, error) {
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims(claims)).SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	return s, nil
}

// JWKS is the public JWKS document (RFC 7517) of keys.
func JWKS(keys ...SigningKey) ([]byte, error) {
	doc := struct {
		Keys []jwk `json:"keys"`
	}{Keys: []jwk{}}
	b64 := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	for _, k := range keys {
		j := jwk{Kid: k.Kid, Alg: k.Alg, Use: "sig"}
		switch pub := k.Private.Public().(type) {
		case *rsa.PublicKey:
			j.Kty, j.N, j.E = "RSA", b64(pub.N.Bytes()), b64(big.NewInt(int64(pub.E)).Bytes())
		case *ecdsa.PublicKey:
			point, err := pub.Bytes()
			if err != nil {
				return nil, fmt.Errorf("jwks: %w", err)
			}
			size := (len(point) - 1) / 2
			j.Kty, j.Crv, j.X, j.Y = "EC", pub.Curve.Params().Name, b64(point[1:1+size]), b64(point[1+size:])
		case ed25519.PublicKey:
			j.Kty, j.Crv, j.X = "OKP", "Ed25519", b64(pub)
		default:
			return nil, fmt.Errorf("jwks: key %s: unsupported type %T", k.Kid, pub)
		}
		doc.Keys = append(doc.Keys, j)
	}
	return json.MarshalIndent(doc, "", "  ")
}

// MarshalSigningKey encodes k as PEM (PKCS #8), its kid and alg in
// headers, for syncctl jwt keygen.
func MarshalSigningKey(k SigningKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k.Private)
	if err != nil {
		return nil, fmt.Errorf("marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Headers: map[string]string{"Kid": k.Kid, "Alg": k.Alg}, Bytes: der}), nil
}

// ParseSigningKey decodes what MarshalSigningKey wrote.
func ParseSigningKey(b []byte) (SigningKey, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return SigningKey{}, errors.New("parse key: not a PEM private key")
	}
	priv, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return SigningKey{}, fmt.Errorf("parse key: %w", err)
	}
	signer, ok := priv.(crypto.Signer)
	if !ok {
		return SigningKey{}, fmt.Errorf("parse key: %T cannot sign", priv)
	}
	k := SigningKey{Kid: block.Headers["Kid"], Alg: block.Headers["Alg"], Private: signer}
	if k.Kid == "" || k.Alg == "" {
		return SigningKey{}, errors.New("parse key: the PEM block lacks its Kid or Alg header (write keys with syncctl jwt keygen)")
	}
	return k, nil
}
