package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

// requeueReport is the --json output of syncctl queue requeue.
type requeueReport struct {
	Path     string `json:"path"`
	Selected int    `json:"selected"`
	// Requeued went back to the pending tail with attempts reset.
	Requeued int `json:"requeued"`
	// Dropped were deleted instead: their key was pending again, so the
	// pending item already carries the write.
	Dropped     int  `json:"dropped"`
	Pending     int  `json:"pending"`
	DeadLetters int  `json:"dead_letters"`
	Interrupted bool `json:"interrupted"`
}

func (a *app) queueRequeueCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "requeue --path FILE (--all | ID...)",
		Short: "Move dead letters back to the pending queue, attempts reset",
		Long: `Move dead letters back to the tail of the pending queue with their attempts
reset, so the client replays them. A dead letter whose key is pending again is
dropped instead (the pending item already carries the write).

Work is done in batches (--batch), each one atomic. An interrupt (Ctrl-C)
stops between batches: every dead letter is then either requeued or still
dead, never both or neither; run the command again to finish.`,
	}
	path := addPathFlag(cmd)
	all, batch, mode := addSelectionFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		run, err := a.onDeadLetters(cmd.Context(), *path, *all, args, *batch, *mode, "requeue",
			func(q offlinequeue.Queue) func(context.Context, ...offlinequeue.ID) error { return q.Requeue })
		if err != nil {
			return err
		}
		r := requeueReport{Path: *path, Selected: run.total, Requeued: run.after.Pending - run.before.Pending,
			Pending: run.after.Pending, DeadLetters: run.after.DeadLetters, Interrupted: run.interrupted}
		r.Dropped = run.before.DeadLetters - run.after.DeadLetters - r.Requeued
		if a.json {
			err = printJSON(a.stdout, r)
		} else {
			_, err = fmt.Fprintf(a.stdout, "requeued %s, dropped %d (key pending again); %s now has %d pending and %s\n",
				count(r.Requeued, "dead letter", "dead letters"), r.Dropped, r.Path, r.Pending, count(r.DeadLetters, "dead letter", "dead letters"))
		}
		if err != nil {
			return err
		}
		return run.err()
	}
	return cmd
}
