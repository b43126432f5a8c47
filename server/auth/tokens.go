package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/internal/atomicfile"
	"github.com/syncd-dev/syncd/syncproto"
)

// fileVersion is the token file format this package reads and writes.
const fileVersion = 1

// tokenPrefix starts every client token and adminTokenPrefix every admin
// token issued since admin tokens got their own, so a leaked one is easy
// to recognise and an admin token is told from a client one at a glance.
// Admin tokens issued before still start with tokenPrefix and are
// accepted; a token starting with adminTokenPrefix is accepted only for an
// admin principal.
const (
	tokenPrefix      = "sdk_"
	adminTokenPrefix = "sda_"
)

var (
	// ErrUnauthorized says a bearer token is missing, malformed, unknown or
	// revoked. It deliberately does not say which.
	ErrUnauthorized = errors.New("auth: unauthorized")
	// ErrNoSuchToken says a revocation named a token id the file lacks.
	ErrNoSuchToken = errors.New("auth: no such token")
)

// Token is one entry of the token file: a principal and the hash of its
// secret. The secret itself is never stored.
type Token struct {
	Principal
	SecretSHA256 string    `json:"secret_sha256"`
	CreatedAt    time.Time `json:"created_at"`
}

type file struct {
	Version int `json:"version"`
	// Generation grows by one with every change this package writes
	// (Issue, IssueMany, Revoke, and so the admin API and syncctl), so
	// cluster nodes that read copies of the file can tell which is newer
	// (Generation). A file written before generations has none: 0.
	Generation uint64  `json:"generation,omitempty"`
	Tokens     []Token `json:"tokens"`
}

// Generation is the generation of the contents data of a token file, of
// a JWT deny list (DenyList.Generation), or of a JWKS file (a
// "generation" member beside "keys", which syncctl jwt keygen bumps): how
// many changes were written to the file since generations exist. 0 for a
// file written before them or without one, and for data that is not such
// a file (a node that cannot read its file is behind any node that can).
// It reads nothing else of data: a file it does not validate still has
// the generation it says.
func Generation(data []byte) uint64 {
	var f struct {
		Generation uint64 `json:"generation"`
	}
	if json.Unmarshal(data, &f) != nil {
		return 0
	}
	return f.Generation
}

// Validate checks a principal's fields before a token is issued for it.
func (p Principal) Validate() error {
	if p.Admin {
		if p.Tenant != "" || p.User != "" || p.ClientID != "" || len(p.Read) > 0 || len(p.Write) > 0 || len(p.Scopes) > 0 {
			return errors.New("an admin token carries no tenant, user, client id, models or scopes")
		}
		return nil
	}
	if err := syncproto.ValidateID(p.Tenant); err != nil {
		return fmt.Errorf("tenant: %w", err)
	}
	if err := syncproto.ValidateID(p.ClientID); err != nil {
		return fmt.Errorf("client id: %w", err)
	}
	if p.User != "" {
		if err := syncproto.ValidateUser(p.User); err != nil {
			return fmt.Errorf("user: %w", err)
		}
	}
	for _, m := range slices.Concat(p.Read, p.Write) {
		if m == Wildcard {
			continue
		}
		if err := syncproto.ValidateModel(m); err != nil {
			return err
		}
	}
	return nil
}

// ReadFile loads and validates a token file.
func ReadFile(path string) ([]Token, error) {
	f, err := readFile(path)
	return f.Tokens, err
}

// readFile is ReadFile with the file's generation.
func readFile(path string) (file, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return file{}, fmt.Errorf("read token file: %w", err)
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return file{}, fmt.Errorf("read token file %s: not a token file: %w", path, err)
	}
	if f.Version != fileVersion {
		return file{}, fmt.Errorf("read token file %s: version %d, want %d", path, f.Version, fileVersion)
	}
	ids := map[string]bool{}
	for i, t := range f.Tokens {
		if err := t.Principal.Validate(); err != nil {
			return file{}, fmt.Errorf("read token file %s: token %d (%s): %w", path, i, t.TokenID, err)
		}
		if _, err := hex.DecodeString(t.SecretSHA256); err != nil || len(t.SecretSHA256) != 2*sha256.Size {
			return file{}, fmt.Errorf("read token file %s: token %s: bad secret_sha256", path, t.TokenID)
		}
		if ids[t.TokenID] {
			return file{}, fmt.Errorf("read token file %s: token id %s appears twice", path, t.TokenID)
		}
		ids[t.TokenID] = true
	}
	return f, nil
}

// Issue adds a token for p to the file at path (creating the file if it does
// not exist) and returns the bearer token. The token is shown only here:
// the file keeps its hash.
func Issue(path string, p Principal, now time.Time) (string, error) {
	tokens, err := IssueMany(path, []Principal{p}, now)
	if err != nil {
		return "", err
	}
	return tokens[0], nil
}

// IssueMany adds one token per principal to the file at path in one
// rewrite of the file, and returns the bearer tokens in the order of ps.
// Either every token is added or none is. It is how a load generator gets
// thousands of clients without rewriting the file thousands of times.
func IssueMany(path string, ps []Principal, now time.Time) ([]string, error) {
	for _, p := range ps {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("issue token: %w", err)
		}
	}
	f, err := readFile(path)
	if errors.Is(err, os.ErrNotExist) {
		f, err = file{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("issue token: %w", err)
	}
	tokens := f.Tokens
	bearers := make([]string, len(ps))
	for i, p := range ps {
		id, secret, err := newSecret()
		if err != nil {
			return nil, fmt.Errorf("issue token: %w", err)
		}
		p.TokenID = id
		tokens = append(tokens, Token{Principal: p, SecretSHA256: hashSecret(secret), CreatedAt: now.UTC()})
		prefix := tokenPrefix
		if p.Admin {
			prefix = adminTokenPrefix
		}
		bearers[i] = prefix + id + "_" + secret
	}
	if err := writeFile(path, f.Generation, tokens); err != nil {
		return nil, fmt.Errorf("issue token: %w", err)
	}
	return bearers, nil
}

// Revoke removes the token with the given id from the file.
func Revoke(path, id string) error {
	f, err := readFile(path)
	if err != nil {
		return fmt.Errorf("revoke token: %w", err)
	}
	before := len(f.Tokens)
	kept := slices.DeleteFunc(f.Tokens, func(t Token) bool { return t.TokenID == id })
	if len(kept) == before {
		return fmt.Errorf("revoke token %s: %w", id, ErrNoSuchToken)
	}
	if err := writeFile(path, f.Generation, kept); err != nil {
		return fmt.Errorf("revoke token: %w", err)
	}
	return nil
}

// parseToken splits a bearer token into its id and secret, and says
// whether it has the admin prefix.
func parseToken(token string) (id, secret string, admin, ok bool) {
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok {
		if rest, ok = strings.CutPrefix(token, adminTokenPrefix); !ok {
			return "", "", false, false
		}
		admin = true
	}
	id, secret, ok = strings.Cut(rest, "_")
	return id, secret, admin, ok && id != "" && secret != ""
}

// IsFileToken reports whether token has the form of a token-file token
// ("sdk_..." or, for an admin, "sda_..."), as opposed to a JWT.
func IsFileToken(token string) bool {
	return strings.HasPrefix(token, tokenPrefix) || strings.HasPrefix(token, adminTokenPrefix)
}

// TokenIDOf returns the id of a token-file token (safe to log and to
// revoke by), or "" when token does not have the form of one.
func TokenIDOf(token string) string {
	id, _, _, ok := parseToken(token)
	if !ok {
		return ""
	}
	return id
}

func newSecret() (id, secret string, err error) {
	idBytes := make([]byte, 6)
	secretBytes := make([]byte, 32)
	if _, err := rand.Read(idBytes); err != nil {
		return "", "", err
	}
	if _, err := rand.Read(secretBytes); err != nil {
		return "", "", err
	}
	// The secret alphabet has no '_', so the id/secret split is unambiguous.
	secret = strings.ReplaceAll(base64.RawURLEncoding.EncodeToString(secretBytes), "_", "-")
	return hex.EncodeToString(idBytes), secret, nil
}

func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// secretMatches compares in constant time.
func secretMatches(t Token, secret string) bool {
	return subtle.ConstantTimeCompare([]byte(t.SecretSHA256), []byte(hashSecret(secret))) == 1
}

// writeFile replaces the token file, read at generation was, with tokens
// at the next generation, atomically and durably.
func writeFile(path string, was uint64, tokens []Token) error {
	next, err := nextGeneration(path, was)
	if err != nil {
		return err
	}
	return writeJSONFile(path, file{Version: fileVersion, Generation: next, Tokens: tokens})
}

// nextGeneration is the generation a change of the file at path, read at
// generation was, writes: was+1, or an error where that would wrap to 0
// (only a file edited by hand gets there), since a node reading 0 would
// take the newest file for the oldest.
func nextGeneration(path string, was uint64) (uint64, error) {
	if was == math.MaxUint64 {
		return 0, fmt.Errorf("%s: generation %d is the largest there is (the file was edited by hand): write one with a generation below it", path, was)
	}
	return was + 1, nil
}

// writeJSONFile replaces the file at path with v as indented JSON,
// atomically and durably: temp file in the same directory, fsync, rename,
// directory fsync. Mode 0600: the token file's hashes are not secrets, but
// it and the deny list say who may do what.
func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(b, '\n'), 0o600, 0o750)
}
