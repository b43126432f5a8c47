package cluster

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/syncd-dev/syncd/internal/atomicfile"
)

// SecretBytes is the size of a cluster secret; its file holds them
// hex-encoded (64 characters, an optional trailing newline).
const SecretBytes = 32

// maxSecretFileBytes bounds what LoadSecret reads: the hex, a newline and
// a little room for a CRLF or trailing spaces.
const maxSecretFileBytes = 2*SecretBytes + 16

// The NATS user names a cluster's embedded servers know. Their passwords
// derive from the cluster secret.
const (
	// NodeUser is the user every syncd node connects to NATS as.
	NodeUser = "syncd"
	// RouteUser is the user a NATS server authenticates as on a route.
	RouteUser = "syncd-route"
)

// The HKDF info strings: one per derived key, so no key says anything
// about another. Changing one changes that key on every node at once.
const (
	infoNodePassword  = "syncd nats node password v1"
	infoRoutePassword = "syncd nats route password v1"
	infoCommandKey    = "syncd command authenticator v1"
	infoFingerprint   = "syncd cluster secret fingerprint v1"
)

// Errors of LoadSecret and WriteSecretFile. Each wraps the file's path.
var (
	// ErrSecretFileMode: the secret file may be read by its group or by
	// everyone. Nothing was read; chmod 600 it (and make a new secret if
	// others may already have read it).
	ErrSecretFileMode = errors.New("cluster secret file readable by group or others")
	// ErrBadSecret: the file does not hold 32 hex-encoded bytes.
	ErrBadSecret = errors.New("not a cluster secret")
	// ErrSecretExists: WriteSecretFile would replace an existing secret,
	// which would cut this node off from a running cluster.
	ErrSecretExists = errors.New("cluster secret file already exists")
)

// Secret is a cluster's one shared secret: every node holds the same
// 32 random bytes (a file the operator copies to each node, like a TLS
// key), and every credential of the cluster derives from it with HKDF
// (SHA-256, a distinct info string each): the NATS password of the node
// user, the NATS route password, and the command authenticator's key.
// The zero Secret is no secret: Valid reports false and the embedded
// server refuses it. A Secret is a value; it is safe for concurrent use.
// It never prints its bytes (String, GoString).
type Secret struct {
	key [SecretBytes]byte
	set bool
}

// NewSecret makes a secret from the system's random source.
func NewSecret() (Secret, error) {
	var s Secret
	if _, err := rand.Read(s.key[:]); err != nil {
		return Secret{}, fmt.Errorf("new cluster secret: %w", err)
	}
	s.set = true
	return s, nil
}

// ParseSecret reads a secret from its file format: 64 hex characters,
// surrounding white space ignored.
func ParseSecret(text []byte) (Secret, error) {
	h := strings.TrimSpace(string(text))
	if len(h) != 2*SecretBytes {
		return Secret{}, fmt.Errorf("%w: want %d hex characters, got %d", ErrBadSecret, 2*SecretBytes, len(h))
	}
	var s Secret
	if _, err := hex.Decode(s.key[:], []byte(h)); err != nil {
		return Secret{}, fmt.Errorf("%w: %v", ErrBadSecret, err)
	}
	if s.key == ([SecretBytes]byte{}) {
		return Secret{}, fmt.Errorf("%w: all zero", ErrBadSecret)
	}
	s.set = true
	return s, nil
}

// LoadSecret reads the secret file at path. It refuses a file its group
// or others may read (ErrSecretFileMode), one larger than a secret, and
// one that does not hold a secret (ErrBadSecret).
func LoadSecret(path string) (Secret, error) {
	b, err := readPrivateFile(path, maxSecretFileBytes)
	if err != nil {
		return Secret{}, fmt.Errorf("load cluster secret: %w", err)
	}
	s, err := ParseSecret(b)
	if err != nil {
		return Secret{}, fmt.Errorf("load cluster secret %s: %w", path, err)
	}
	return s, nil
}

// readPrivateFile reads a small file holding a credential: it refuses one
// its group or others may read (ErrSecretFileMode), and one larger than
// limit bytes. Both the cluster secret and a NATS password file go through
// it.
func readPrivateFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if m := fi.Mode(); !m.IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	} else if m.Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %04o; chmod 600 it", ErrSecretFileMode, path, m.Perm())
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d a credential file may hold", path, fi.Size(), limit)
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil && fi.Size() > 0 {
		return nil, err
	}
	return b, nil
}

// WriteSecretFile writes s to path, mode 0600, atomically and durably
// (temporary file in the same directory, fsync, rename, directory fsync),
// creating the directory (0700) when missing. It refuses to replace an
// existing file (ErrSecretExists): a node given a new secret no longer
// reaches its cluster.
func WriteSecretFile(path string, s Secret) error {
	if !s.Valid() {
		return fmt.Errorf("write cluster secret %s: %w: the zero secret", path, ErrBadSecret)
	}
	err := atomicfile.Create(path, []byte(hex.EncodeToString(s.key[:])+"\n"), 0o600, 0o700)
	if errors.Is(err, atomicfile.ErrExists) {
		err = ErrSecretExists
	}
	if err != nil {
		return fmt.Errorf("write cluster secret %s: %w", path, err)
	}
	return nil
}

// Valid reports whether s holds a secret (the zero Secret does not).
func (s Secret) Valid() bool { return s.set }

// Equal reports whether s and o are the same secret, in constant time.
func (s Secret) Equal(o Secret) bool {
	return s.set == o.set && subtle.ConstantTimeCompare(s.key[:], o.key[:]) == 1
}

// derive is the HKDF-SHA-256 key of info, n bytes long.
func (s Secret) derive(info string, n int) []byte {
	k, err := hkdf.Key(sha256.New, s.key[:], nil, info, n)
	if err != nil { // only for n beyond 255*32 bytes
		panic(err)
	}
	return k
}

// NodePassword is the NATS password of NodeUser (hex, 64 characters).
func (s Secret) NodePassword() string { return hex.EncodeToString(s.derive(infoNodePassword, 32)) }

// RoutePassword is the NATS password of RouteUser on routes (hex).
func (s Secret) RoutePassword() string { return hex.EncodeToString(s.derive(infoRoutePassword, 32)) }

// CommandKey is the 32-byte key of the command authenticator every node
// computes over the commands it publishes and checks on those it applies
// (Options.CommandKey). Each call returns a new slice.
func (s Secret) CommandKey() []byte { return s.derive(infoCommandKey, 32) }

// Fingerprint names the secret without revealing it (16 hex characters):
// nodes log it at start, so an operator sees at a glance whether two
// nodes hold the same secret.
func (s Secret) Fingerprint() string {
	if !s.set {
		return "none"
	}
	return hex.EncodeToString(s.derive(infoFingerprint, 8))
}

// String never shows the secret: it is its fingerprint.
func (s Secret) String() string { return "cluster-secret:" + s.Fingerprint() }

// GoString is String, so %#v shows no key either.
func (s Secret) GoString() string { return s.String() }
