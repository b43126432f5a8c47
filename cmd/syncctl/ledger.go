package main

import (
	"cmp"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncproto"
)

func (a *app) ledgerCommand() *cobra.Command {
	return group("ledger", "Read the server's replay ledger", a.ledgerGetCommand())
}

func (a *app) ledgerGetCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get OP_ID",
		Short: "Show what the server decided for an op, and when",
		Long: `Show the replay ledger's decision for one op id in one tenant: applied,
superseded or conflict, with the version it produced or lost to, the op's time
and when it was decided. Refusals (rejected) are not recorded, so an op that was
only ever refused is not found. An op not found whose time is at or before its
tenant's ledger floor would be answered "expired" if resent.

Exit status 5 when the ledger holds no decision for the op.`,
		Args: exactArgs(1, "one op id"),
	}
	o := addAdminFlags(cmd)
	var tenant string
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant the op was pushed in (required: ledgers are per tenant)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.adminClient(cmd, o)
		if err != nil {
			return err
		}
		opID := args[0]
		if err := syncproto.ValidateOpID(opID); err != nil {
			return failf(exitUsage, "op id %q: %v", opID, err)
		}
		if tenant == "" {
			return failf(exitUsage, "--tenant is required: op ids are recorded per tenant")
		}
		ans, err := lookupLedger(cmd.Context(), c, tenant, opID)
		if err != nil {
			return err
		}
		if a.json {
			err = printJSON(a.stdout, ans)
		} else {
			err = a.printLedgerAnswer(*ans)
		}
		if err == nil && !ans.Found {
			err = failf(exitNotFound, "op %s has no decision in tenant %s's ledger", opID, tenant)
		}
		return err
	}
	return cmd
}

func (a *app) printLedgerAnswer(ans adminapi.LedgerAnswer) error {
	floor := "none yet"
	if !ans.Floor.IsZero() {
		floor = stamp(ans.Floor)
	}
	if !ans.Found {
		return fields(a.stdout,
			[2]string{"op id", ans.OpID},
			[2]string{"tenant", ans.Tenant},
			[2]string{"decision", "none recorded (never decided, only refused, or evicted by retention)"},
			[2]string{"ledger floor", floor},
		)
	}
	rows := [][2]string{
		{"op id", ans.OpID},
		{"tenant", ans.Tenant},
		{"decision", decision(ans.Result)},
		{"op time", stamp(ans.OpTime)},
		{"decided at", stamp(ans.DecidedAt)},
		{"ledger floor", floor},
	}
	if ans.ClientID != "" {
		rows = append(rows, [2]string{"client", ans.ClientID}, [2]string{"user", cmp.Or(ans.User, "-")})
	}
	return fields(a.stdout, rows...)
}

// decision says in words what a recorded result was.
func decision(r *syncproto.Result) string {
	if r == nil {
		return "-"
	}
	switch r.Status {
	case syncproto.StatusApplied:
		return fmt.Sprintf("applied as version %d (oplog seq %d)", r.Version, r.Seq)
	case syncproto.StatusSuperseded:
		if r.Winner != nil {
			return fmt.Sprintf("superseded by version %d (last writer wins)", r.Winner.Version)
		}
	case syncproto.StatusConflict:
		if r.Winner != nil {
			return fmt.Sprintf("conflict with version %d (stale base version)", r.Winner.Version)
		}
	}
	if r.Message != "" {
		return string(r.Status) + ": " + r.Message
	}
	return string(r.Status)
}
