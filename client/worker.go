package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/syncproto"
)

// DefaultInFlight is how many push batches the worker keeps in flight.
const DefaultInFlight = 4

// worker replays the queue through one connection (the sync worker of
// DESIGN 3 and 4.2). It pages through the queue in enqueue order, never
// loading it whole, keeps up to inFlight batches in flight, and acts on
// each result in order: mark done, charge an attempt, dead-letter, hand a
// conflict to the app, or leave the item for a later run.
type worker struct {
	c *Client
}

// replayReport counts what one replay did.
type replayReport struct {
	sent, done, charged, deadLettered, conflicts, restamped, left int
	complete                                                      bool // every item seen was decided or charged
}

// flight is one push batch in the air.
type flight struct {
	items   []offlinequeue.Item
	muts    []syncproto.Mutation
	results []syncproto.Result
	err     error
	done    chan struct{}
}

// replay runs one pass over the queue. It returns an error only when the
// connection failed (items not answered stay queued, charged nothing) or the
// local stores failed.
func (w worker) replay(ctx context.Context, c *conn) (replayReport, error) {
	var rep replayReport
	batch := min(c.welcome.Limits.MaxBatch, syncproto.MaxBatch)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	flights := make(chan *flight, w.c.cfg.InFlight)
	produceErr := make(chan error, 1)
	go func() {
		defer close(flights)
		produceErr <- w.produce(ctx, c, batch, flights)
	}()

	// Answers that arrived are acted on in full even when the connection
	// fails or the link is stopped meanwhile: the bookkeeping is local and
	// short, and a delivered write left half-settled would be resent.
	settleCtx := context.WithoutCancel(ctx)
	var retry []pendingWrite // clock-skew refusals to re-stamp
	var failed error
	storesFailed := false
	for f := range flights {
		<-f.done
		if f.err == nil {
			f.err = w.fetchOmitted(ctx, c, f.muts, f.results)
		}
		if f.err != nil {
			// Later pushes are cancelled; their writes stay queued, uncharged.
			if failed == nil {
				failed = f.err
				cancel()
			}
			continue
		}
		if storesFailed {
			continue
		}
		r, err := w.settle(settleCtx, f.items, f.muts, f.results)
		rep.add(r)
		retry = append(retry, r.retry...)
		if err != nil {
			storesFailed = true
			if failed == nil {
				failed = err
				cancel()
			}
		}
	}
	if err := <-produceErr; err != nil && failed == nil && !errors.Is(err, context.Canceled) {
		failed = err
	}
	if failed == nil && len(retry) > 0 {
		failed = w.resendRestamped(ctx, c, retry, &rep)
	}
	if failed != nil {
		var perr *syncproto.Error
		if errors.As(failed, &perr) && perr.Action() == syncproto.ActionResend {
			return rep, fmt.Errorf("replay: server asked to resend later: %w", failed)
		}
		return rep, fmt.Errorf("replay: %w", failed)
	}
	rep.complete = rep.left == 0
	return rep, nil
}

// produce pages through the queue and launches one push per page. A page
// ends at the batch limit or where one more write would not fit in a
// frame; the next page starts after the last write taken.
func (w worker) produce(ctx context.Context, c *conn, batch int, flights chan<- *flight) error {
	limit := pushBytes(c.welcome.Limits)
	var after offlinequeue.ID
	for {
		items, err := w.c.queue.Peek(ctx, after, batch)
		if err != nil || len(items) == 0 {
			return err
		}
		f := &flight{done: make(chan struct{})}
		size := 0
		for _, it := range items {
			m, err := decodeMutation(it.Payload)
			if err != nil {
				// Not a mutation this client can send: it never will be.
				w.c.log.Error("queued item is not a mutation; dead-lettering it", "queue_id", it.ID, "err", err)
				if err := w.c.queue.MoveToDeadLetters(ctx, it.ID, "undecodable: "+err.Error()); err != nil {
					return err
				}
				after = it.ID
				continue
			}
			if !fitsPush(len(f.items), size, len(it.Payload), batch, limit) {
				break
			}
			size += len(it.Payload) + mutationSlack
			f.items = append(f.items, it)
			f.muts = append(f.muts, *m)
			after = it.ID
		}
		if len(f.items) == 0 {
			continue
		}
		select {
		case flights <- f:
		case <-ctx.Done():
			return ctx.Err()
		}
		go func() {
			defer close(f.done)
			f.results, f.err = c.push(ctx, f.muts)
		}()
	}
}

// pushEnvelope is the room a push frame keeps for everything but its
// mutations: type, request id, brackets.
const pushEnvelope = 1 << 10

// mutationSlack is the room each mutation keeps beyond its queued payload:
// a separating comma, and a longer timestamp when it is re-stamped.
const mutationSlack = 32

// pushBytes is how many bytes of queued payloads one push may carry: the
// frame limit the server announced (at most syncproto.MaxFrameBytes), less
// the envelope. A queued payload is the mutation as encoding/json's Marshal
// wrote it, never shorter than its encoding in a push frame (which does not
// escape HTML), so payloads within the budget make a frame within the limit.
func pushBytes(l syncproto.Limits) int {
	limit := syncproto.MaxFrameBytes
	if l.MaxFrameBytes > 0 {
		limit = min(limit, l.MaxFrameBytes)
	}
	return limit - pushEnvelope
}

// fitsPush reports whether a push holding n mutations whose payloads take
// size bytes (slack included) has room for one more of payload bytes. An
// empty push takes any one valid mutation, which always fits a frame.
func fitsPush(n, size, payload, batch, limit int) bool {
	return n == 0 || (n < batch && size+payload+mutationSlack <= limit)
}

// pendingWrite is a queued item and its mutation.
type pendingWrite struct {
	item offlinequeue.Item
	mut  syncproto.Mutation
}

// settled is what settle did with one batch.
type settled struct {
	replayReport
	retry []pendingWrite
}

func (r *replayReport) add(s settled) {
	r.sent += s.sent
	r.done += s.done
	r.charged += s.charged
	r.deadLettered += s.deadLettered
	r.conflicts += s.conflicts
	r.restamped += s.restamped
	r.left += s.left
}

// settle acts on the results of one batch, in order.
//
// The writes decided "done" (most of them) are finished together by
// replica.decideDone: their outcomes and their items in one commit when the
// replica lives in the queue's file, else outcomes then items, two commits
// per batch, never "item done before its outcome".
func (w worker) settle(ctx context.Context, items []offlinequeue.Item, muts []syncproto.Mutation, results []syncproto.Result) (settled, error) {
	var s settled
	var done []decision
	var doneIDs []offlinequeue.ID
	for i := range results {
		s.sent++
		v := judge(&results[i], items[i].Attempts, w.c.cfg.MaxAttempts, w.c.now())
		w.c.metrics.replayResults.WithLabelValues(string(results[i].Status)).Inc()
		if v.action == markDone {
			s.done++
			done = append(done, decision{mut: &muts[i], outcome: v.outcome})
			doneIDs = append(doneIDs, items[i].ID)
			continue
		}
		if err := w.act(ctx, v, items[i], &muts[i], &s); err != nil {
			return s, err
		}
	}
	if len(done) == 0 {
		return s, nil
	}
	if err := w.c.replica.decideDone(ctx, done, doneIDs); err != nil {
		return s, err
	}
	for _, d := range done {
		w.c.published(d.outcome)
	}
	return s, nil
}

func (w worker) act(ctx context.Context, v verdict, it offlinequeue.Item, m *syncproto.Mutation, s *settled) error {
	q := w.c.queue
	switch v.action {
	case handleConflict:
		s.conflicts++
		o, err := w.c.resolveConflict(ctx, m, v.outcome)
		if err != nil {
			return err
		}
		return w.finish(ctx, it, m, o)
	case chargeAttempt:
		s.charged++
		s.left++
		w.c.log.Info("write refused; attempt charged", "op_id", m.OpID, "attempts", v.attempts, "reason", v.reason)
		return q.SetAttempts(ctx, it.ID, v.attempts)
	case deadLetter:
		s.deadLettered++
		w.c.log.Warn("write dead-lettered", "op_id", m.OpID, "reason", v.reason)
		if err := w.c.replica.decide(ctx, m, v.outcome); err != nil {
			return err
		}
		if v.attempts > it.Attempts {
			if err := q.SetAttempts(ctx, it.ID, v.attempts); err != nil {
				return err
			}
		}
		if err := q.MoveToDeadLetters(ctx, it.ID, v.reason); err != nil {
			return err
		}
		w.c.metrics.deadLetters.Inc()
		w.c.published(v.outcome)
		return nil
	case restamp:
		s.restamped++
		s.retry = append(s.retry, pendingWrite{item: it, mut: *m})
		return nil
	case leaveQueued:
		s.left++
		return nil
	}
	// markDone is settled by the batch in settle, never here.
	return fmt.Errorf("sync worker: verdict %d has no action", v.action)
}

// finish records a decided write's outcome and marks its item done
// (replica.decideDone: never the item before its outcome, so a crash
// resends the write and the ledger answers duplicate).
func (w worker) finish(ctx context.Context, it offlinequeue.Item, m *syncproto.Mutation, o Outcome) error {
	if err := w.c.replica.decideDone(ctx, []decision{{mut: m, outcome: o}}, []offlinequeue.ID{it.ID}); err != nil {
		return err
	}
	w.c.published(o)
	return nil
}

// resendRestamped resends writes refused for clock skew once, stamped by
// the corrected clock. The queue keeps the original stamp; a later run
// re-stamps again if it must.
func (w worker) resendRestamped(ctx context.Context, c *conn, retry []pendingWrite, rep *replayReport) error {
	w.c.correctClock(c.welcome)
	batch, limit := min(c.welcome.Limits.MaxBatch, syncproto.MaxBatch), pushBytes(c.welcome.Limits)
	for len(retry) > 0 {
		n, size := 0, 0
		for n < len(retry) && fitsPush(n, size, len(retry[n].item.Payload), batch, limit) {
			size += len(retry[n].item.Payload) + mutationSlack
			n++
		}
		part := retry[:n]
		retry = retry[n:]
		items := make([]offlinequeue.Item, len(part))
		muts := make([]syncproto.Mutation, len(part))
		for i, p := range part {
			items[i], muts[i] = p.item, p.mut
			muts[i].HLC = w.c.stamp()
		}
		results, err := c.push(ctx, muts)
		if err == nil {
			err = w.fetchOmitted(ctx, c, muts, results)
		}
		if err != nil {
			return err
		}
		s, err := w.settle(context.WithoutCancel(ctx), items, muts, results)
		for range s.retry {
			s.left++ // still refused after a correction: next run
		}
		rep.add(s)
		if err != nil {
			return err
		}
	}
	return nil
}

// fetchOmitted replaces each conflict answer whose winner value the server
// left out to fit its frame (winner.value_omitted, PROTOCOL.md 5.4) by the
// answer to that op resent alone: the replay ledger repeats the decision,
// duplicate of conflict, with the whole winner, which fits any frame. The
// conflict handler thus always sees the winner's value. A superseded write
// needs no value: the change feed brings the winner to the replica.
func (w worker) fetchOmitted(ctx context.Context, c *conn, muts []syncproto.Mutation, results []syncproto.Result) error {
	for i := range results {
		r := &results[i]
		if r.Winner == nil || !r.Winner.ValueOmitted || r.Action() != syncproto.ActionConflict {
			continue
		}
		again, err := c.push(ctx, muts[i:i+1])
		if err != nil {
			return fmt.Errorf("fetch the winner of %s: %w", muts[i].OpID, err)
		}
		results[i] = again[0]
	}
	return nil
}

// decodeMutation parses a queued payload.
func decodeMutation(payload []byte) (*syncproto.Mutation, error) {
	var m syncproto.Mutation
	if err := json.Unmarshal(payload, &m); err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// rebasedOpID is the op id of the write rebased from opID. It is derived,
// not random, so a conflict answered twice (a crash before the first
// answer's item was marked done) rebases into the same op: the queue
// dedups it by key and the server's ledger by op id.
func rebasedOpID(opID string) string {
	return uuid.NewSHA1(rebaseNamespace, []byte(opID)).String()
}

var rebaseNamespace = uuid.MustParse("6b1d4f3e-2c8a-5e0f-9d7b-3a2c1e0f4b5d")
