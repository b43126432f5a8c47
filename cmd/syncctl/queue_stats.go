package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"
)

// queueStatsView is the --json output of syncctl queue stats.
type queueStatsView struct {
	Path        string      `json:"path"`
	Format      queueFormat `json:"format"`
	FileBytes   int64       `json:"file_bytes"`
	Pending     int         `json:"pending"`
	DeadLetters int         `json:"dead_letters"`
	// OldestPendingAt is when the head of the queue was enqueued: how long
	// the device has been waiting to deliver.
	OldestPendingAt time.Time `json:"oldest_pending_at,omitzero"`
	// OldestDeadAt is when the lowest-id dead letter was dead-lettered.
	OldestDeadAt time.Time `json:"oldest_dead_at,omitzero"`
}

func (a *app) queueStatsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "stats FILE",
		Short: "Count a queue's pending items and dead letters",
	}
	pathArg := addFileArg(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		path, err := pathArg(args)
		if err != nil {
			return err
		}
		q, err := a.openQueue(path, false)
		if err != nil {
			return err
		}
		defer q.Close()
		st, err := q.Stats(ctx)
		if err != nil {
			return err
		}
		v := queueStatsView{Path: path, Format: q.format, FileBytes: fileSize(path), Pending: st.Pending, DeadLetters: st.DeadLetters}
		head, err := q.Peek(ctx, 0, 1)
		if err != nil {
			return err
		}
		if len(head) > 0 {
			v.OldestPendingAt = head[0].EnqueuedAt.UTC()
		}
		dead, err := q.DeadLetters(ctx, 0, 1)
		if err != nil {
			return err
		}
		if len(dead) > 0 {
			v.OldestDeadAt = dead[0].DeadAt.UTC()
		}
		if a.json {
			return printJSON(a.stdout, v)
		}
		pending := strconv.Itoa(v.Pending)
		if !v.OldestPendingAt.IsZero() {
			pending += fmt.Sprintf(" (oldest enqueued %s, %s ago)", stamp(v.OldestPendingAt), a.now().Sub(v.OldestPendingAt).Round(time.Second))
		}
		dl := strconv.Itoa(v.DeadLetters)
		if !v.OldestDeadAt.IsZero() {
			dl += fmt.Sprintf(" (first dead-lettered %s; syncctl queue dead lists them)", stamp(v.OldestDeadAt))
		}
		return fields(a.stdout,
			[2]string{"path", v.Path},
			[2]string{"format", fmt.Sprintf("%s, %d bytes", v.Format, v.FileBytes)},
			[2]string{"pending", pending},
			[2]string{"dead letters", dl},
		)
	}
	return cmd
}
