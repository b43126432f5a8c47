package main

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/spf13/cobra"
)

// recordView is the --json output of syncctl get.
type recordView struct {
	Model   string          `json:"model"`
	Key     string          `json:"key"`
	Version uint64          `json:"version"`
	Value   json.RawMessage `json:"value"`
	// Pending is true when the value is a write of this device's state
	// directory that the server has not decided yet.
	Pending bool `json:"pending"`
}

func (a *app) getCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get MODEL KEY",
		Short: "Read a record as a small client, after syncing with the server",
		Long: `Sync a replica with the server (a fresh one loads the server's snapshot),
then read MODEL/KEY from it. Exit status 5 when the record does not exist.`,
		Args: exactArgs(2, "MODEL KEY"),
	}
	f := addClientFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		model, key := args[0], args[1]
		ctx := cmd.Context()
		d, err := a.openDevice(ctx, cmd, f)
		if err != nil {
			return err
		}
		defer d.Close()
		if err := d.waitSynced(ctx, f.timeout); err != nil {
			return err
		}
		rec, found, err := d.c.Get(ctx, model, key)
		if err != nil {
			return failf(exitUsage, "get %s/%s: %v", model, key, err)
		}
		if !found {
			return failf(exitNotFound, "%s/%s does not exist (or is deleted) on %s", model, key, d.url)
		}
		v := recordView{Model: rec.Model, Key: rec.Key, Version: rec.Version, Value: rec.Value, Pending: rec.Pending}
		if a.json {
			return printJSON(a.stdout, v)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, rec.Value); err != nil {
			compact.Write(rec.Value)
		}
		return fields(a.stdout,
			[2]string{"record", model + "/" + key},
			[2]string{"version", strconv.FormatUint(rec.Version, 10)},
			[2]string{"pending", yesNo(rec.Pending)},
			[2]string{"value", compact.String()},
		)
	}
	return cmd
}
