package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// signedView is the --json output of syncctl jwt sign.
type signedView struct {
	Token     string    `json:"token"`
	ClientID  string    `json:"client_id,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
}

func (a *app) jwtSignCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sign --sub USER --tenant T [--read M,...] [--write M,...] [--ttl 1h] [--claim NAME=JSON]...",
		Short: "Sign a JWT with the local key (development: what an identity provider does)",
		Long: `Print a JWT signed with the key syncctl jwt keygen made, carrying the claims
syncd maps by default: sub (the user), tenant, read and write (model lists),
iss and aud (syncd's --jwt-issuer and --jwt-audience), iat and exp. --claim adds
or replaces a claim with a JSON value (--claim 'scopes={"project":["p1"]}').
With --device it also prints, on stderr, the client id the device uses in its
user's namespace (PROTOCOL.md section 1.1).`,
		Args: exactArgs(0, "no arguments"),
	}
	keyPath := cmd.Flags().String("key", defaultJWTDir+"/signing-key.pem", "signing key (syncctl jwt keygen)")
	sub := cmd.Flags().String("sub", "", "the user")
	tenant := cmd.Flags().String("tenant", "", "the tenant")
	read := cmd.Flags().StringSlice("read", []string{"*"}, `models the token may read ("*" for all)`)
	write := cmd.Flags().StringSlice("write", []string{"*"}, `models the token may write ("*" for all)`)
	ttl := cmd.Flags().Duration("ttl", time.Hour, "lifetime (exp - iat)")
	iss := cmd.Flags().String("iss", defaultJWTIssuer, "issuer")
	aud := cmd.Flags().String("aud", defaultJWTAudience, "audience")
	jti := cmd.Flags().String("jti", "", "token id (for syncctl jwt revoke --jti)")
	device := cmd.Flags().String("device", "", "a device name: print the client id it takes in the user's namespace")
	extra := cmd.Flags().StringArray("claim", nil, "NAME=JSON: an extra or replaced claim; repeatable")
	cmd.MarkFlagRequired("sub")
	cmd.MarkFlagRequired("tenant")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *ttl <= 0 {
			return failf(exitUsage, "jwt sign: --ttl must be positive")
		}
		b, err := os.ReadFile(*keyPath)
		if err != nil {
			return failf(exitNotFound, "jwt sign: %v (make one with syncctl jwt keygen)", err)
		}
		k, err := auth.ParseSigningKey(b)
		if err != nil {
			return failf(exitUsage, "jwt sign: %s: %v", *keyPath, err)
		}
		now := a.now()
		claims := map[string]any{"iss": *iss, "aud": *aud, "sub": *sub, "tenant": *tenant,
			"read": *read, "write": *write, "iat": now.Unix(), "exp": now.Add(*ttl).Unix()}
		if *jti != "" {
			claims["jti"] = *jti
		}
		for _, c := range *extra {
			name, raw, ok := strings.Cut(c, "=")
			var v any
			if !ok || name == "" || json.Unmarshal([]byte(raw), &v) != nil {
				return failf(exitUsage, "jwt sign: --claim %q: want NAME=JSON (strings quoted: name='\"v\"')", c)
			}
			claims[name] = v
		}
		var clientID string
		if *device != "" {
			if clientID, err = syncproto.DeviceClientID(*sub, *device); err != nil {
				return failf(exitUsage, "jwt sign: --device: %v", err)
			}
		}
		tok, err := k.Sign(claims)
		if err != nil {
			return failf(exitFailure, "jwt sign: %v", err)
		}
		if a.json {
			return printJSON(a.stdout, signedView{Token: tok, ClientID: clientID, ExpiresAt: now.Add(*ttl).UTC().Truncate(time.Second)})
		}
		if _, err := fmt.Fprintln(a.stdout, tok); err != nil {
			return err
		}
		if clientID != "" {
			fmt.Fprintf(a.stderr, "client id of device %s: %s\n", *device, clientID)
		}
		return nil
	}
	return cmd
}
