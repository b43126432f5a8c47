package main

import (
	"errors"
	"io/fs"
	"time"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/server/auth"
)

// defaultTokenFile is syncd's default --tokens.
const defaultTokenFile = "var/tokens.json"

func (a *app) tokenCommand() *cobra.Command {
	cmd := group("token", "Issue, list and revoke syncd's bearer tokens",
		a.tokenIssueCommand(),
		a.tokenListCommand(),
		a.tokenRevokeCommand(),
	)
	cmd.Long = `Edit syncd's token file (the file syncd --tokens reads). The file keeps
only a hash of each token's secret: a token is shown once, when issued.
syncd notices changes within a second, without a restart. Run syncctl as the
user syncd runs as: the file is private (mode 0600).

Every issue and revocation bumps the file's generation. On a cluster whose
nodes read their own copies, copy the whole file to every node within
syncd --cluster-tokens-grace: a node with an older generation serves until
the grace is over, then stops (docs/operations.md, Tokens on a cluster).`
	return cmd
}

// addTokenFileFlag adds --tokens to a token command.
func addTokenFileFlag(cmd *cobra.Command) {
	cmd.Flags().String("tokens", defaultTokenFile, "syncd's token file (env SYNCCTL_TOKENS)")
}

func (a *app) tokenFile(cmd *cobra.Command) string {
	return a.setting(cmd.Flags(), "tokens", "SYNCCTL_TOKENS")
}

// tokenView is one token in --json output: its principal, never its
// secret or hash.
type tokenView struct {
	auth.Principal
	CreatedAt time.Time `json:"created_at"`
}

// readTokens loads the token file, mapping a missing file to not found and
// a file that is not a token file to a bad file.
func readTokens(path string) ([]auth.Token, error) {
	tokens, err := auth.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, failf(exitNotFound, "token file %s does not exist (syncctl token issue creates it)", path)
	case err != nil:
		return nil, failf(exitBadFile, "%v", err)
	}
	return tokens, nil
}
