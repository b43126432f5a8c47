package main

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/server/auth"
)

// issuedView is the --json output of syncctl token issue.
type issuedView struct {
	tokenView
	// Token is the bearer token. It is shown only here.
	Token string `json:"token"`
}

func (a *app) tokenIssueCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "issue (--tenant T --client-id C [--read M,...] [--write M,...] | --admin)",
		Short: "Add a token to the token file and print it (the only time it is shown)",
		Long: `Add a token and print it on stdout, so TOKEN=$(syncctl token issue ...) keeps
it. A client token acts as exactly one client id in one tenant and may read and
write the listed models ("*" for every model). An admin token authorises the
admin API only.`,
		Args: exactArgs(0, "no arguments"),
	}
	addTokenFileFlag(cmd)
	var p auth.Principal
	cmd.Flags().StringVar(&p.Tenant, "tenant", "", "the tenant the client belongs to")
	cmd.Flags().StringVar(&p.ClientID, "client-id", "", "the one client id the token may act as")
	cmd.Flags().StringSliceVar(&p.Read, "read", nil, `models the token may read, comma-separated ("*" for all)`)
	cmd.Flags().StringSliceVar(&p.Write, "write", nil, `models the token may write, comma-separated ("*" for all)`)
	cmd.Flags().BoolVar(&p.Admin, "admin", false, "an admin token (no tenant, client or models)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		path := a.tokenFile(cmd)
		if err := p.Validate(); err != nil {
			return failf(exitUsage, "token issue: %v", err)
		}
		if _, err := readTokens(path); err != nil && ExitCode(err) != exitNotFound {
			return err
		}
		now := a.now().UTC()
		token, err := auth.Issue(path, p, now)
		if errors.Is(err, fs.ErrPermission) {
			return failf(exitFailure, "%v (run syncctl as the user syncd runs as)", err)
		}
		if err != nil {
			return failf(exitFailure, "%v", err)
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(token, "sdk_"), "_")
		p.TokenID = id
		if a.json {
			return printJSON(a.stdout, issuedView{tokenView: tokenView{Principal: p, CreatedAt: now}, Token: token})
		}
		if _, err := fmt.Fprintln(a.stdout, token); err != nil {
			return err
		}
		who := "an admin token"
		if !p.Admin {
			who = fmt.Sprintf("client %s in tenant %s", p.ClientID, p.Tenant)
		}
		fmt.Fprintf(a.stderr, "issued token %s for %s in %s; it is shown only this once\n", id, who, path)
		return nil
	}
	return cmd
}
