package syncproto

import (
	"net/url"
	"strings"
)

// MaxServerURLBytes bounds one server URL announced in welcome.servers,
// and MaxServers their number.
const (
	MaxServerURLBytes = 512
	MaxServers        = 64
)

// ValidateServerURL checks a server's public base URL as welcome.servers
// carries it: http, https, ws or wss, a host, no user info, query or
// fragment, at most MaxServerURLBytes. The error is an *Error with
// CodeBadRequest.
func ValidateServerURL(s string) error {
	if len(s) > MaxServerURLBytes {
		return Errorf(CodeBadRequest, "server URL of %d bytes: at most %d", len(s), MaxServerURLBytes)
	}
	u, err := url.Parse(s)
	if err != nil {
		return Errorf(CodeBadRequest, "server URL %q: %v", truncate(s), err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "ws" && u.Scheme != "wss":
		return Errorf(CodeBadRequest, "server URL %q: want http(s):// or ws(s)://", truncate(s))
	case u.Host == "" || strings.ContainsAny(u.Host, " \t"):
		return Errorf(CodeBadRequest, "server URL %q: no host", truncate(s))
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return Errorf(CodeBadRequest, "server URL %q: a base URL has no user, query or fragment", truncate(s))
	}
	return nil
}

// SecureServerURL reports whether a server URL uses TLS (https or wss).
func SecureServerURL(s string) bool {
	return strings.HasPrefix(s, "https://") || strings.HasPrefix(s, "wss://")
}
