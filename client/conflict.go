package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/syncd-dev/syncd/syncproto"
)

// Conflict is a write the server refused because its base version was
// stale (optimistic policy): another write got there first.
type Conflict struct {
	OpID        string
	Model, Key  string
	Value       json.RawMessage // what this device tried to write (nil for a delete)
	Delete      bool
	BaseVersion uint64 // the version it was written over
	// Winner is the state that stands. When Winner.ValueWithheld is true
	// the winning record has a scope value this device's principal is
	// not granted (PROTOCOL.md 19.2): Value is nil, and no resend ever
	// fetches it; Version, HLC and Deleted are exact. A handler may still
	// Rebase over it (the server then checks the write's scope values
	// again) or Drop.
	Winner syncproto.Winner
}

// Resolution is a conflict handler's decision: Rebase or Drop.
type Resolution struct {
	rebase bool
	value  json.RawMessage
}

// Rebase writes value over the winner (a PutIfVersion at the winner's
// version). The rebased write's op id is derived from the refused one, so
// answering the same conflict twice queues it once.
func Rebase(value json.RawMessage) Resolution { return Resolution{rebase: true, value: value} }

// Drop gives the write up; the winner stands. Its outcome stays recorded.
func Drop() Resolution { return Resolution{} }

// ConflictHandler decides an optimistic conflict. It runs on the sync
// driver's goroutine: keep it short, and do not call Sync from it.
type ConflictHandler func(ctx context.Context, c Conflict) Resolution

// resolveConflict asks the handler and performs its decision. A handler
// that panics drops the write (the panic is logged).
func (c *Client) resolveConflict(ctx context.Context, m *syncproto.Mutation, o Outcome) (Outcome, error) {
	if o.Winner == nil {
		return o, fmt.Errorf("conflict on %s without a winner", m.OpID)
	}
	conflict := Conflict{OpID: m.OpID, Model: m.Model, Key: m.Key, Value: m.Value, Delete: m.Op == syncproto.OpDelete, Winner: *o.Winner}
	if m.BaseVersion != nil {
		conflict.BaseVersion = *m.BaseVersion
	}
	res := c.askHandler(ctx, conflict)
	if !res.rebase {
		return o, nil
	}
	version := o.Winner.Version
	rebased := syncproto.Mutation{OpID: rebasedOpID(m.OpID), Model: m.Model, Key: m.Key, Op: syncproto.OpPut,
		Value: res.value, BaseVersion: &version, HLC: c.stamp(), ValueVersion: c.valueVersion(m.Model)}
	if err := c.enqueue(ctx, &rebased); err != nil {
		return o, fmt.Errorf("rebase %s: %w", m.OpID, err)
	}
	o.RebasedAs = rebased.OpID
	return o, nil
}

func (c *Client) askHandler(ctx context.Context, conflict Conflict) (res Resolution) {
	h := c.cfg.ConflictHandler
	if h == nil {
		return Drop()
	}
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("conflict handler panicked; dropping the write", "op_id", conflict.OpID, "panic", fmt.Sprint(p))
			res = Drop()
		}
	}()
	return h(ctx, conflict)
}
