package main

import (
	"fmt"
	"net/url"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/adminapi"
)

func (a *app) conflictsCommand() *cobra.Command {
	return groupWithDefault("conflicts", "Read the server's conflict log", a.conflictsListCommand)
}

func (a *app) conflictsListCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List conflict-log rows, newest first: who lost to whom, and why",
		Long: `List conflict-log rows, newest first. Each row is a write that did not
stand as sent: an LWW loser (superseded), an optimistic write with a stale
base version (conflict), or an LWW write that overwrote a version it never
saw. Page with --before ID (the last id of the previous page).`,
		Args: exactArgs(0, "no arguments"),
	}
	o := addAdminFlags(cmd)
	var tenant, model string
	var before int64
	var limit int
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant's conflicts")
	cmd.Flags().StringVar(&model, "model", "", "only this model's conflicts")
	cmd.Flags().Int64Var(&before, "before", 0, "only rows with an id below this one (paging)")
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many rows (the server caps it at 1000)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := a.adminClient(cmd, o)
		if err != nil {
			return err
		}
		if limit <= 0 || before < 0 {
			return failf(exitUsage, "--limit must be positive and --before not negative")
		}
		q := url.Values{"limit": {strconv.Itoa(limit)}}
		if before > 0 {
			q.Set("before", strconv.FormatInt(before, 10))
		}
		if tenant != "" {
			q.Set("tenant", tenant)
		}
		if model != "" {
			q.Set("model", model)
		}
		var rows []adminapi.Conflict
		if err := c.get(cmd.Context(), adminapi.PathConflicts, q, &rows); err != nil {
			return err
		}
		if a.json {
			return printJSON(a.stdout, rows)
		}
		t := newTable(a.stdout, "ID", "DECIDED", "POLICY", "TENANT", "MODEL/KEY", "LOSER", "WINNER", "REASON")
		for _, r := range rows {
			t.row(strconv.FormatInt(r.ID, 10), stamp(r.DecidedAt), string(r.Policy), r.Tenant, r.Model+"/"+r.Key,
				side(r.Loser), side(r.Winner), r.Reason)
		}
		return t.flush()
	}
	return cmd
}

// side names one side of a conflict: its version and op id, and the user
// whose device wrote it when its client id says (adminapi.UserOfClientID).
func side(s adminapi.ConflictSide) string {
	if s.User != "" {
		u := s
		u.User = ""
		return side(u) + " by " + s.User
	}
	switch {
	case s.OpID == "" && s.Version == 0:
		return "none"
	case s.OpID == "":
		return fmt.Sprintf("v%d", s.Version)
	case s.Version == 0:
		return s.OpID
	}
	return fmt.Sprintf("v%d %s", s.Version, s.OpID)
}
