package cluster_test

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication/cluster"
)

// A secret written and loaded again is the same secret; its file is 0600
// and never replaced; every derived key is distinct from the others.
func TestSecretFileRoundTrip(t *testing.T) {
	s, err := cluster.NewSecret()
	require.NoError(t, err)
	require.True(t, s.Valid())
	path := filepath.Join(t.TempDir(), "conf", "cluster.secret")
	require.NoError(t, cluster.WriteSecretFile(path, s))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	got, err := cluster.LoadSecret(path)
	require.NoError(t, err)
	require.True(t, got.Equal(s))
	require.Equal(t, s.NodePassword(), got.NodePassword())

	other, err := cluster.NewSecret()
	require.NoError(t, err)
	require.ErrorIs(t, cluster.WriteSecretFile(path, other), cluster.ErrSecretExists)
	got, err = cluster.LoadSecret(path)
	require.NoError(t, err)
	require.True(t, got.Equal(s), "the refused write left the file as it was")
	require.False(t, other.Equal(s))
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left behind")

	keys := []string{s.NodePassword(), s.RoutePassword(), hex.EncodeToString(s.CommandKey()), s.Fingerprint()}
	for i := range keys {
		for j := range i {
			require.NotEqual(t, keys[i], keys[j], "derived keys %d and %d", i, j)
		}
	}
	require.Len(t, s.CommandKey(), 32)
	require.NotEqual(t, s.CommandKey(), other.CommandKey())
}

// The derivation is fixed: a cluster whose nodes run different syncd
// releases derives the same passwords and command key from one secret.
func TestSecretDerivationIsStable(t *testing.T) {
	s, err := cluster.ParseSecret([]byte(strings.Repeat("01", cluster.SecretBytes) + "\n"))
	require.NoError(t, err)
	got := fmt.Sprintf("node=%s route=%s command=%x fingerprint=%s", s.NodePassword(), s.RoutePassword(), s.CommandKey(), s.Fingerprint())
	require.Equal(t, goldenDerivation, got)
}

// goldenDerivation is what the secret 0x01 * 32 derives (node password
// and command key checked against RFC 5869 computed by hand: HMAC-SHA-256
// extract with an empty salt, one expand block).
const goldenDerivation = "node=dbd2f9635da0367b48c281501579904eba8a0d32b23b76f4c4ab9aba10cf8325" +
	" route=bda215e70b04cffdf13eb9e7877f4ca879d2a03d106b3e3ebc0a840ee844b4b4" +
	" command=d187a192a95275d879cb9b12d2832571b00cced4c5229031fd867dd1f6b0b447" +
	" fingerprint=c133c7292cb067fc"

// A secret never prints its bytes.
func TestSecretDoesNotPrint(t *testing.T) {
	hexKey := strings.Repeat("ab", cluster.SecretBytes)
	s, err := cluster.ParseSecret([]byte(hexKey))
	require.NoError(t, err)
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		out := fmt.Sprintf(format, s)
		require.NotContains(t, out, hexKey[:16], format)
		require.Contains(t, out, s.Fingerprint(), format)
	}
	require.False(t, cluster.Secret{}.Valid())
	require.Equal(t, "none", cluster.Secret{}.Fingerprint())
}

// LoadSecret refuses a file its group or others may read, a file too
// large, and a file that is not a secret, each with its error.
func TestLoadSecretRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		require.NoError(t, os.Chmod(p, mode))
		return p
	}
	good := strings.Repeat("5a", cluster.SecretBytes)
	cases := []struct {
		name, content string
		mode          os.FileMode
		want          error
		says          string
	}{
		{"group readable", good, 0o640, cluster.ErrSecretFileMode, "chmod 600"},
		{"world readable", good, 0o604, cluster.ErrSecretFileMode, "chmod 600"},
		{"short", good[:62], 0o600, cluster.ErrBadSecret, "want 64 hex characters"},
		{"not hex", strings.Repeat("zz", cluster.SecretBytes), 0o600, cluster.ErrBadSecret, "invalid byte"},
		{"all zero", strings.Repeat("00", cluster.SecretBytes), 0o600, cluster.ErrBadSecret, "all zero"},
		{"too large", strings.Repeat(good, 4), 0o600, nil, "more than the"},
		{"empty", "", 0o600, cluster.ErrBadSecret, "got 0"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := cluster.LoadSecret(write(fmt.Sprintf("s%d", i), c.content, c.mode))
			require.Error(t, err)
			if c.want != nil {
				require.ErrorIs(t, err, c.want)
			}
			require.ErrorContains(t, err, c.says)
		})
	}
	_, err := cluster.LoadSecret(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = cluster.LoadSecret(dir)
	require.ErrorContains(t, err, "not a regular file")
	s, err := cluster.LoadSecret(write("crlf", good+"\r\n", 0o400))
	require.NoError(t, err, "a read-only file with a CRLF is a secret")
	require.True(t, s.Valid())
}

// StartEmbedded refuses to start without a secret, with a route URL that
// carries its own credentials, with half of the TLS files, and with a
// listener beyond loopback without TLS; nothing is bound.
func TestStartEmbeddedRefusesInsecureSettings(t *testing.T) {
	s, err := cluster.NewSecret()
	require.NoError(t, err)
	base := func() cluster.EmbeddedOptions {
		return cluster.EmbeddedOptions{Name: "n", Port: -1, StoreDir: t.TempDir(), Secret: s}
	}
	o := base()
	o.Secret = cluster.Secret{}
	_, err = cluster.StartEmbedded(o)
	require.ErrorContains(t, err, "a cluster secret is required")

	o = base()
	o.ClusterPort, o.Routes = -1, []string{"nats-route://syncd-route:guess@127.0.0.1:6222"}
	_, err = cluster.StartEmbedded(o)
	require.ErrorContains(t, err, "carries credentials")
	require.NotContains(t, err.Error(), "guess", "the password is not repeated")

	o = base()
	o.TLS = cluster.TLSFiles{Cert: "node.pem", Key: "node-key.pem"}
	_, err = cluster.StartEmbedded(o)
	require.ErrorContains(t, err, "certificate, its key and the CA together")

	o = base()
	o.Host = "0.0.0.0"
	_, err = cluster.StartEmbedded(o)
	require.ErrorIs(t, err, cluster.ErrPlaintext)
	require.ErrorContains(t, err, "client listener")

	o = base()
	o.ClusterHost, o.ClusterPort = "10.0.0.1", 6222
	_, err = cluster.StartEmbedded(o)
	require.ErrorIs(t, err, cluster.ErrPlaintext)
	require.ErrorContains(t, err, "route listener")
}

// ExternalNATS reads a password file only when its mode keeps it private.
func TestExternalNATSPasswordFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "pw")
	require.NoError(t, os.WriteFile(p, []byte("secret-password\n"), 0o600))
	e := cluster.ExternalNATS{URLs: "nats://127.0.0.1:4222", User: cluster.NodeUser, PasswordFile: p}
	opts, err := e.Options()
	require.NoError(t, err)
	require.Len(t, opts, 1)
	require.NoError(t, os.Chmod(p, 0o644))
	_, err = e.Options()
	require.ErrorIs(t, err, cluster.ErrSecretFileMode)
}

// IsLoopback: names and addresses reached from this host alone.
func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{"localhost": true, "127.0.0.1": true, "127.3.4.5": true, "::1": true, "[::1]": true,
		"": false, "0.0.0.0": false, "::": false, "10.0.0.1": false, "example.com": false} {
		require.Equal(t, want, cluster.IsLoopback(host), host)
	}
}
