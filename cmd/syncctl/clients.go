package main

import (
	"cmp"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/adminapi"
)

func (a *app) clientsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "clients",
		Aliases: []string{"sessions"},
		Short:   "List connected clients with their user, cursor, lag and pending pushes",
		Args:    exactArgs(0, "no arguments"),
	}
	o := addAdminFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := a.adminClient(cmd, o)
		if err != nil {
			return err
		}
		var clients []adminapi.Session
		if err := c.get(cmd.Context(), adminapi.PathSessions, nil, &clients); err != nil {
			return err
		}
		if a.json {
			return printJSON(a.stdout, clients)
		}
		var st adminapi.Status
		if err := c.get(cmd.Context(), adminapi.PathStatus, nil, &st); err != nil {
			return err
		}
		t := newTable(a.stdout, "CLIENT", "TENANT", "USER", "TOKEN", "CONNECTED", "CURSOR", "LAG", "PENDING", "REMOTE")
		for _, cl := range clients {
			lag := "-" // no live feed: behind nothing
			if cl.Subscribed {
				lag = "0"
				if st.OplogHead > cl.Cursor {
					lag = strconv.FormatUint(st.OplogHead-cl.Cursor, 10)
				}
			}
			t.row(cl.ClientID, cl.Tenant, cmp.Or(cl.User, "-"), cl.TokenID, stamp(cl.ConnectedAt), strconv.FormatUint(cl.Cursor, 10),
				lag, strconv.FormatInt(cl.PendingPushes, 10), cl.Remote)
		}
		return t.flush()
	}
	return cmd
}
