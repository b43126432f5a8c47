package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

// purgeReport is the --json output of syncctl queue purge.
type purgeReport struct {
	Path        string `json:"path"`
	Selected    int    `json:"selected"`
	Purged      int    `json:"purged"`
	Pending     int    `json:"pending"`
	DeadLetters int    `json:"dead_letters"`
	Interrupted bool   `json:"interrupted"`
}

func (a *app) queuePurgeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "purge --path FILE (--all | ID...)",
		Short: "Delete dead letters for good",
		Long: `Delete dead letters for good: their writes will never reach the server.
Work is done in batches (--batch), each one atomic; an interrupt stops between
batches, leaving every dead letter either purged or still there.`,
	}
	path := addPathFlag(cmd)
	all, batch, mode := addSelectionFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		run, err := a.onDeadLetters(cmd.Context(), *path, *all, args, *batch, *mode, "purge",
			func(q offlinequeue.Queue) func(context.Context, ...offlinequeue.ID) error { return q.Purge })
		if err != nil {
			return err
		}
		r := purgeReport{Path: *path, Selected: run.total, Purged: run.before.DeadLetters - run.after.DeadLetters,
			Pending: run.after.Pending, DeadLetters: run.after.DeadLetters, Interrupted: run.interrupted}
		if a.json {
			err = printJSON(a.stdout, r)
		} else {
			_, err = fmt.Fprintf(a.stdout, "purged %s; %s now has %d pending and %s\n",
				count(r.Purged, "dead letter", "dead letters"), r.Path, r.Pending, count(r.DeadLetters, "dead letter", "dead letters"))
		}
		if err != nil {
			return err
		}
		return run.err()
	}
	return cmd
}
