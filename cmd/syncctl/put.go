package main

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/client"
)

// outcomeView is the --json output of syncctl put.
type outcomeView struct {
	OpID    string               `json:"op_id"`
	Model   string               `json:"model"`
	Key     string               `json:"key"`
	Status  client.OutcomeStatus `json:"status"`
	Version uint64               `json:"version,omitempty"`
	Seq     uint64               `json:"seq,omitempty"`
	// WinnerVersion is the version that stands when the write was
	// superseded or refused as a conflict.
	WinnerVersion uint64 `json:"winner_version,omitempty"`
	Reason        string `json:"reason,omitempty"`
}

func (a *app) putCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "put MODEL KEY VALUE",
		Short: "Write a JSON value as a small client and wait for the server's decision",
		Long: `Write VALUE (JSON: quote strings, as in '"text"') under MODEL/KEY through the
client library, as an app would, and wait for the outcome. Exit status 0 when
applied, 7 when the server decided against it (superseded, conflict,
dead-lettered). --if-version N writes only if the server's record is at
version N (0: the key must not exist), as optimistic models require.`,
		Args: exactArgs(3, "MODEL KEY VALUE"),
	}
	f := addClientFlags(cmd)
	var ifVersion uint64
	cmd.Flags().Uint64Var(&ifVersion, "if-version", 0, "write only if the record is at this version (0: must not exist)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		model, key, value := args[0], args[1], json.RawMessage(args[2])
		if !json.Valid(value) {
			return failf(exitUsage, "VALUE must be JSON (quote a string: '\"%s\"')", args[2])
		}
		ctx := cmd.Context()
		d, err := a.openDevice(ctx, cmd, f)
		if err != nil {
			return err
		}
		defer d.Close()
		// Write once the first replay pass is over: a write made while a
		// pass runs can be decided before the client records it as
		// pending, and its outcome is then never announced (a client
		// race, reported).
		if err := d.waitSynced(ctx, f.timeout); err != nil {
			return err
		}
		var opID string
		if cmd.Flags().Changed("if-version") {
			opID, err = d.c.PutIfVersion(ctx, model, key, value, ifVersion)
		} else {
			opID, err = d.c.Put(ctx, model, key, value)
		}
		if err != nil {
			return failf(exitUsage, "put %s/%s: %v", model, key, err)
		}
		waitCtx, cancel := context.WithTimeout(ctx, f.timeout)
		defer cancel()
		o, err := d.c.Await(waitCtx, opID)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return err
			}
			var refused *client.RefusedError
			if errors.As(err, &refused) {
				code := exitNotApplied
				if errors.Is(err, client.ErrUnauthorized) {
					code = exitUnauthorized
				}
				return failf(code, "%s/%s not applied: %v; it stays queued in %s", model, key, refused, d.dir)
			}
			kept := "it stays queued in " + d.dir
			if d.scratch {
				kept = "it is discarded with the temporary state (pass --state DIR to keep it)"
			}
			return failf(exitFailure, "no decision for %s within %s; %s", opID, f.timeout, kept)
		}
		v := outcomeView{OpID: opID, Model: model, Key: key, Status: o.Status, Version: o.Version, Seq: o.Seq, Reason: o.Reason}
		if o.Winner != nil {
			v.WinnerVersion = o.Winner.Version
		}
		if a.json {
			err = printJSON(a.stdout, v)
		} else {
			err = fields(a.stdout,
				[2]string{"op id", opID},
				[2]string{"record", model + "/" + key},
				[2]string{"outcome", describeOutcome(o)},
			)
		}
		if err == nil && o.Status != client.StatusApplied {
			err = failf(exitNotApplied, "the server did not apply %s/%s: %s", model, key, describeOutcome(o))
		}
		return err
	}
	return cmd
}
