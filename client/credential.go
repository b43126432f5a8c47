package client

import (
	"errors"
	"fmt"
	"strings"

	"github.com/syncd-dev/syncd/syncproto"
)

// ErrInvalidCredential says a device credential is malformed, or disagrees
// with the Token or ClientID also configured.
var ErrInvalidCredential = errors.New("client: invalid credential")

// CredentialPrefix starts every device credential.
const CredentialPrefix = "sdc_"

// A device credential is one string that carries both what a device needs
// to authenticate: "sdc_<client id>@<token>" (syncctl token issue
// --credential prints it). The client id must be known before the first
// connection (the device stamps offline writes with it), so it travels
// with the token instead of being learnt from the server. Neither a client
// id nor a token contains '@', so the split is unambiguous. Nothing on the
// wire changes: the client sends the token as its bearer token and the
// client id in hello, as with Token and ClientID.

// FormatCredential returns the device credential of a token bound to
// clientID.
func FormatCredential(clientID, token string) string {
	return CredentialPrefix + clientID + "@" + token
}

// ParseCredential splits a device credential into its client id and token.
// A malformed one is an error that errors.Is ErrInvalidCredential; the
// error never quotes the token.
func ParseCredential(credential string) (clientID, token string, err error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(credential), CredentialPrefix)
	if !ok {
		return "", "", fmt.Errorf("%w: want %s<client id>@<token>", ErrInvalidCredential, CredentialPrefix)
	}
	clientID, token, ok = strings.Cut(rest, "@")
	switch {
	case !ok || token == "":
		return "", "", fmt.Errorf("%w: no token after the client id", ErrInvalidCredential)
	case syncproto.ValidateID(clientID) != nil:
		return "", "", fmt.Errorf("%w: client id must match %s", ErrInvalidCredential, syncproto.IDPattern)
	case strings.ContainsAny(token, "@ \t\r\n"):
		return "", "", fmt.Errorf("%w: the token has a character no token has", ErrInvalidCredential)
	}
	return clientID, token, nil
}

// applyCredential fills Token and ClientID from Credential, which must
// agree with any of them also set.
func (c *Config) applyCredential() error {
	if c.Credential == "" {
		return nil
	}
	id, token, err := ParseCredential(c.Credential)
	if err != nil {
		return err
	}
	if (c.ClientID != "" && c.ClientID != id) || (c.Token != "" && c.Token != token) {
		return fmt.Errorf("%w: Credential and Token or ClientID disagree; set only Credential", ErrInvalidCredential)
	}
	c.ClientID, c.Token = id, token
	return nil
}
