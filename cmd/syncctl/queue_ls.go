package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/client/offlinequeue"
)

// listFlags page through a queue listing.
type listFlags struct {
	after offlinequeue.ID
	limit int
}

func addListFlags(cmd *cobra.Command) *listFlags {
	f := &listFlags{}
	cmd.Flags().Uint64Var((*uint64)(&f.after), "after", 0, "start after this item id (the last id of the previous page)")
	cmd.Flags().IntVar(&f.limit, "limit", 50, "at most this many items; 0 lists them all")
	return f
}

// pageSize is how many items one read fetches when listing.
const pageSize = 500

// collect reads up to f.limit entries after f.after with read, page by
// page, and reports whether more follow.
func collect[T any](f *listFlags, read func(after offlinequeue.ID, n int) ([]T, error), id func(T) offlinequeue.ID) ([]T, bool, error) {
	if f.limit < 0 {
		return nil, false, failf(exitUsage, "--limit must not be negative")
	}
	var out []T
	after := f.after
	for f.limit == 0 || len(out) <= f.limit {
		n := pageSize
		if f.limit > 0 {
			n = min(n, f.limit+1-len(out))
		}
		page, err := read(after, n)
		if err != nil {
			return nil, false, err
		}
		out = append(out, page...)
		if len(page) < n {
			break
		}
		after = id(page[len(page)-1])
	}
	if f.limit > 0 && len(out) > f.limit {
		return out[:f.limit], true, nil
	}
	return out, false, nil
}

func (a *app) queueListCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls FILE",
		Aliases: []string{"list"},
		Short:   "List pending items in delivery order, with attempts and keys",
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
		items, more, err := collect(lf, func(after offlinequeue.ID, n int) ([]offlinequeue.Item, error) {
			return q.Peek(ctx, after, n)
		}, func(it offlinequeue.Item) offlinequeue.ID { return it.ID })
		if err != nil {
			return err
		}
		views := make([]itemView, len(items))
		for i, it := range items {
			views[i] = viewItem(it)
		}
		if a.json {
			return printJSON(a.stdout, views)
		}
		t := newTable(a.stdout, "ID", "ENQUEUED", "ATTEMPTS", "OP ID", "WRITE")
		for _, v := range views {
			t.row(strconv.FormatUint(uint64(v.ID), 10), stamp(v.EnqueuedAt), strconv.FormatUint(uint64(v.Attempts), 10), v.Key, v.describe())
		}
		if err := t.flush(); err != nil {
			return err
		}
		moreHint(a, more, views, func(v itemView) offlinequeue.ID { return v.ID })
		return nil
	}
	return cmd
}

// moreHint tells people on stderr how to see the next page.
func moreHint[T any](a *app, more bool, shown []T, id func(T) offlinequeue.ID) {
	if more && len(shown) > 0 {
		fmt.Fprintf(a.stderr, "more items follow: --after %d for the next page, --limit 0 for all\n", id(shown[len(shown)-1]))
	}
}
