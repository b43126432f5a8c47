package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/syncproto"
)

func (a *app) queueCommand() *cobra.Command {
	cmd := group("queue", "Inspect and repair a device's queue file (NDJSON or SQLite)",
		a.queueStatsCommand(),
		a.queueListCommand(),
		a.queueDeadCommand(),
		a.queueRequeueCommand(),
		a.queuePurgeCommand(),
	)
	cmd.Long = `Open a device's queue file without a running client. The format (NDJSON
file or SQLite database) is detected from the file's first bytes; a missing
file is never created.

stats, ls and dead read an NDJSON queue from a private copy, so the file is
left exactly as it is and a client may keep running. requeue and purge change
the queue: stop the app first (an NDJSON queue's lock enforces it; a SQLite
queue has no lock).`
	return cmd
}

// addPathFlag adds the --path flag every queue command requires.
func addPathFlag(cmd *cobra.Command) *string {
	var path string
	cmd.Flags().StringVar(&path, "path", "", "the device's queue file (required)")
	cmd.MarkFlagRequired("path")
	return &path
}

// addFileArg lets a command whose subject is one queue file take it as its
// one argument (syncctl queue stats FILE) or as --path; the returned func
// resolves the two after parsing.
func addFileArg(cmd *cobra.Command) func(args []string) (string, error) {
	var path string
	cmd.Flags().StringVar(&path, "path", "", "the device's queue file (or give it as the argument)")
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) > 1 {
			return failf(exitUsage, "%s takes one queue FILE, got %d arguments (see %s --help)", cmd.CommandPath(), len(args), cmd.CommandPath())
		}
		return nil
	}
	return func(args []string) (string, error) {
		switch {
		case len(args) == 1 && path != "" && args[0] != path:
			return "", failf(exitUsage, "the queue file is given twice: %q and --path %q", args[0], path)
		case len(args) == 1:
			return args[0], nil
		case path != "":
			return path, nil
		}
		return "", failf(exitUsage, "name the device's queue file: %s FILE (or --path FILE)", cmd.CommandPath())
	}
}

// itemView is one pending item in --json output. The payload itself is not
// printed: Write describes it when it is a syncd write.
type itemView struct {
	ID           offlinequeue.ID `json:"id"`
	Key          string          `json:"key"`
	Attempts     uint32          `json:"attempts"`
	EnqueuedAt   time.Time       `json:"enqueued_at"`
	PayloadBytes int             `json:"payload_bytes"`
	// Write is nil when the payload is not a syncd write (syncproto
	// mutation); PayloadError then says why.
	Write        *writeView `json:"write,omitempty"`
	PayloadError string     `json:"payload_error,omitempty"`
}

// writeView is what a queued syncd write does, without its value.
type writeView struct {
	OpID        string              `json:"op_id"`
	Model       string              `json:"model"`
	Key         string              `json:"key"`
	Op          syncproto.Op        `json:"op"`
	BaseVersion *uint64             `json:"base_version,omitempty"`
	HLC         syncproto.Timestamp `json:"hlc"`
}

// deadView is one dead letter in --json output.
type deadView struct {
	itemView
	Reason string    `json:"reason"`
	DeadAt time.Time `json:"dead_at"`
}

func viewItem(it offlinequeue.Item) itemView {
	v := itemView{ID: it.ID, Key: it.Key, Attempts: uint32(it.Attempts), EnqueuedAt: it.EnqueuedAt.UTC(), PayloadBytes: len(it.Payload)}
	m, err := decodeWrite(it.Payload)
	if err != nil {
		v.PayloadError = err.Error()
		return v
	}
	v.Write = &writeView{OpID: m.OpID, Model: m.Model, Key: m.Key, Op: m.Op, BaseVersion: m.BaseVersion, HLC: m.HLC}
	return v
}

// decodeWrite parses a queued payload as the client library writes it: one
// JSON syncproto mutation.
func decodeWrite(payload []byte) (*syncproto.Mutation, error) {
	var m syncproto.Mutation
	if err := json.Unmarshal(payload, &m); err != nil {
		return nil, fmt.Errorf("not a syncd write: %v", err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("not a valid syncd write: %v", err)
	}
	return &m, nil
}

// describe says what a queued item does, for a table cell.
func (v itemView) describe() string {
	if v.Write == nil {
		return fmt.Sprintf("(opaque payload, %d bytes)", v.PayloadBytes)
	}
	s := string(v.Write.Op) + " " + v.Write.Model + "/" + v.Write.Key
	if v.Write.BaseVersion != nil {
		s += fmt.Sprintf(" if v%d", *v.Write.BaseVersion)
	}
	return s
}

// parseIDs parses item ids given as arguments, sorted, without repeats.
func parseIDs(args []string) ([]offlinequeue.ID, error) {
	ids := make([]offlinequeue.ID, 0, len(args))
	for _, s := range args {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			return nil, failf(exitUsage, "%q is not an item id (a positive integer, as syncctl queue dead shows)", s)
		}
		ids = append(ids, offlinequeue.ID(n))
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// deadLetterSelection is the dead letters a requeue or purge acts on: all
// of them, or the listed ids.
type deadLetterSelection struct {
	all bool
	ids []offlinequeue.ID
}

func addSelectionFlags(cmd *cobra.Command) (all *bool, batch *int, mode *progressMode) {
	all, batch, mode = new(bool), new(int), new(progressMode)
	*mode = progressAuto
	cmd.Flags().BoolVar(all, "all", false, "act on every dead letter (instead of the ids given)")
	cmd.Flags().IntVar(batch, "batch", 1000, "dead letters per atomic step; an interrupt stops between steps")
	cmd.Flags().Var(mode, "progress", "progress bar on stderr: auto (only on a terminal), always or never")
	return all, batch, mode
}

// selection validates the ids or --all of a requeue or purge. Every named
// id must be a dead letter, so a typo changes nothing.
func selection(ctx context.Context, q offlinequeue.Queue, path string, all bool, args []string) (deadLetterSelection, error) {
	if all == (len(args) > 0) {
		return deadLetterSelection{}, failf(exitUsage, "name the dead letters: --all, or their ids as arguments (not both)")
	}
	if all {
		return deadLetterSelection{all: true}, nil
	}
	ids, err := parseIDs(args)
	if err != nil {
		return deadLetterSelection{}, err
	}
	var missing []string
	for _, id := range ids {
		page, err := q.DeadLetters(ctx, id-1, 1)
		if err != nil {
			return deadLetterSelection{}, err
		}
		if len(page) == 0 || page[0].ID != id {
			missing = append(missing, strconv.FormatUint(uint64(id), 10))
		}
	}
	if len(missing) > 0 {
		return deadLetterSelection{}, failf(exitNotFound, "%s holds no dead letter with id %s (see syncctl queue dead); nothing was changed", path, strings.Join(missing, ", "))
	}
	return deadLetterSelection{ids: ids}, nil
}

// forDeadLetters hands the selected dead letters to apply (Requeue or
// Purge) in batches of at most batch ids, each one atomic call, and draws
// progress after each. It stops between batches when ctx ends, returning
// ctx's error and how many it handed over: every batch is either done or
// not, so the queue is consistent whenever it stops.
func forDeadLetters(ctx context.Context, q offlinequeue.Queue, sel deadLetterSelection, batch int, p *progress, apply func(context.Context, ...offlinequeue.ID) error) (int, error) {
	done := 0
	var after offlinequeue.ID
	p.set(0)
	defer p.end()
	for {
		if err := ctx.Err(); err != nil {
			return done, err
		}
		var ids []offlinequeue.ID
		if sel.all {
			page, err := q.DeadLetters(ctx, after, batch)
			if err != nil {
				return done, err
			}
			for _, d := range page {
				ids = append(ids, d.ID)
			}
		} else {
			ids = sel.ids[done:min(done+batch, len(sel.ids))]
		}
		if len(ids) == 0 {
			return done, nil
		}
		if err := apply(ctx, ids...); err != nil {
			return done, err
		}
		after = ids[len(ids)-1]
		done += len(ids)
		p.set(done)
	}
}

// deadLetterRun is what a requeue or purge did.
type deadLetterRun struct {
	total, done, batch int
	before, after      offlinequeue.Stats
	interrupted        bool
}

// onDeadLetters opens the queue at path for writing, checks the selection
// (--all or ids) and hands it to op(q) in atomic batches with a progress
// bar labelled verb. An interrupt between batches is not an error here:
// the run reports it, and err() turns it into the exit status.
func (a *app) onDeadLetters(ctx context.Context, path string, all bool, args []string, batch int, mode progressMode, verb string,
	op func(offlinequeue.Queue) func(context.Context, ...offlinequeue.ID) error) (deadLetterRun, error) {
	if batch <= 0 {
		return deadLetterRun{}, failf(exitUsage, "--batch must be positive")
	}
	q, err := a.openQueue(path, true)
	if err != nil {
		return deadLetterRun{}, err
	}
	defer q.Close()
	sel, err := selection(ctx, q, path, all, args)
	if err != nil {
		return deadLetterRun{}, err
	}
	r := deadLetterRun{batch: batch, total: len(sel.ids)}
	if r.before, err = q.Stats(ctx); err != nil {
		return r, err
	}
	if sel.all {
		r.total = r.before.DeadLetters
	}
	var runErr error
	r.done, runErr = forDeadLetters(ctx, q, sel, batch, a.newProgress(mode, verb, r.total), op(q))
	r.interrupted = interrupted(ctx, runErr)
	if runErr != nil && !r.interrupted {
		return r, runErr
	}
	r.after, err = q.Stats(context.WithoutCancel(ctx))
	return r, err
}

// err is the run's exit status: interrupted, or nil.
func (r deadLetterRun) err() error {
	if !r.interrupted {
		return nil
	}
	return failf(exitInterrupted, "interrupted after %d of %d dead letters; each batch of %d is atomic, so the queue is consistent: run the command again to finish", r.done, r.total, r.batch)
}
