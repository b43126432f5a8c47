package main

import (
	"strconv"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

func (a *app) queueDeadCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dead FILE",
		Short: "List dead letters with the reason each was given up on",
		Long: `List dead letters in id order with their reason. The client library writes
the server's refusal as "CODE: message" (for example "forbidden_model: ..."),
or "expired: ..." for a write older than the server's replay ledger covers.`,
	}
	pathArg := addFileArg(cmd)
	lf := addListFlags(cmd)
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
		letters, more, err := collect(lf, func(after offlinequeue.ID, n int) ([]offlinequeue.DeadLetter, error) {
			return q.DeadLetters(ctx, after, n)
		}, func(d offlinequeue.DeadLetter) offlinequeue.ID { return d.ID })
		if err != nil {
			return err
		}
		views := make([]deadView, len(letters))
		for i, d := range letters {
			views[i] = deadView{itemView: viewItem(d.Item), Reason: d.Reason, DeadAt: d.DeadAt.UTC()}
		}
		if a.json {
			return printJSON(a.stdout, views)
		}
		t := newTable(a.stdout, "ID", "DEAD AT", "ATTEMPTS", "OP ID", "WRITE", "REASON")
		for _, v := range views {
			t.row(strconv.FormatUint(uint64(v.ID), 10), stamp(v.DeadAt), strconv.FormatUint(uint64(v.Attempts), 10), v.Key, v.describe(), v.Reason)
		}
		if err := t.flush(); err != nil {
			return err
		}
		moreHint(a, more, views, func(v deadView) offlinequeue.ID { return v.ID })
		return nil
	}
	return cmd
}
