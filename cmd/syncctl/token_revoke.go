package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/server/auth"
)

// revokedView is the --json output of syncctl token revoke.
type revokedView struct {
	Revoked string `json:"revoked"`
}

func (a *app) tokenRevokeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "revoke TOKEN_ID",
		Short: "Remove a token; syncd refuses it within a second",
		Long: `Remove a token from the token file by its id (syncctl token ls). syncd stops
accepting it for new connections and admin requests within a second, and
closes the sessions already open with it (unauthorized, close 1008) within
about two seconds.`,
		Args: exactArgs(1, "one token id"),
	}
	addTokenFileFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		path := a.tokenFile(cmd)
		if _, err := readTokens(path); err != nil {
			return err
		}
		err := auth.Revoke(path, args[0])
		if errors.Is(err, auth.ErrNoSuchToken) {
			return failf(exitNotFound, "%s holds no token with id %s (see syncctl token ls)", path, args[0])
		}
		if err != nil {
			return failf(exitFailure, "%v", err)
		}
		if a.json {
			return printJSON(a.stdout, revokedView{Revoked: args[0]})
		}
		_, err = fmt.Fprintf(a.stdout, "revoked token %s; syncd refuses it within a second\n", args[0])
		return err
	}
	return cmd
}
