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
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// newSecretFile makes a cluster secret and writes it as `syncd
// cluster-secret` does.
func newSecretFile(t testing.TB) (cluster.Secret, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cluster.secret")
	require.NoError(t, run(context.Background(), []string{clusterSecretCmd, "--out", path}, func(string) string { return "" }, &syncdtest.Buffer{}))
	s, err := cluster.LoadSecret(path)
	require.NoError(t, err)
	return s, path
}

// writePrivateFile writes content to a new mode-0600 file named name.
func writePrivateFile(t testing.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// `syncd cluster-secret --out FILE` writes a 0600 secret once and refuses
// to replace it.
func TestClusterSecretCommand(t *testing.T) {
	s, path := newSecretFile(t)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	logs := &syncdtest.Buffer{}
	err = run(context.Background(), []string{clusterSecretCmd, "--out", path}, func(string) string { return "" }, logs)
	require.ErrorIs(t, err, cluster.ErrSecretExists)
	again, err := cluster.LoadSecret(path)
	require.NoError(t, err)
	require.True(t, again.Equal(s), "the refused run left the secret as it was")
	require.ErrorContains(t, run(context.Background(), []string{clusterSecretCmd}, func(string) string { return "" }, logs), "--out FILE is required")
}

// The cluster's NATS flags: a secret is required, and a listener or URL
// beyond loopback without TLS (or, for a URL, without credentials) is
// refused unless --nats-insecure-plaintext.
func TestNATSFlagsRefusePlaintextBeyondLoopback(t *testing.T) {
	_, secret := newSecretFile(t)
	base := []string{"--cluster", "--cluster-secret", secret, "--replicas", "1"}
	tlsFlags := []string{"--nats-tls-cert", "node.pem", "--nats-tls-key", "node-key.pem", "--nats-tls-ca", "ca.pem"}
	userFlags := []string{"--nats-user", "syncd", "--nats-password-file", "pw"}
	cases := []struct {
		name  string
		args  []string
		plain bool   // refused as cluster.ErrPlaintext
		want  string // else: the error says this; "" accepts
	}{
		{"no secret", []string{"--cluster"}, false, "--cluster needs --cluster-secret FILE"},
		{"loopback listeners", base, false, ""},
		{"client listener beyond loopback", append(base, "--nats-listen", "0.0.0.0:4222"), true, ""},
		{"client listener beyond loopback, TLS", append(append(base, "--nats-listen", "10.0.0.1:4222"), tlsFlags...), false, ""},
		{"client listener beyond loopback, insecure", append(base, "--nats-listen", "0.0.0.0:4222", "--nats-insecure-plaintext"), false, ""},
		{"route listener beyond loopback", append(base, "--nats-cluster-listen", "10.0.0.1:6222", "--nats-route", "nats-route://10.0.0.2:6222"), true, ""},
		{"route listener beyond loopback, TLS", append(append(base, "--nats-cluster-listen", "10.0.0.1:6222", "--nats-route", "nats-route://10.0.0.2:6222"), tlsFlags...), false, ""},
		{"route listener beyond loopback, insecure", append(base, "--nats-cluster-listen", "10.0.0.1:6222", "--nats-route", "nats-route://10.0.0.2:6222", "--nats-insecure-plaintext"), false, ""},
		{"TLS without CA", append(base, "--nats-tls-cert", "a", "--nats-tls-key", "b"), false, "--nats-tls-cert, --nats-tls-key and --nats-tls-ca together"},
		{"embedded with a NATS user", append(base, userFlags...), false, "are for --nats-url"},
		{"external loopback, no credentials", append(base, "--nats-url", "nats://127.0.0.1:4222"), false, ""},
		{"external beyond loopback, no credentials", append(base, "--nats-url", "nats://10.0.0.5:4222"), true, ""},
		{"external beyond loopback, credentials, no TLS", append(append(base, "--nats-url", "nats://10.0.0.5:4222"), userFlags...), true, ""},
		{"external beyond loopback, TLS, no credentials", append(base, "--nats-url", "tls://10.0.0.5:4222", "--nats-tls-ca", "ca.pem"), true, ""},
		{"external beyond loopback, TLS and credentials", append(append(base, "--nats-url", "nats://10.0.0.5:4222", "--nats-tls-ca", "ca.pem"), userFlags...), false, ""},
		{"external beyond loopback, creds file, tls://", append(base, "--nats-url", "tls://nats.example.com:4222", "--nats-creds", "node.creds"), false, ""},
		{"external beyond loopback, insecure", append(base, "--nats-url", "nats://10.0.0.5:4222", "--nats-insecure-plaintext"), false, ""},
		{"external URL with credentials", append(base, "--nats-url", "nats://u:p@127.0.0.1:4222"), false, "never on the command line"},
		{"creds file and user", append(append(base, "--nats-url", "nats://127.0.0.1:4222", "--nats-creds", "c"), userFlags...), false, "not both"},
		{"user without password file", append(base, "--nats-url", "nats://127.0.0.1:4222", "--nats-user", "syncd"), false, "go together"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseFlags(c.args, func(string) string { return "" }, &syncdtest.Buffer{})
			switch {
			case c.plain:
				require.ErrorIs(t, err, cluster.ErrPlaintext)
			case c.want == "":
				require.NoError(t, err)
			default:
				require.ErrorContains(t, err, c.want)
			}
		})
	}
}

// TestClusterProcessNATSRefusesStrangers: with the cluster's defaults
// (three syncd processes, embedded NATS on loopback, a cluster secret,
// no TLS), no one but a node gets into NATS: a client without the node
// user's password is refused on every node's client port, and a NATS
// server without the route credentials gets no route and sees no stream,
// while one with them (the control) is routed to every node.
func TestClusterProcessNATSRefusesStrangers(t *testing.T) {
	waitsInParallel(t)
	pc := startProcCluster(t)
	requireStrangersRefused(t, pc, natsTLS{})
}

// natsTLS is a test's TLS material for NATS; zero means plaintext.
type natsTLS struct {
	ca        string // the CA's PEM file
	routeCert tls.Certificate
	pool      *x509.CertPool
}

func (n natsTLS) enabled() bool { return n.ca != "" }

// client is the URL of the client listener at addr, and the options that
// trust the cluster's CA.
func (n natsTLS) client(addr string) (string, []nats.Option) {
	if !n.enabled() {
		return "nats://" + addr, nil
	}
	return "tls://" + addr, []nats.Option{nats.RootCAs(n.ca)}
}

// requireStrangersRefused checks pc's NATS ports against strangers: on
// every node's client port, no credentials, a wrong password, another
// cluster's password and the route user are refused while the node user is
// admitted; on the route ports, servers with no credentials, a wrong route
// password or another cluster's secret get no route and see no stream,
// while a server with the cluster's route credentials (and, with TLS, a
// certificate of the cluster's CA) is routed to all three nodes.
func requireStrangersRefused(t *testing.T, pc *procCluster, tl natsTLS) {
	t.Helper()
	other, err := cluster.NewSecret()
	require.NoError(t, err)
	strangers := []struct {
		name string
		opts []nats.Option
	}{
		{"no credentials", nil},
		{"a wrong password", []nats.Option{nats.UserInfo(cluster.NodeUser, "not-the-password")}},
		{"another cluster's node password", []nats.Option{nats.UserInfo(cluster.NodeUser, other.NodePassword())}},
		{"the route user", []nats.Option{nats.UserInfo(cluster.RouteUser, pc.secret.RoutePassword())}},
	}
	for _, n := range pc.nodes {
		clientURL, base := tl.client(n.natsAddr)
		for _, s := range strangers {
			nc, err := nats.Connect(clientURL, append(append(base, nats.Timeout(5*time.Second)), s.opts...)...)
			if err == nil {
				nc.Close()
			}
			require.ErrorIs(t, err, nats.ErrAuthorization, "%s on %s's client port", s.name, n.name)
		}
		nc, err := nats.Connect(clientURL, append(base, nats.Timeout(5*time.Second), nats.UserInfo(cluster.NodeUser, pc.secret.NodePassword()))...)
		require.NoError(t, err, "the node user on %s's client port", n.name)
		nc.Close()
		if tl.enabled() {
			nc, err := nats.Connect("nats://"+n.natsAddr, nats.Timeout(5*time.Second), nats.UserInfo(cluster.NodeUser, pc.secret.NodePassword()))
			if err == nil {
				nc.Close()
			}
			require.Error(t, err, "plaintext on %s's TLS client port", n.name)
		}
	}

	rogues := []*natsserver.Server{
		routeProbe(t, "rogue-anonymous", pc.nodes[0].routeAddr, nil, tl),
		routeProbe(t, "rogue-wrong-password", pc.nodes[1].routeAddr, url.UserPassword(cluster.RouteUser, "not-the-password"), tl),
		routeProbe(t, "rogue-other-cluster", pc.nodes[2].routeAddr, url.UserPassword(cluster.RouteUser, other.RoutePassword()), tl),
	}
	if tl.enabled() {
		// The route password without a certificate of the cluster's CA.
		rogues = append(rogues, routeProbe(t, "rogue-no-certificate", pc.nodes[0].routeAddr,
			url.UserPassword(cluster.RouteUser, pc.secret.RoutePassword()), natsTLS{}))
	}
	control := routeProbe(t, "control", pc.nodes[0].routeAddr, url.UserPassword(cluster.RouteUser, pc.secret.RoutePassword()), tl)
	// A server admitted on one route learns the others from it and is
	// routed to all three; a refused one is never told of the others.
	deadline := time.Now().Add(procStartTimeout)
	for control.NumRoutes() < len(pc.nodes) {
		for _, r := range rogues {
			require.Less(t, r.NumRoutes(), 2, "%s was told of the cluster's other servers", r.Name())
		}
		require.True(t, time.Now().Before(deadline), "the control server has %d routes of %d", control.NumRoutes(), len(pc.nodes))
		time.Sleep(100 * time.Millisecond)
	}
	for _, r := range rogues {
		require.Less(t, r.NumRoutes(), 2, "%s was told of the cluster's other servers", r.Name())
		nc, err := nats.Connect(r.ClientURL(), nats.Timeout(5*time.Second))
		require.NoError(t, err)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err = js.Stream(ctx, cluster.StreamName)
		cancel()
		nc.Close()
		require.Error(t, err, "%s sees the command stream", r.Name())
	}
}

// routeProbe starts a NATS server with JetStream, named name, whose one
// explicit route dials addr with user (nil: none) and tl's TLS; it
// authenticates the routes it is told of by gossip with the same user. It
// shuts down when t ends.
func routeProbe(t *testing.T, name, addr string, user *url.Userinfo, tl natsTLS) *natsserver.Server {
	t.Helper()
	route := &url.URL{Scheme: "nats-route", Host: addr, User: user}
	o := &natsserver.Options{ServerName: name, Host: "127.0.0.1", Port: -1, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(), MaxPayload: cluster.DefaultMaxCommandBytes,
		Cluster: natsserver.ClusterOpts{Name: "syncd", Host: "127.0.0.1", Port: -1},
		Routes:  []*url.URL{route}}
	if user != nil {
		o.Cluster.Username = user.Username()
		o.Cluster.Password, _ = user.Password()
	}
	if tl.enabled() {
		o.Cluster.TLSConfig = &tls.Config{Certificates: []tls.Certificate{tl.routeCert}, RootCAs: tl.pool, ClientCAs: tl.pool,
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
		o.Cluster.TLSTimeout = 5
	}
	s, err := natsserver.NewServer(o)
	require.NoError(t, err)
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	require.True(t, s.ReadyForConnections(30*time.Second), "%s did not start", name)
	return s
}

// testCA is a certificate authority a test makes, and the certificates it
// signs for 127.0.0.1.
type testCA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  string // the CA certificate's file
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "syncd test cluster CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	ca := &testCA{dir: t.TempDir(), cert: cert, key: key, pool: x509.NewCertPool()}
	ca.pool.AddCert(cert)
	ca.pem = filepath.Join(ca.dir, "ca.pem")
	require.NoError(t, os.WriteFile(ca.pem, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	return ca
}

// issue signs a certificate for name at 127.0.0.1, good for both ends of
// a TLS connection (a route is both), and writes it and its key.
func (ca *testCA) issue(t *testing.T, name string, serial int64) (certFile, keyFile string, pair tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	certFile, keyFile = filepath.Join(ca.dir, name+".pem"), filepath.Join(ca.dir, name+"-key.pem")
	require.NoError(t, os.WriteFile(certFile, certPEM, 0o600))
	require.NoError(t, os.WriteFile(keyFile, keyPEM, 0o600))
	pair, err = tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	return certFile, keyFile, pair
}

// TestClusterProcessThreeHostsTLS runs docs/operations.md's three-host
// example on loopback: three syncd processes, one cluster secret, NATS
// TLS on the client and route listeners with a CA and node certificates
// the test makes. The cluster forms, serves a write through node-1 that
// node-2 reads back, and refuses strangers as the defaults do (and a
// server holding the route password but no certificate of the CA).
func TestClusterProcessThreeHostsTLS(t *testing.T) {
	waitsInParallel(t)
	ca := newTestCA(t)
	flags := make([][]string, 3)
	for i := range flags {
		cert, key, _ := ca.issue(t, fmt.Sprintf("node-%d", i+1), int64(i+2))
		flags[i] = []string{"--nats-tls-cert", cert, "--nats-tls-key", key, "--nats-tls-ca", ca.pem}
	}
	_, _, probe := ca.issue(t, "probe", 10)
	pc := startProcClusterEach(t, func(_, _ int, addr string) string { return addr }, func(i int) []string { return flags[i] })

	token := pc.member(t, "phone")
	ctx, cancel := context.WithTimeout(context.Background(), procStartTimeout)
	defer cancel()
	clock := syncproto.NewClock("phone", time.Now)
	c1, err := dialPush(ctx, pc.nodes[0], token, "phone", clock)
	require.NoError(t, err)
	defer c1.close()
	op, err := syncproto.NewOpID()
	require.NoError(t, err)
	ans, err := c1.roundTrip(ctx, &syncproto.Push{ID: "p1", Mutations: []syncproto.Mutation{{OpID: op, Model: "notes", Key: "over-tls",
		Op: syncproto.OpPut, Value: []byte(`{"via":"node-1"}`), HLC: clock.Now()}}})
	require.NoError(t, err)
	res, ok := ans.(*syncproto.PushResult)
	require.True(t, ok, "%T", ans)
	require.Len(t, res.Results, 1)
	require.Equal(t, syncproto.StatusApplied, res.Results[0].Status)

	c2, err := dialPush(ctx, pc.nodes[1], token, "phone", clock)
	require.NoError(t, err)
	defer c2.close()
	var got string
	for i := 0; got == "" && ctx.Err() == nil; i++ { // bounded by ctx: node-2 applies what node-1 published
		ans, err := c2.roundTrip(ctx, &syncproto.Pull{ID: fmt.Sprintf("pull-%d", i)})
		require.NoError(t, err)
		changes, ok := ans.(*syncproto.Changes)
		require.True(t, ok, "%T", ans)
		for _, e := range changes.Entries {
			if e.Key == "over-tls" {
				got = string(e.Value)
			}
		}
		if got == "" {
			time.Sleep(100 * time.Millisecond)
		}
	}
	require.JSONEq(t, `{"via":"node-1"}`, got, "node-2 serves the write node-1 took")

	requireStrangersRefused(t, pc, natsTLS{ca: ca.pem, routeCert: probe, pool: ca.pool})
	for _, n := range pc.nodes {
		require.Contains(t, syncdLines(n.logPath, 1000), "nats_tls=true", "%s logs that its NATS has TLS", n.name)
	}
}

// A syncd node started with --nats-insecure-plaintext says so in its log
// at every start.
func TestInsecurePlaintextIsLoggedAtStart(t *testing.T) {
	_, secret := newSecretFile(t)
	logs := &syncdtest.Buffer{}
	_, stop := startRun(t, []string{"--listen", "127.0.0.1:0", "--admin-listen", "", "--dev-tokens",
		"--data", filepath.Join(t.TempDir(), "syncd.db"), "--tokens", filepath.Join(t.TempDir(), "tokens.json"),
		"--cluster", "--replicas", "1", "--cluster-secret", secret, "--nats-listen", syncdtest.FreeAddr(t), "--nats-insecure-plaintext"}, logs)
	defer stop()
	require.True(t, strings.Contains(logs.String(), "INSECURE: --nats-insecure-plaintext"), "no warning in %s", logs)
}
