package main

import (
	"github.com/spf13/cobra"
)

// Development defaults of the jwt commands: syncd's --jwt-issuer and
// --jwt-audience must name the same values (make run prints the command).
const (
	defaultJWTDir      = "var/jwt"
	defaultJWTIssuer   = "syncd-dev"
	defaultJWTAudience = "syncd"
	defaultDenyFile    = "var/jwt-deny.json"
)

func (a *app) jwtCommand() *cobra.Command {
	cmd := group("jwt", "Try JWT sign-in without an identity provider; revoke JWTs",
		a.jwtKeygenCommand(),
		a.jwtSignCommand(),
		a.jwtRevokeCommand(),
		a.jwtAllowCommand(),
		a.jwtDeniedCommand(),
	)
	cmd.Long = `Make a local signing key and its JWKS (keygen), sign tokens with chosen claims
(sign), for trying syncd's JWT sign-in without an identity provider; and keep
syncd's JWT deny list (revoke, allow, denied). In production the identity provider holds
the keys and signs the tokens: see docs/operations.md, Identity.`
	return cmd
}
