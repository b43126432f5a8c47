package cluster

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// ErrPlaintext: a NATS listener or URL other hosts can reach would carry
// the cluster's traffic (every tenant's writes, the credentials) without
// TLS or without credentials. Nothing was started; give TLS files and
// credentials, keep it on loopback, or allow plaintext explicitly.
var ErrPlaintext = errors.New("plaintext NATS beyond loopback")

// maxPasswordFileBytes bounds a NATS password file.
const maxPasswordFileBytes = 4 << 10

// IsLoopback reports whether host (a name or an IP, no port) is reached
// from this host alone: localhost or a loopback IP. The empty host and
// unspecified addresses (0.0.0.0, ::) listen on every interface: not
// loopback.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// CheckListener refuses (ErrPlaintext) a NATS listener, named what
// ("client" or "route"), on a host other machines may reach when it has
// no TLS, unless allowPlaintext.
func CheckListener(what, host string, tls, allowPlaintext bool) error {
	if tls || allowPlaintext || IsLoopback(host) {
		return nil
	}
	return fmt.Errorf("%w: the %s listener on %q has no TLS; give the NATS TLS certificate, key and CA, or bind it to 127.0.0.1", ErrPlaintext, what, host)
}

// ConnectEmbedded connects to s, a server StartEmbedded started in this
// process, in-process (no socket, so no TLS to verify) as NodeUser with
// secret's password; opts come after and may add handlers and timeouts.
func ConnectEmbedded(s *server.Server, secret Secret, opts ...nats.Option) (*nats.Conn, error) {
	all := append([]nats.Option{nats.InProcessServer(s), nats.UserInfo(NodeUser, secret.NodePassword())}, opts...)
	nc, err := nats.Connect("", all...)
	if err != nil {
		return nil, fmt.Errorf("connect to the embedded NATS server: %w", err)
	}
	return nc, nil
}

// ExternalNATS is how a node reaches a NATS cluster it does not run. Give
// at most one kind of credential: CredsFile (a NATS user's JWT and nkey
// seed), or User with the password in PasswordFile (mode 0600, like the
// cluster secret). TLSCA verifies the servers; TLSCert and TLSKey, when
// the servers want them, are the node's client certificate.
type ExternalNATS struct {
	// URLs are the servers, comma-separated (nats://, tls://).
	URLs                   string
	CredsFile              string
	User, PasswordFile     string
	TLSCA, TLSCert, TLSKey string
	// AllowPlaintext accepts a URL beyond loopback without TLS or without
	// credentials (ErrPlaintext otherwise).
	AllowPlaintext bool
}

// Check checks e without reading its files. It refuses (ErrPlaintext) a
// URL whose host is not loopback when the connection would be plaintext
// (neither tls:// nor TLSCA) or carry no credentials, unless
// AllowPlaintext.
func (e ExternalNATS) Check() error {
	if e.CredsFile != "" && e.User != "" {
		return errors.New("NATS credentials: give a creds file or a user and password, not both")
	}
	if (e.User == "") != (e.PasswordFile == "") {
		return errors.New("NATS credentials: a user and its password file go together")
	}
	if (e.TLSCert == "") != (e.TLSKey == "") {
		return errors.New("NATS TLS: a client certificate and its key go together")
	}
	creds := e.CredsFile != "" || e.User != ""
	for _, raw := range strings.Split(e.URLs, ",") {
		raw = strings.TrimSpace(raw)
		if !strings.Contains(raw, "://") {
			raw = "nats://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil {
			return fmt.Errorf("NATS URL %q: %w", raw, err)
		}
		if u.User != nil {
			return fmt.Errorf("NATS URL %s carries credentials: pass them in a file (--nats-creds, --nats-password-file), never on the command line", u.Redacted())
		}
		tls := u.Scheme == "tls" || e.TLSCA != ""
		if e.AllowPlaintext || IsLoopback(u.Hostname()) || (tls && creds) {
			continue
		}
		missing := "credentials"
		if !tls {
			missing = "TLS"
		}
		return fmt.Errorf("%w: %s has no %s; give a TLS CA (or a tls:// URL) and credentials", ErrPlaintext, u.Redacted(), missing)
	}
	return nil
}

// Options checks e (Check) and returns the nats.Options of its
// credentials and TLS, reading the password file.
func (e ExternalNATS) Options() ([]nats.Option, error) {
	if err := e.Check(); err != nil {
		return nil, err
	}
	var opts []nats.Option
	if e.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(e.CredsFile))
	}
	if e.User != "" {
		b, err := readPrivateFile(e.PasswordFile, maxPasswordFileBytes)
		if err != nil {
			return nil, fmt.Errorf("NATS password file: %w", err)
		}
		opts = append(opts, nats.UserInfo(e.User, strings.TrimRight(string(b), "\r\n")))
	}
	if e.TLSCA != "" {
		opts = append(opts, nats.RootCAs(e.TLSCA))
	}
	if e.TLSCert != "" {
		opts = append(opts, nats.ClientCert(e.TLSCert, e.TLSKey))
	}
	return opts, nil
}
