package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/internal/datalock"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

func TestFlagsFallBackToEnvironment(t *testing.T) {
	env := map[string]string{"SYNCD_LISTEN": "127.0.0.1:9999", "SYNCD_LOG_FORMAT": "json", "SYNCD_DATA": "/env/db"}
	o, err := parseFlags([]string{"--data", "/flag/db"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9999", o.listen, "env fills an unset flag")
	require.Equal(t, "json", o.logFormat)
	require.Equal(t, "/flag/db", o.data, "a flag on the command line wins over the environment")
}

func TestFlagsRejectBadInput(t *testing.T) {
	noEnv := func(string) string { return "" }
	for _, args := range [][]string{{"--log-format", "xml"}, {"--nope"}, {"stray"}, {"--log-level", "loud"}} {
		_, err := parseFlags(args, noEnv, io.Discard)
		require.Error(t, err, "args %q", args)
	}
	_, err := parseFlags(nil, func(k string) string {
		if k == "SYNCD_SHUTDOWN_TIMEOUT" {
			return "soon"
		}
		return ""
	}, io.Discard)
	require.ErrorContains(t, err, "SYNCD_SHUTDOWN_TIMEOUT")

	// syncd has no hook to run: PROTOCOL.md section 8 and operations.md
	// send an operator who wants one to embed the server package.
	_, err = parseFlags([]string{"--model", "notes=hook"}, noEnv, io.Discard)
	require.ErrorContains(t, err, "embed the server package")
}

// startRun runs syncd with args in the background, logging to logs, and
// returns the public address it logged and stop, which cancels it and
// requires it to stop cleanly within 30 s (call it once).
func startRun(t *testing.T, args []string, logs *syncdtest.Buffer) (addr string, stop func()) {
	t.Helper()
	addr, done, cancel := runInBackground(t, args, logs)
	return addr, func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("syncd did not stop after cancellation")
		}
	}
}

// runInBackground runs syncd with args until cancel, and returns the public
// address it logged and what run returned, once it does.
func runInBackground(t *testing.T, args []string, logs *syncdtest.Buffer) (addr string, done <-chan error, cancel func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ended := make(chan error, 1)
	go func() { ended <- run(ctx, args, func(string) string { return "" }, logs) }()
	addrRE := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`)
	require.Eventually(t, func() bool {
		if m := addrRE.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	}, 30*time.Second, 10*time.Millisecond, "syncd never logged its address: %s", logs)
	return addr, ended, cancel
}

// One syncd per database: a second one on the same --data is refused,
// naming the first; once the first stops, the database is free again.
func TestOneSyncdPerDatabase(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--listen", "127.0.0.1:0", "--admin-listen", "", "--data", filepath.Join(dir, "syncd.db"), "--tokens", filepath.Join(dir, "tokens.json"), "--dev-tokens"}
	_, stop := startRun(t, args, &syncdtest.Buffer{})
	err := run(t.Context(), args, func(string) string { return "" }, io.Discard)
	var held *datalock.ErrHeld
	require.ErrorAs(t, err, &held)
	require.Equal(t, os.Getpid(), held.PID)
	require.ErrorContains(t, err, "another syncd serves it")
	stop()
	_, stop = startRun(t, args, &syncdtest.Buffer{})
	stop()
}

// A database moved away or replaced under a running syncd stops it with an
// error (exit status 1) instead of letting it acknowledge writes into a
// file that is no longer at --data.
func TestDatabaseReplacedWhileRunningStopsSyncd(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(t *testing.T, data string)
		want   string
	}{
		{"moved away", func(t *testing.T, data string) {
			require.NoError(t, os.Rename(data, data+".aside"))
		}, "is gone"},
		{"replaced", func(t *testing.T, data string) {
			body, err := os.ReadFile(data)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(data+".copy", body, 0o600))
			require.NoError(t, os.Rename(data+".copy", data))
		}, "is another file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "syncd.db")
			logs := &syncdtest.Buffer{}
			_, done, _ := runInBackground(t, []string{"--listen", "127.0.0.1:0", "--admin-listen", "", "--data", data, "--tokens", filepath.Join(dir, "tokens.json"), "--dev-tokens"}, logs)
			c.change(t, data)
			select {
			case err := <-done:
				require.ErrorIs(t, err, errDataReplaced)
				require.ErrorContains(t, err, c.want)
				require.Contains(t, logs.String(), "serving failed; shutting down")
			case <-time.After(30 * time.Second):
				t.Fatalf("syncd kept serving a database that is no longer at --data: %s", logs)
			}
		})
	}
}

func TestVersionFlagPrintsTheBuildAndStarts(t *testing.T) {
	data := filepath.Join(t.TempDir(), "never.db")
	err := run(t.Context(), []string{"--version", "--data", data}, func(string) string { return "" }, io.Discard)
	require.ErrorIs(t, err, errShowVersion, "main prints the build and exits 0")
	require.NoFileExists(t, data, "--version starts nothing")
	require.Regexp(t, `^syncd \S+ \(go1\.\d+`, versionLine())
}

func TestRunServesHealthAndStopsOnCancel(t *testing.T) {
	logs := &syncdtest.Buffer{}
	data := filepath.Join(t.TempDir(), "nested", "syncd.db")
	addr, stop := startRun(t, []string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--data", data, "--tokens", filepath.Join(t.TempDir(), "tokens.json"), "--dev-tokens"}, logs)

	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200} {
		resp, err := http.Get("http://" + addr + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, path)
	}
	require.FileExists(t, data, "the database is created with its directory")

	// The development tokens come with commands ready to paste: a device
	// credential the example app takes, and the admin token for syncctl.
	m := regexp.MustCompile(`--credential (\S+) add shopping`).FindStringSubmatch(logs.String())
	require.NotNil(t, m, "no ready-to-paste credential in %s", logs)
	id, token, err := client.ParseCredential(m[1])
	require.NoError(t, err)
	require.Equal(t, "dev-client", id)
	require.Contains(t, logs.String(), "client_token="+token)
	require.Regexp(t, `SYNCCTL_TOKEN=sda_\S+ go run ./cmd/syncctl status`, logs.String())

	stop()
	require.Contains(t, logs.String(), "syncd stopped")
}

// Both listeners close a connection beyond --max-connections-per-address
// at accept: the admin listener, which answers before any token is
// checked, cannot be filled by one address either.
func TestEveryListenerCapsConnectionsPerAddress(t *testing.T) {
	const perAddress = 2
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncdtest.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--data", filepath.Join(t.TempDir(), "syncd.db"),
			"--tokens", filepath.Join(t.TempDir(), "tokens.json"), "--dev-tokens", "--max-connections-per-address", "2"}, func(string) string { return "" }, logs)
	}()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	addrRE := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+) admin_addr=(127\.0\.0\.1:\d+)`)
	var m []string
	require.Eventually(t, func() bool {
		m = addrRE.FindStringSubmatch(logs.String())
		return m != nil
	}, 30*time.Second, 10*time.Millisecond, "syncd never logged its addresses: %s", logs)

	for _, addr := range m[1:] {
		for range perAddress {
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer c.Close()
		}
		extra, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer extra.Close()
		require.NoError(t, extra.SetReadDeadline(time.Now().Add(10*time.Second)))
		_, err = extra.Read(make([]byte, 1))
		require.ErrorIs(t, err, io.EOF, "%s: a connection beyond the cap is closed at accept", addr)
	}
}

func TestDefaultPolicyFlag(t *testing.T) {
	noEnv := func(string) string { return "" }
	o, err := parseFlags([]string{"--model", "notes=lww", "--default-policy", "none"}, noEnv, io.Discard)
	require.NoError(t, err)
	require.Equal(t, syncproto.PolicyNone, o.models.For("todos"))
	require.Equal(t, syncproto.PolicyLWW, o.models.For("notes"))
	for _, bad := range []string{"crdt", ""} {
		_, err := parseFlags([]string{"--default-policy", bad}, noEnv, io.Discard)
		require.Error(t, err, "%q", bad)
	}
}

func TestRetentionFlags(t *testing.T) {
	o, err := parseFlags([]string{"--oplog-max-entries", "10", "--oplog-max-age", "1h", "--ledger-max-age", "48h",
		"--ledger-max-entries", "5000", "--conflicts-max-entries", "-1", "--retention-interval", "5s"}, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, int64(10), o.retention.Oplog.MaxEntries)
	require.Equal(t, time.Hour, o.retention.Oplog.MaxAge)
	require.Equal(t, 48*time.Hour, o.retention.LedgerMaxAge)
	require.Equal(t, 5000, o.retention.LedgerMaxEntries)
	require.Equal(t, int64(-1), o.retention.Conflicts.MaxEntries)
	require.Equal(t, 5*time.Second, o.retentionEvery)
}

// Without a token file syncd starts only with --dev-tokens: it never makes
// up credentials in production, and never logs any without being asked.
func TestMissingTokenFileNeedsDevTokens(t *testing.T) {
	logs := &syncdtest.Buffer{}
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	err := run(t.Context(), []string{"--listen", "127.0.0.1:0", "--admin-listen", "", "--data", filepath.Join(t.TempDir(), "syncd.db"), "--tokens", tokens}, func(string) string { return "" }, logs)
	require.ErrorIs(t, err, errNoTokenFile)
	require.ErrorContains(t, err, "syncctl token issue")
	require.ErrorContains(t, err, "--dev-tokens")
	require.NoFileExists(t, tokens)
	require.NotContains(t, logs.String(), "sdk_", "no token logged")
	require.NotContains(t, logs.String(), "sda_", "no admin token logged")
}

func TestAdminListenerOffLoopbackNeedsTLS(t *testing.T) {
	noEnv := func(string) string { return "" }
	for _, args := range [][]string{
		{"--admin-listen", "0.0.0.0:8081"},
		{"--admin-listen", ":8081"},
		{"--admin-listen", "10.1.2.3:8081"},
	} {
		_, err := parseFlags(args, noEnv, io.Discard)
		require.ErrorIs(t, err, errPlaintextAdmin, "%q", args)
		require.ErrorContains(t, err, "--admin-tls-cert")
	}
	for _, args := range [][]string{
		{"--admin-listen", "127.0.0.1:8081"},
		{"--admin-listen", "[::1]:8081"},
		{"--admin-listen", "localhost:8081"},
		{"--admin-listen", ""},
		{"--admin-listen", "0.0.0.0:8081", "--admin-allow-plaintext"},
		{"--admin-listen", "0.0.0.0:8081", "--admin-tls-cert", "c.pem", "--admin-tls-key", "k.pem"},
	} {
		_, err := parseFlags(args, noEnv, io.Discard)
		require.NoError(t, err, "%q", args)
	}
	_, err := parseFlags([]string{"--admin-tls-cert", "c.pem"}, noEnv, io.Discard)
	require.ErrorContains(t, err, "go together")
}

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files
// and returns their paths and a pool trusting the certificate.
func selfSigned(t *testing.T) (certPath, keyPath string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "syncd admin"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certPath, keyPath, pool
}

// With a certificate the admin listener serves HTTPS only.
func TestAdminListenerServesTLS(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	certPath, keyPath, pool := selfSigned(t)
	logs := &syncdtest.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--dev-tokens",
			"--data", filepath.Join(t.TempDir(), "syncd.db"), "--tokens", filepath.Join(t.TempDir(), "tokens.json"),
			"--admin-tls-cert", certPath, "--admin-tls-key", keyPath}, func(string) string { return "" }, logs)
	}()
	addrRE := regexp.MustCompile(`admin_addr=(127\.0\.0\.1:\d+)`)
	tokenRE := regexp.MustCompile(`admin_token=(sda_\S+)`)
	var addr, token string
	require.Eventually(t, func() bool {
		a, tk := addrRE.FindStringSubmatch(logs.String()), tokenRE.FindStringSubmatch(logs.String())
		if a == nil || tk == nil {
			return false
		}
		addr, token = a[1], tk[1]
		return true
	}, 30*time.Second, 10*time.Millisecond, "syncd never logged its admin address: %s", logs)

	tlsClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/v1/admin/status", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := tlsClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	resp, err = (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/healthz")
	if err == nil {
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP to the TLS listener is refused")
	}
	cancel()
	require.NoError(t, <-done)
}
