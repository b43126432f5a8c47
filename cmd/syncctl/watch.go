package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/client"
)

// changeView is one line of syncctl watch --json.
type changeView struct {
	Model   string          `json:"model,omitempty"`
	Key     string          `json:"key,omitempty"`
	Version uint64          `json:"version,omitempty"`
	Deleted bool            `json:"deleted,omitempty"`
	Value   json.RawMessage `json:"value,omitempty"`
	// Resync says the replica was replaced by a snapshot: changes in
	// between are not listed one by one.
	Resync bool `json:"resync,omitempty"`
	// Lagged says watch fell behind and events were dropped.
	Lagged bool `json:"lagged,omitempty"`
}

// watchRowFormat is the fixed-width layout of watch's human output.
const watchRowFormat = "%7s  %-6s  %-32s  %s\n"

func (a *app) watchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Print changes from the server's feed as a small client, until interrupted",
		Long: `Sync a replica with the server, then print every change the feed delivers
(version, op, model/key, value) until interrupted; exit status 0 then. With
--json, one JSON object per line.`,
		Args: exactArgs(0, "no arguments"),
	}
	f := addClientFlags(cmd)
	var model string
	cmd.Flags().StringVar(&model, "model", "", "only changes of this model")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		d, err := a.openDevice(ctx, cmd, f)
		if err != nil {
			return err
		}
		defer d.Close()
		if err := d.waitSynced(ctx, f.timeout); err != nil {
			return err
		}
		sub := d.c.Changes()
		defer sub.Close()
		// A refusal only the user can fix (a revoked or expired token)
		// ends watch with its exit status, as it ends put and get.
		statusCtx, stopStatus := context.WithCancel(ctx)
		defer stopStatus()
		status := d.c.WatchStatus(statusCtx)
		fmt.Fprintf(a.stderr, "watching %s as %s; Ctrl-C to stop\n", d.url, d.id)
		if !a.json {
			fmt.Fprintf(a.stdout, watchRowFormat, "VERSION", "OP", "MODEL/KEY", "VALUE")
		}
		for {
			select {
			case <-ctx.Done():
				return nil
			case st, ok := <-status:
				if !ok {
					return nil
				}
				// A transient refusal (busy) never ends watch: the client
				// retries it by itself.
				if err := refusalFailure(d.url, st.LastError, math.MaxInt64); err != nil {
					return err
				}
			case ev, ok := <-sub.C:
				if !ok {
					return nil
				}
				if model != "" && !ev.Resync && !ev.Lagged && ev.Model != model {
					continue
				}
				if err := a.printChange(ctx, d, ev); err != nil {
					return err
				}
			}
		}
	}
	return cmd
}

// printChange prints one change event, with the record's value when the
// replica still holds that version.
func (a *app) printChange(ctx context.Context, d *device, ev client.ChangeEvent) error {
	v := changeView{Model: ev.Model, Key: ev.Key, Version: ev.Version, Deleted: ev.Deleted, Resync: ev.Resync, Lagged: ev.Lagged}
	if !ev.Deleted && !ev.Resync && !ev.Lagged {
		rec, found, err := d.c.Get(ctx, ev.Model, ev.Key)
		if err != nil {
			return err
		}
		if found && !rec.Pending && rec.Version == ev.Version {
			v.Value = rec.Value
		}
	}
	if a.json {
		return printJSONLine(a.stdout, v)
	}
	var err error
	switch {
	case ev.Resync:
		_, err = fmt.Fprintln(a.stdout, "-- resync: the replica was replaced by the server's snapshot; changes in between are not listed")
	case ev.Lagged:
		_, err = fmt.Fprintln(a.stdout, "-- fell behind: some changes were not listed")
	default:
		op := "put"
		if ev.Deleted {
			op = "delete"
		}
		value := "-"
		var compact bytes.Buffer
		if len(v.Value) > 0 && json.Compact(&compact, v.Value) == nil {
			value = compact.String()
		}
		_, err = fmt.Fprintf(a.stdout, watchRowFormat, strconv.FormatUint(ev.Version, 10), op, cell(ev.Model+"/"+ev.Key), cell(value))
	}
	return err
}
