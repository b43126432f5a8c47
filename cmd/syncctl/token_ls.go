package main

import (
	"strings"

	"github.com/spf13/cobra"
)

func (a *app) tokenListCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the token file's tokens (ids and what they may do, never secrets)",
		Args:    exactArgs(0, "no arguments"),
	}
	addTokenFileFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		tokens, err := readTokens(a.tokenFile(cmd))
		if err != nil {
			return err
		}
		views := make([]tokenView, len(tokens))
		for i, t := range tokens {
			views[i] = tokenView{Principal: t.Principal, CreatedAt: t.CreatedAt}
		}
		if a.json {
			return printJSON(a.stdout, views)
		}
		tb := newTable(a.stdout, "ID", "KIND", "TENANT", "USER", "CLIENT", "READ", "WRITE", "CREATED")
		for _, v := range views {
			kind := "client"
			if v.Admin {
				kind = "admin"
			}
			tb.row(v.TokenID, kind, v.Tenant, v.User, v.ClientID, strings.Join(v.Read, ","), strings.Join(v.Write, ","), stamp(v.CreatedAt))
		}
		return tb.flush()
	}
	return cmd
}
