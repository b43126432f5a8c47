package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/adminapi"
)

// oplogPageLimit is how many entries one admin request asks for.
const oplogPageLimit = 500

func (a *app) oplogCommand() *cobra.Command {
	return groupWithDefault("oplog", "Read the server's oplog", a.oplogTailCommand)
}

type oplogTailFlags struct {
	from     uint64
	lines    uint64
	model    string
	tenant   string
	follow   bool
	interval time.Duration
}

func (a *app) oplogTailCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tail",
		Short: "Print the newest oplog entries, and with --follow every new one",
		Long: `Print oplog entries in sequence order: by default the last --lines entries
before the head, or every entry after --from SEQ. --model and --tenant filter
(the window of --lines is counted over all entries before filtering).
--follow keeps polling for new entries until interrupted (exit status 0).

Values are not printed in the table; --json prints whole entries, one JSON
object per line.`,
		Args: exactArgs(0, "no arguments"),
	}
	o := addAdminFlags(cmd)
	var f oplogTailFlags
	cmd.Flags().Uint64Var(&f.from, "from", 0, "print the entries after this seq (default: the last --lines entries)")
	cmd.Flags().Uint64VarP(&f.lines, "lines", "n", 10, "without --from, how many entries before the head to start at")
	cmd.Flags().StringVar(&f.model, "model", "", "only entries of this model")
	cmd.Flags().StringVar(&f.tenant, "tenant", "", "only entries of this tenant")
	cmd.Flags().BoolVarP(&f.follow, "follow", "f", false, "keep printing new entries until interrupted")
	cmd.Flags().DurationVar(&f.interval, "interval", time.Second, "with --follow, how often to poll for new entries")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := a.adminClient(cmd, o)
		if err != nil {
			return err
		}
		if f.interval <= 0 {
			return failf(exitUsage, "--interval must be positive")
		}
		ctx := cmd.Context()
		after := f.from
		if !cmd.Flags().Changed("from") {
			var st adminapi.Status
			if err := c.get(ctx, adminapi.PathStatus, nil, &st); err != nil {
				return err
			}
			after = max(st.OplogHead, f.lines) - f.lines
			if st.OplogOldest > 0 {
				after = max(after, st.OplogOldest-1)
			}
			after = max(after, st.OplogFloor) // retention is per tenant: below it, some tenant's entries are gone
		}
		err = a.tailOplog(ctx, c, f, after)
		if f.follow && interrupted(ctx, err) {
			return nil // the usual way to stop following
		}
		return err
	}
	return cmd
}

// tailOplog prints the entries after cursor until caught up, then, when
// following, polls every interval until ctx ends.
func (a *app) tailOplog(ctx context.Context, c *adminClient, f oplogTailFlags, cursor uint64) error {
	q := url.Values{"limit": {strconv.Itoa(oplogPageLimit)}}
	if f.model != "" {
		q.Set("model", f.model)
	}
	if f.tenant != "" {
		q.Set("tenant", f.tenant)
	}
	header := !a.json
	tick := time.NewTicker(f.interval)
	defer tick.Stop()
	for {
		q.Set("from", strconv.FormatUint(cursor, 10))
		var page adminapi.OplogPage
		if err := c.get(ctx, adminapi.PathOplog, q, &page); err != nil {
			if r, ok := errors.AsType[*refusal](err); ok && r.status == http.StatusConflict {
				return failf(exitNotFound, "seq %d is outside the retained oplog: pass a newer --from, or omit it (%s)", cursor, r.msg)
			}
			return err
		}
		if header {
			a.printOplogHeader()
			header = false
		}
		for _, e := range page.Entries {
			if err := a.printOplogEntry(e); err != nil {
				return err
			}
		}
		cursor = page.Next
		if page.Next < page.Head {
			continue
		}
		if !f.follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// The oplog's human layout has fixed widths, so pages printed while
// following line up with the first.
const oplogRowFormat = "%8s  %-20s  %-6s  %7s  %-36s  %-24s  %s\n"

func (a *app) printOplogHeader() {
	fmt.Fprintf(a.stdout, oplogRowFormat, "SEQ", "APPLIED", "OP", "VERSION", "OP ID", "TENANT/CLIENT", "MODEL/KEY")
}

func (a *app) printOplogEntry(e adminapi.OplogEntry) error {
	if a.json {
		return printJSONLine(a.stdout, e)
	}
	_, err := fmt.Fprintf(a.stdout, oplogRowFormat, strconv.FormatUint(e.Seq, 10), stamp(e.AppliedAt), string(e.Op),
		strconv.FormatUint(e.Version, 10), e.OpID, cell(e.Tenant+"/"+e.ClientID), cell(e.Model+"/"+e.Key))
	return err
}
