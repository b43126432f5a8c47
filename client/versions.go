package client

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/client/synccore"
	"github.com/syncd-dev/syncd/internal/crashpoint"
	"github.com/syncd-dev/syncd/syncproto"
)

// PausedModel is a model whose writes wait, queued and in order, because
// the server does not accept their value version (Status.Paused): the
// device is newer than the server, or older than any version the server
// still upcasts. None of its writes is sent until a welcome (on a
// reconnect) lists Version; the other models keep syncing. Nothing is
// dead-lettered for a version reason.
type PausedModel = synccore.PausedModel

// VersionBackwardsError is returned by Open when Config.ModelVersions
// declares a model's value version lower than one this replica was opened
// with before: the writes queued at the newer version would be read by
// code that knows only the older shape.
type VersionBackwardsError struct {
	Model    string
	Declared uint64 // Config.ModelVersions now
	Recorded uint64 // the highest declared by an earlier Open of this replica
}

func (e *VersionBackwardsError) Error() string {
	return fmt.Sprintf("model %s: value version %d declared, but this replica was opened at version %d; a build never moves a model's version backwards",
		e.Model, e.Declared, e.Recorded)
}

// validateModelVersions checks Config.ModelVersions.
func validateModelVersions(vs map[string]uint64) error {
	for model, v := range vs {
		if err := syncproto.ValidateModel(model); err != nil {
			return fmt.Errorf("field ModelVersions: %w", err)
		}
		if v < 1 || v > syncproto.MaxValueVersion {
			return fmt.Errorf("field ModelVersions[%s] = %d, want 1..%d", model, v, syncproto.MaxValueVersion)
		}
	}
	return nil
}

// valueVersion is the value_version a write of model carries: the
// declared version, or 0 (absent, which means 1) when it declares none or
// 1, so an app that never versions its models sends what it always sent.
func (c *Client) valueVersion(model string) uint64 {
	if v := c.cfg.ModelVersions[model]; v > 1 {
		return v
	}
	return 0
}

// metaValueVersion names the meta row recording a model's declared value
// version.
func metaValueVersion(model string) string { return "value_version:" + model }

// recordModelVersions refuses a declared version below the one recorded
// by an earlier Open (*VersionBackwardsError), then records the declared
// ones, in one transaction (the queue's committer's when the replica is in
// the queue's file, like every other replica write).
func (r *replica) recordModelVersions(ctx context.Context, declared map[string]uint64) error {
	if len(declared) == 0 {
		return nil
	}
	models := make([]string, 0, len(declared))
	for m := range declared {
		models = append(models, m)
	}
	slices.Sort(models)
	if err := r.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for _, m := range models {
			recorded, err := r.meta(ctx, tx, metaValueVersion(m))
			if err != nil {
				return err
			}
			if declared[m] < recorded {
				return &VersionBackwardsError{Model: m, Declared: declared[m], Recorded: recorded}
			}
			if err := setMeta(ctx, tx, metaValueVersion(m), declared[m]); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	crashpoint.Reach("model versions recorded")
	return nil
}

// pendingPage is how many queued writes Pending reads at once.
const pendingPage = 500

// Pending returns how many writes are still queued (not yet decided by
// the server, nor dead-lettered), by model. A queued payload this client
// cannot decode is counted under "". It reads the whole queue, a page at
// a time.
func (c *Client) Pending(ctx context.Context) (map[string]int, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	out := map[string]int{}
	var after offlinequeue.ID
	for {
		items, err := c.queue.Peek(ctx, after, pendingPage)
		if err != nil {
			return nil, fmt.Errorf("client: pending: %w", err)
		}
		for _, it := range items {
			model := ""
			if m, err := decodeMutation(it.Payload); err == nil {
				model = m.Model
			}
			out[model]++
			after = it.ID
		}
		if len(items) < pendingPage {
			return out, nil
		}
	}
}

// Drain returns nil once every write queued when it is called, and every
// one queued while it waits, has an outcome (applied, superseded,
// conflict handled, or dead-lettered): the queue is empty. Writes of a
// paused model (Status.Paused) count: Drain waits for a server that
// accepts them. It returns ctx's error when ctx ends first, and ErrClosed
// when the client closes. Use it before a release that changes a model's
// value shape, so that no write of the old shape is left to upcast.
func (c *Client) Drain(ctx context.Context) error {
	if c.isClosed() {
		return ErrClosed
	}
	watch, stop := context.WithCancel(ctx)
	defer stop()
	ch := c.WatchStatus(watch)
	for {
		st, err := c.queue.Stats(ctx)
		if err != nil {
			return fmt.Errorf("client: drain: %w", err)
		}
		if st.Pending == 0 {
			return nil
		}
		select {
		case s, ok := <-ch:
			if !ok || s.State == synccore.StateClosed {
				if err := ctx.Err(); err != nil {
					return err
				}
				return ErrClosed
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
