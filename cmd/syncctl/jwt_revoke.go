package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/server/auth"
)

// jwtRevokedView is the --json output of syncctl jwt revoke.
type jwtRevokedView struct {
	JTI  string `json:"jti,omitempty"`
	User string `json:"user,omitempty"`
	File string `json:"deny_file"`
}

func (a *app) jwtRevokeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "revoke (--jti ID [--expires TIME] | --user USER)",
		Short: "Deny a JWT by jti, or every JWT a user holds now; syncd closes their sessions",
		Long: `Add an entry to syncd's JWT deny list (the file syncd --jwt-deny-file reads).
--jti denies one token; --expires (RFC 3339, the token's exp) lets the entry be
pruned once the token expired anyway. --user denies every token of the user
issued up to now: tokens the identity provider issues later are accepted, so
also block the user there if they must not sign in again. syncd refuses the
tokens within a second and closes their sessions (unauthorized, close 1008)
within about two seconds.`,
		Args: exactArgs(0, "no arguments"),
	}
	cmd.Flags().String("deny-file", defaultDenyFile, "syncd's JWT deny list (env SYNCCTL_JWT_DENY_FILE)")
	jti := cmd.Flags().String("jti", "", "the token id to deny")
	user := cmd.Flags().String("user", "", "the user whose tokens to deny")
	expires := cmd.Flags().String("expires", "", "with --jti: the token's exp (RFC 3339)")
	cmd.MarkFlagsOneRequired("jti", "user")
	cmd.MarkFlagsMutuallyExclusive("jti", "user")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		path := a.setting(cmd.Flags(), "deny-file", "SYNCCTL_JWT_DENY_FILE")
		now := a.now()
		var err error
		if *jti != "" {
			var exp time.Time
			if *expires != "" {
				if exp, err = time.Parse(time.RFC3339, *expires); err != nil {
					return failf(exitUsage, "jwt revoke: --expires: %v", err)
				}
			}
			err = auth.DenyJTI(path, *jti, exp, now)
		} else {
			err = auth.DenyUser(path, *user, now)
		}
		if err != nil {
			return failf(exitFailure, "jwt revoke: %v", err)
		}
		if a.json {
			return printJSON(a.stdout, jwtRevokedView{JTI: *jti, User: *user, File: path})
		}
		what := "token " + *jti
		if *user != "" {
			what = "every token of user " + *user + " issued until now"
		}
		_, err = fmt.Fprintf(a.stdout, "denied %s in %s; syncd refuses it within a second\n", what, path)
		return err
	}
	return cmd
}
