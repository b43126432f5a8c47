package client

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/client/reconnect"
	"github.com/syncd-dev/syncd/client/synccore"
	"github.com/syncd-dev/syncd/internal/crashpoint"
	"github.com/syncd-dev/syncd/syncproto"
)

// DefaultInFlight is how many push batches may await their answers at once.
const DefaultInFlight = synccore.DefaultInFlight

// driverEvents bounds the inputs waiting for the driver; a sender waits
// when it is full (backpressure on the feed and the push answers).
const driverEvents = 64

// driver is the one goroutine that runs the client's sync core
// (synccore.Core, a pure state machine of inputs and actions). It feeds the core what
// happened (a connection welcomed or lost, a refusal, a queued write, a
// push answer, a feed frame, a snapshot loaded, the retry timer, a Sync
// request, Close) and carries out the actions the core returns (read the
// queue, push, settle, subscribe, apply, resync, arm the timer, report the
// status, answer a Sync). Every decision is the core's; the driver does
// the I/O and translates.
//
// The driver goroutine owns the core, the retry timer, the Sync waiters,
// and the link's view of the subscription. Other goroutines talk to it
// only through events (the link's goroutines: push answers, feed frames,
// snapshots, its end) and Client.kick (a write was queued).
type driver struct {
	c      *Client
	events chan event

	// Owned by the driver goroutine.
	core      *synccore.Core
	timer     *time.Timer
	timerID   uint64
	link      *link  // the link the core was welcomed on, nil when none
	subID     string // the live subscription's request id on link
	subFrom   uint64 // the cursor its next frame starts after
	syncs     map[uint64]chan<- error
	nextSync  uint64
	restamp   map[string]bool // op ids refused for clock skew: stamped afresh when sent again
	corrected bool            // the clock was corrected on this link
	passStart time.Time       // when the current pass began; zero when none
	online    bool            // the network monitor's last verdict, as fed to the core

	view atomic.Pointer[driverView] // what Status reports, after each step
}

// driverView is the core's status and the network verdict it was given,
// published together so Status never pairs one with a stale other.
type driverView struct {
	status synccore.Status
	online bool
}

// event is one input for the driver.
type event struct {
	link *link // the link it comes from; nil for the client's own
	in   synccore.Input
	feed syncproto.Message // a frame of link's subscription (in is nil)
	sync chan<- error      // answers a SyncRequested
}

func newDriver(c *Client, cursor uint64, scopes synccore.Scopes) *driver {
	d := &driver{
		c:      c,
		events: make(chan event, driverEvents),
		core: synccore.New(synccore.Config{
			MaxBatch: syncproto.MaxBatch, MaxPushBytes: pushBytes(syncproto.Limits{}), InFlight: c.cfg.InFlight,
			MaxAttempts: c.cfg.MaxAttempts, Scopes: scopes,
		}, cursor),
		timer:   time.NewTimer(time.Hour),
		syncs:   map[uint64]chan<- error{},
		restamp: map[string]bool{},
	}
	d.timer.Stop()
	d.view.Store(&driverView{status: d.core.Status()})
	return d
}

// post hands ev to the driver, unless the client closes first.
func (d *driver) post(ev event) bool {
	return d.postUntil(ev, nil)
}

// postUntil hands ev to the driver, unless the client closes or stop
// closes first.
func (d *driver) postUntil(ev event, stop <-chan struct{}) bool {
	select {
	case d.events <- ev:
		return true
	case <-d.c.ctx.Done():
		return false
	case <-stop:
		return false
	}
}

// run is the driver goroutine; it returns when the client closes.
func (d *driver) run() {
	defer d.timer.Stop()
	for {
		select {
		case <-d.c.ctx.Done():
			d.step(synccore.Close{})
			for id, w := range d.syncs {
				w <- ErrClosed
				delete(d.syncs, id)
			}
			return
		case ev := <-d.events:
			d.handle(ev)
		case <-d.c.kick:
			d.step(synccore.Enqueued{})
		case <-d.timer.C:
			d.step(synccore.TimerFired{Timer: d.timerID})
		}
	}
}

func (d *driver) handle(ev event) {
	switch in := ev.in.(type) {
	case synccore.Welcomed:
		if d.link != nil && d.link != ev.link {
			d.step(synccore.Disconnected{})
		}
		d.link, d.subID, d.corrected = ev.link, "", false
		d.step(in)
		return
	case synccore.Disconnected:
		if ev.link != d.link {
			return // a link the core was never welcomed on, or already gone
		}
		d.link = nil
		d.step(in)
		return
	case synccore.Network:
		d.online = in.Online
		d.step(in)
		return
	case synccore.SyncRequested:
		// A write queued before the request is part of the pass it waits for.
		select {
		case <-d.c.kick:
			d.step(synccore.Enqueued{})
		default:
		}
		d.nextSync++
		d.syncs[d.nextSync] = ev.sync
		d.step(synccore.SyncRequested{Sync: d.nextSync})
		return
	}
	if ev.link != nil && ev.link != d.link {
		return // an answer or frame from a connection that is gone
	}
	if ev.feed != nil {
		ev.in = d.feedInput(ev.feed)
		if ev.in == nil {
			return
		}
	}
	d.step(ev.in)
}

// feedInput translates a frame of the subscription into the core's input;
// nil when the frame is not for the live subscription.
func (d *driver) feedInput(msg syncproto.Message) synccore.Input {
	if msg.RequestID() != d.subID {
		return nil // a frame of a subscription replaced since
	}
	switch m := msg.(type) {
	case *syncproto.Changes:
		in := synccore.Changes{From: d.subFrom, Next: m.Cursor, Entries: m.Entries, Evictions: m.Evictions}
		d.subFrom = max(d.subFrom, m.Cursor)
		return in
	case *syncproto.Backfill:
		return synccore.Backfill{Scope: m.Scope, Value: m.Value, Entries: m.Entries, LastKey: m.LastKey, Done: m.Done, At: m.At}
	case *syncproto.Resync:
		d.c.log.Info("cursor older than the server's oplog; loading a snapshot", "reason", m.Reason)
		return synccore.FeedLost{}
	case *syncproto.Error:
		d.fail("subscription refused", m)
	}
	return nil
}

// step feeds in to the core and carries out the actions, feeding the
// answers of local ones (queue reads) back at once. Consecutive Done
// settles are carried out together: their outcomes in one replica
// transaction, then their items in one MarkDone.
func (d *driver) step(in synccore.Input) {
	work := []synccore.Input{in}
	for len(work) > 0 {
		in := work[0]
		work = work[1:]
		var done []synccore.Settle
		for _, a := range d.core.Step(in) {
			if s, ok := a.(synccore.Settle); ok && s.Verdict.Action == synccore.Done {
				done = append(done, s)
				continue
			}
			d.settleDone(done)
			done = nil
			if next := d.do(a); next != nil {
				work = append(work, next)
			}
		}
		d.settleDone(done)
	}
	v := driverView{status: d.core.Status(), online: d.online}
	if *d.view.Load() != v {
		d.view.Store(&v)
		d.c.statusChanged()
		d.c.scopeWake.wake()
	}
}

// do carries out one action; it returns the answer of a local one.
func (d *driver) do(a synccore.Action) synccore.Input {
	c := d.c
	switch a := a.(type) {
	case synccore.ReadQueue:
		return d.read(a)
	case synccore.Send:
		d.send(a)
	case synccore.Settle:
		if err := d.settle(a); err != nil {
			d.fail("settling a write", err)
		}
	case synccore.Subscribe:
		if d.link == nil {
			return nil
		}
		id, err := d.link.conn.subscribe(d.link.ctx, a)
		if err != nil {
			d.fail("subscribe", err)
			return nil
		}
		d.subID, d.subFrom = id, a.After
	case synccore.Apply:
		_, dropped, err := c.replica.applyChanges(c.ctx, a, d.covered())
		if err != nil {
			d.fail("change feed", err)
			return nil
		}
		c.metrics.feedEntries.Add(float64(len(a.Entries)))
		for _, e := range a.Entries {
			c.observe(e.HLC)
			if e.Op != syncproto.OpEvict {
				c.changes.publish(feedEvent(&e, e.Seq))
			}
		}
		c.publishEvicted(dropped)
	case synccore.ApplyBackfill:
		fresh, err := c.replica.applyBackfill(c.ctx, a)
		if err != nil {
			d.fail("backfill", err)
			return nil
		}
		c.metrics.backfillEntries.Add(float64(len(fresh)))
		for _, e := range fresh {
			c.observe(e.HLC)
			c.changes.publish(feedEvent(&e, a.At))
		}
	case synccore.Resync:
		d.resync()
	case synccore.SetTimer:
		// The client's one backoff rule; the server's hint is capped as
		// the reconnect coordinator caps it.
		d.timerID = a.Timer
		d.timer.Reset(c.backoff().Wait(a.Failures, min(a.Hint, reconnect.MaxRetryHint)))
	case synccore.Report:
		// Published with the network verdict at the end of the step.
	case synccore.PassEnded:
		d.passEnded(a)
	default:
		panic(fmt.Sprintf("client: driver: unknown action %T", a))
	}
	return nil
}

// fail handles a failed action on the link: the connection is closed, so
// the core is told Disconnected and everything not settled is resent on
// the next connection (the server's ledger answers what it decided).
func (d *driver) fail(what string, err error) {
	if d.link == nil {
		return
	}
	if d.c.ctx.Err() == nil {
		d.c.log.Error(what+" failed; reconnecting", "err", err)
	}
	d.link.conn.close()
}

// read answers a ReadQueue from the writes this client queued since the
// driver last read (Client.queued), else from the queue.
func (d *driver) read(a synccore.ReadQueue) synccore.Input {
	c := d.c
	if a.After == 0 && d.passStart.IsZero() {
		d.passStart = c.now()
		if c.reconcile.Swap(false) {
			if err := c.replica.reconcile(c.ctx, c.queue); err != nil {
				c.reconcile.Store(true)
				c.log.Error("repairing the pending overlay", "err", err)
			}
		}
	}
	if page, ok := c.queued.page(a); ok {
		return page
	}
	// Not cancelled (a page is read in well under a millisecond, and Close
	// waits for the driver anyway): a cancellable read costs a goroutine.
	items, err := c.queue.Peek(context.WithoutCancel(c.ctx), offlinequeue.ID(a.After), a.Limit)
	if err != nil {
		d.fail("reading the queue", err)
		return nil
	}
	if len(items) > 0 {
		c.queued.readFromQueue(uint64(items[len(items)-1].ID))
	}
	page := synccore.Page{Read: a.Read, Items: make([]synccore.Item, len(items)), End: len(items) < a.Limit}
	for i, it := range items {
		ci := synccore.Item{ID: uint64(it.ID), Attempts: int(it.Attempts), Size: len(it.Payload)}
		m, err := decodeMutation(it.Payload)
		if err != nil {
			ci.Invalid = err.Error()
		} else {
			ci.Mutation = *m
		}
		page.Items[i] = ci
	}
	return page
}

// send pushes a batch on the link; the answer comes back as an event.
func (d *driver) send(a synccore.Send) {
	if d.link == nil {
		return
	}
	muts := make([]syncproto.Mutation, len(a.Items))
	for i, it := range a.Items {
		muts[i] = it.Mutation
		if d.restamp[it.Mutation.OpID] {
			muts[i].HLC = d.c.stamp()
		}
	}
	d.link.push(a.Push, muts)
}

// resync loads a snapshot on the link's goroutine; Snapshot answers it.
func (d *driver) resync() {
	l := d.link
	if l == nil {
		return
	}
	st := d.core.Scopes()
	sc := snapshotScopes{want: st.Want, lost: st.Lost, cov: d.covered()}
	l.spawn(func() {
		head, have, err := d.c.loadSnapshot(l.ctx, l.conn.url, sc)
		if err != nil {
			if l.ctx.Err() == nil {
				d.c.log.Error("loading a snapshot failed; reconnecting", "err", err)
				l.snapshotAbandoned.Store(true)
			}
			l.conn.close()
			return
		}
		d.c.resyncNext.Store(false)
		if err := d.c.rememberDatabase(l.ctx, l.conn.welcome.DatabaseID); err != nil {
			l.lose("recording the database id", err)
			return
		}
		if err := d.c.welcomeSettled(l.ctx, l.conn.welcome); err != nil {
			l.lose("recording the welcome's grants", err)
			return
		}
		d.post(event{link: l, in: synccore.Snapshot{Head: head, Have: have}})
	})
}

// passEnded accounts for a pass and answers the Syncs that waited for it.
func (d *driver) passEnded(a synccore.PassEnded) {
	c := d.c
	if !d.passStart.IsZero() {
		c.metrics.replaySeconds.Observe(c.now().Sub(d.passStart).Seconds())
		d.passStart = time.Time{}
	}
	var err error
	switch {
	case a.Lost:
		c.metrics.replays.WithLabelValues("failed").Inc()
		err = ErrOffline
		if re := c.refusal.Load(); re != nil {
			err = re
		}
	case a.Left > 0:
		c.metrics.replays.WithLabelValues("partial").Inc()
	default:
		c.metrics.replays.WithLabelValues("complete").Inc()
		if serr := c.replica.setLastSync(c.ctx, c.now()); serr != nil {
			c.log.Error("recording the last sync", "err", serr)
		}
	}
	for _, id := range a.Syncs {
		if w, ok := d.syncs[id]; ok {
			w <- err
			delete(d.syncs, id)
		}
	}
}

// sync asks the driver for a pass over the queue and waits for its end.
func (d *driver) sync(ctx context.Context) error {
	res := make(chan error, 1)
	if !d.post(event{in: synccore.SyncRequested{}, sync: res}) {
		return ErrClosed
	}
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// --- settling -----------------------------------------------------------

// outcome is the durable outcome of a settled write.
func outcome(s synccore.Settle, now time.Time) Outcome {
	r := s.Verdict.Result
	o := Outcome{OpID: s.Item.Mutation.OpID, Version: r.Version, Seq: r.Seq, HLC: r.HLC, Winner: r.Winner, DecidedAt: now}
	switch s.Verdict.Action {
	case synccore.Done:
		o.Status = OutcomeStatus(s.Verdict.Status)
	case synccore.Conflict:
		o.Status = StatusConflict
	case synccore.DeadLetter:
		o.Status, o.Reason = StatusDeadLettered, s.Verdict.Reason
		o.Version, o.Seq, o.Winner = 0, 0, nil
	}
	return o
}

// Steps of settling applied writes, for crash tests (crashpoint): the
// server's answers are in, not yet recorded; then recorded (in the queue's
// file, committed without a sync of their own).
const (
	stepAnswered = "outcomes answered, not recorded"
	stepRecorded = "outcomes recorded"
)

// settleDone finishes writes the core decided Done together, by
// replica.decideDone: their outcomes and their items in one commit when the
// replica lives in the queue's file, else outcomes then items, never "item
// done before its outcome" (a crash resends them; the ledger answers
// duplicate).
func (d *driver) settleDone(done []synccore.Settle) {
	if len(done) == 0 {
		return
	}
	c := d.c
	ds := make([]decision, len(done))
	ids := make([]offlinequeue.ID, len(done))
	for i := range done {
		c.metrics.replayResults.WithLabelValues(string(done[i].Verdict.Result.Status)).Inc()
		delete(d.restamp, done[i].Item.Mutation.OpID)
		ds[i] = decision{mut: &done[i].Item.Mutation, outcome: outcome(done[i], c.now()), upcast: done[i].Verdict.Result.Upcast}
		ids[i] = offlinequeue.ID(done[i].Item.ID)
	}
	// Done: applied, duplicate or superseded, each an answer the server's
	// ledger keeps, so the outcomes need not wait for the disk.
	crashpoint.Reach(stepAnswered)
	if err := c.replica.decideDone(c.ctx, ds, ids, true); err != nil {
		d.fail("settling written outcomes", err)
		return
	}
	crashpoint.Reach(stepRecorded)
	c.published()
}

// settle carries out the core's verdict on one write other than Done.
func (d *driver) settle(s synccore.Settle) error {
	c, ctx := d.c, d.c.ctx
	it, m, v := s.Item, &s.Item.Mutation, s.Verdict
	id := offlinequeue.ID(it.ID)
	if it.Invalid == "" {
		c.metrics.replayResults.WithLabelValues(string(v.Result.Status)).Inc()
	}
	switch v.Action {
	case synccore.Conflict:
		delete(d.restamp, m.OpID)
		o, err := c.resolveConflict(ctx, m, outcome(s, c.now()))
		if err != nil {
			return err
		}
		// Synced: the handler's decision (RebasedAs) is the device's own.
		if err := c.replica.decideDone(ctx, []decision{{mut: m, outcome: o}}, []offlinequeue.ID{id}, false); err != nil {
			return err
		}
		c.published()
	case synccore.Charge:
		c.log.Info("write refused; attempt charged", "op_id", m.OpID, "attempts", v.Attempts, "reason", v.Reason)
		return c.queue.SetAttempts(ctx, id, offlinequeue.Attempts(v.Attempts))
	case synccore.DeadLetter:
		delete(d.restamp, m.OpID)
		c.log.Warn("write dead-lettered", "op_id", m.OpID, "reason", v.Reason)
		if v.Attempts > it.Attempts {
			if err := c.queue.SetAttempts(ctx, id, offlinequeue.Attempts(v.Attempts)); err != nil {
				return err
			}
		}
		decided := m
		if it.Invalid != "" {
			decided = nil // no op id to record an outcome under
		}
		if err := c.replica.deadLetter(ctx, id, v.Reason, decided, outcome(s, c.now())); err != nil {
			return err
		}
		c.metrics.deadLetters.Inc()
		c.published()
	case synccore.Restamp:
		if !d.corrected && d.link != nil {
			c.correctClock(d.link.conn.welcome)
			d.corrected = true
		}
		d.restamp[m.OpID] = true
	case synccore.Pause:
		c.log.Warn("write paused with its model until a server accepts its value version", "op_id", m.OpID, "model", m.Model,
			"value_version", m.EffectiveValueVersion(), "reason", v.Reason)
	case synccore.Left:
	default:
		return fmt.Errorf("verdict %d has no action", v.Action)
	}
	return nil
}

// --- pushes -------------------------------------------------------------

// pushEnvelope is the room a push frame keeps for everything but its
// mutations: type, request id, brackets.
const pushEnvelope = 1 << 10

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

// pushAnswer turns what a push returned into the core's input, or nil when
// the connection failed (the link's end tells the core).
func pushAnswer(push uint64, results []syncproto.Result, err error) synccore.Input {
	var pe *syncproto.Error
	switch {
	case err == nil:
		return synccore.Answered{Push: push, Results: results}
	case errors.As(err, &pe):
		return synccore.PushRefused{Push: push, Err: pe}
	}
	return nil
}

// omitsWinner reports whether a conflict answer left its winner's value
// out (fetchOmitted fetches it).
func omitsWinner(results []syncproto.Result) bool {
	for i := range results {
		if omitted(&results[i]) {
			return true
		}
	}
	return false
}

// A winner withheld for its scope value (value_withheld) is never
// fetched: a resend gets the same.
func omitted(r *syncproto.Result) bool {
	return r.Winner != nil && r.Winner.ValueOmitted && !r.Winner.ValueWithheld && r.Action() == syncproto.ActionConflict
}

// fetchOmitted replaces each conflict answer whose winner value the server
// left out to fit its frame (winner.value_omitted, PROTOCOL.md 5.4) by the
// answer to that op resent alone: the replay ledger repeats the decision,
// duplicate of conflict, with the whole winner, which fits any frame. The
// conflict handler thus always sees the winner's value. A superseded write
// needs no value: the change feed brings the winner to the replica.
func fetchOmitted(ctx context.Context, c *conn, muts []syncproto.Mutation, results []syncproto.Result) error {
	for i := range results {
		if !omitted(&results[i]) {
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

// decodeMutation parses a queued payload. It calls UnmarshalJSON itself:
// json.Unmarshal would scan the payload once more before it, and a payload
// that is not JSON is reported by Validate all the same.
func decodeMutation(payload []byte) (*syncproto.Mutation, error) {
	var m syncproto.Mutation
	if err := m.UnmarshalJSON(payload); err != nil {
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
