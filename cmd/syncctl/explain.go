package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/syncproto"
)

// itemState is explain's verdict on one queued write.
type itemState string

// The verdicts. Pending items are waiting for a replay; dead letters wait
// for an operator (syncctl queue requeue or purge).
const (
	// stateNeverSent: pending, never refused, and the server's ledger has
	// no decision: it was never sent, or lost before the server decided.
	stateNeverSent itemState = "never_sent"
	// stateAppliedUnacked: the server applied it, but the device never got
	// (or never recorded) the answer; the next replay is answered
	// "duplicate" and marks it done.
	stateAppliedUnacked itemState = "applied_unacked"
	// stateSupersededUnacked: as applied_unacked, but the write lost
	// last-writer-wins.
	stateSupersededUnacked itemState = "superseded_unacked"
	// stateConflict: the server refused it for a stale base version; the
	// next replay hands it to the app's conflict handler.
	stateConflict itemState = "conflict"
	// stateRejected: the server refused it (attempts were charged);
	// refusals are not recorded, so the code shows only once dead-lettered.
	stateRejected itemState = "rejected"
	// stateExpired: older than the server's ledger covers and not in it:
	// the next replay is answered "expired" and dead-letters it.
	stateExpired itemState = "expired"
	// stateDeadRejected: dead-lettered after the server refused it with a
	// code.
	stateDeadRejected itemState = "dead_rejected"
	// stateDeadExpired: dead-lettered because it was expired.
	stateDeadExpired itemState = "dead_expired"
	// stateDeadDecided: dead-lettered on the device, yet the server holds
	// a decision for it.
	stateDeadDecided itemState = "dead_decided"
	// stateDeadOther: dead-lettered for a reason that is not a server code.
	stateDeadOther itemState = "dead_other"
	// stateUnreadable: the payload is not a syncd write.
	stateUnreadable itemState = "unreadable"
	// stateTokenRefused: pending, with no decision on the server, on a
	// device whose token the server refused (revoked, expired, another
	// client id): nothing is sent until the device holds a valid token.
	stateTokenRefused itemState = "token_refused"
)

// queuedWrite is what the device's queue knows about one item.
type queuedWrite struct {
	ID       offlinequeue.ID
	Dead     bool
	Attempts offlinequeue.Attempts
	Reason   string              // dead letters only
	Write    *syncproto.Mutation // nil when the payload is not a syncd write
	Err      string              // why the payload is not one
}

// explanation is explain's answer for one item; its --json output.
type explanation struct {
	ID       offlinequeue.ID `json:"id"`
	Queue    string          `json:"queue"` // pending or dead
	OpID     string          `json:"op_id,omitempty"`
	Write    string          `json:"write,omitempty"`
	Attempts uint32          `json:"attempts"`
	State    itemState       `json:"state"`
	Code     syncproto.Code  `json:"code,omitempty"`    // dead_rejected: the server's refusal code
	Version  uint64          `json:"version,omitempty"` // the version it produced (applied) or lost to (superseded, conflict)
	Why      string          `json:"why"`
	// Blocked, on a pending item, says why the device cannot replay at
	// all: the server refused its token (client.TokenRefusal).
	Blocked string `json:"blocked,omitempty"`
	// Ledger is the server's answer for the op, when it was asked.
	Ledger *adminapi.LedgerAnswer `json:"ledger,omitempty"`
}

// reasonCode matches the "CODE: message" reasons the client library gives
// dead letters it was refused with.
var reasonCode = regexp.MustCompile(`^([a-z][a-z0-9_]{0,63}): `)

// explainStuck is explain for a device whose token the server refused
// (refusal, nil when it was not): a pending item cannot replay, which its
// Blocked says; one the server never decided is token_refused.
func explainStuck(w queuedWrite, ans *adminapi.LedgerAnswer, refusal *client.TokenRefusal) explanation {
	e := explain(w, ans)
	if refusal == nil || w.Dead || e.State == stateUnreadable {
		return e
	}
	e.Blocked = refusedToken(refusal)
	if e.State == stateNeverSent || e.State == stateRejected {
		e.State = stateTokenRefused
		e.Why = "not decided by the server, and the device cannot send it: " + e.Blocked
	}
	return e
}

// refusedToken says why a device whose token was refused cannot replay.
func refusedToken(r *client.TokenRefusal) string {
	fix := "give the device a valid token (sign it in again)"
	if r.Code == syncproto.CodeUnauthorized {
		fix += ", or remove the token from the deny list (syncctl jwt allow) if it was revoked by mistake"
	}
	return fmt.Sprintf("the server refused the device's token at %s (%s: %s); no write replays until %s", stamp(r.At), r.Code, r.Message, fix)
}

// explain decides why a queued write is still pending or dead, from the
// device's queue and the server's ledger answer (nil when the server was not
// asked). It does no I/O.
func explain(w queuedWrite, ans *adminapi.LedgerAnswer) explanation {
	e := explanation{ID: w.ID, Queue: "pending", Attempts: uint32(w.Attempts), Ledger: ans}
	if w.Dead {
		e.Queue = "dead"
	}
	if w.Write == nil {
		e.State, e.Why = stateUnreadable, "no server can apply this payload; "+w.Err
		return e
	}
	e.OpID = w.Write.OpID
	e.Write = string(w.Write.Op) + " " + w.Write.Model + "/" + w.Write.Key
	var res *syncproto.Result
	if ans != nil && ans.Found {
		res = ans.Result
	}
	if res != nil {
		if r := res.Winner; r != nil {
			e.Version = r.Version
		} else {
			e.Version = res.Version
		}
	}
	switch {
	case w.Dead && res != nil:
		e.State = stateDeadDecided
		e.Why = fmt.Sprintf("dead-lettered here (%s), yet the server decided it: %s; requeueing is harmless (the server answers duplicate), purging loses nothing", w.Reason, decision(res))
	case w.Dead:
		m := reasonCode.FindStringSubmatch(w.Reason)
		switch {
		case m != nil && m[1] == string(syncproto.StatusExpired):
			e.State = stateDeadExpired
			e.Why = "dead-lettered: older than the server's replay ledger covers, so the server cannot tell whether it was applied and never applies it again; purge it, or re-issue the write as a new one"
		case m != nil:
			e.State, e.Code = stateDeadRejected, syncproto.Code(m[1])
			e.Why = fmt.Sprintf("rejected with code %s after %s: %s; fix the cause, then requeue it, or purge it",
				m[1], count(int(w.Attempts), "attempt", "attempts"), strings.TrimPrefix(w.Reason, m[0]))
		default:
			e.State = stateDeadOther
			e.Why = "dead-lettered: " + w.Reason
		}
	case res != nil && res.Status == syncproto.StatusApplied:
		e.State = stateAppliedUnacked
		e.Why = fmt.Sprintf("sent and applied as version %d (seq %d) but not yet acknowledged locally; the next replay is answered duplicate and marks it done", res.Version, res.Seq)
	case res != nil && res.Status == syncproto.StatusSuperseded:
		e.State = stateSupersededUnacked
		e.Why = fmt.Sprintf("sent and superseded by version %d (last writer wins) but not yet acknowledged locally; the next replay marks it done", e.Version)
	case res != nil && res.Status == syncproto.StatusConflict:
		e.State = stateConflict
		e.Why = fmt.Sprintf("conflict with version %d: its base version was stale; the next replay hands it to the app's conflict handler (rebase or drop)", e.Version)
	case res != nil:
		e.State = stateDeadOther
		e.Why = "the server recorded an unknown decision: " + decision(res)
	case ans != nil && !ans.Floor.IsZero() && !time.UnixMilli(w.Write.HLC.Wall).After(ans.Floor):
		e.State = stateExpired
		e.Why = fmt.Sprintf("written %s, at or before the ledger floor %s: the next replay is answered expired and dead-letters it", stamp(time.UnixMilli(w.Write.HLC.Wall)), stamp(ans.Floor))
	case w.Attempts > 0:
		e.State = stateRejected
		e.Why = fmt.Sprintf("refused by the server %s (the server records no refusals; the code shows once it is dead-lettered); it is retried until the client's attempt budget", count(int(w.Attempts), "time", "times"))
	default:
		e.State = stateNeverSent
		e.Why = "never sent: the server has no decision for it; the next replay sends it"
	}
	return e
}

func (a *app) explainCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "explain (FILE [--tenant T] [--replica FILE] | --client C --model M --key K --tenant T [--want S=V,...])",
		Short: "Say why a device's writes are still pending or dead, or whether a key is on a device's scopes",
		Long: `With FILE: join a device's queue file with the server's replay ledger and say, for each
pending item and dead letter, why it is there:

  never_sent          the server has no decision: never sent (or lost before)
  applied_unacked     applied by the server, not yet acknowledged on the device
  superseded_unacked  lost last-writer-wins, not yet acknowledged on the device
  conflict            refused for a stale base version (with the winner's version)
  rejected            refused; attempts are being charged
  expired             older than the ledger covers; will be dead-lettered
  dead_rejected       dead-lettered after a refusal with code X
  dead_expired        dead-lettered as expired
  dead_decided        dead-lettered, yet the server decided it
  dead_other          dead-lettered for another reason
  unreadable          the payload is not a syncd write
  token_refused       not decided, and the server refused the device's token

--server names the admin API (the ledger lives there). Ledgers are per tenant:
the client records its tenant (from the server's welcome) in its replica, and
explain reads it from there: the queue file itself when the replica shares a
SQLite queue's file, else the file --replica names. --tenant overrides it, and
is needed for a device that never connected. The replica also records the
server's last refusal of the device's token (revoked, denied, expired): while
it stands no write replays, and explain says so first.

With --client C --model M --key K (and --tenant, or --replica FILE of the
device to read it from): say whether the key is on the device's scopes
(partial sync, PROTOCOL.md section 19) and why: the record's scope value, the
device's grants (its token's, when it has a session on the server; its user's
membership rows), which grant brought the value (the token, or which
membership row at which seq), and when and why it left (moved at seq N to
value V, revoked at seq N by a membership row, unsubscribed), from the
server's oplog. A granted value the device does not request is answered
"not_requested", judged with the requested set the server recorded at the
device's last subscribe with scopes; --want SCOPE=V1,V2 (as the device
subscribes; "SCOPE=*" for every value granted) judges with that set instead.
A model no scope covers is answered "unscoped".`,
	}
	o := addAdminFlags(cmd)
	file := addFileArg(cmd)
	var tenant, replica string
	var limit int
	mode := progressAuto
	cmd.Flags().StringVar(&tenant, "tenant", "", "the device's tenant (default: the one its replica recorded)")
	cmd.Flags().StringVar(&replica, "replica", "", "the device's replica file, when it is not the queue file (an NDJSON queue)")
	cmd.Flags().IntVar(&limit, "limit", 1000, "explain at most this many items (pending first, then dead letters); 0 for all")
	cmd.Flags().Var(&mode, "progress", "progress bar on stderr while asking the server: auto (only on a terminal), always or never")
	k := addKeyFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if k.set() {
			return a.explainKey(cmd, o, k, args, tenant, replica)
		}
		path, err := file(args)
		if err != nil {
			return err
		}
		if limit < 0 {
			return failf(exitUsage, "--limit must not be negative")
		}
		c, err := a.adminClient(cmd, o)
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		q, err := a.openQueue(path, false)
		if err != nil {
			return err
		}
		defer q.Close()
		signIn, err := readSignIn(ctx, q, replica)
		if err != nil {
			return err
		}
		if tenant == "" {
			if tenant = signIn.Tenant; tenant == "" {
				return failf(exitUsage, "%s records no tenant (the device never connected, its server is older, or its replica is another file): pass --tenant, or --replica FILE", path)
			}
		}
		writes, more, err := readQueuedWrites(ctx, q, limit)
		if err != nil {
			return err
		}
		out := make([]explanation, 0, len(writes))
		p := a.newProgress(mode, "explain", len(writes))
		for i, w := range writes {
			var ans *adminapi.LedgerAnswer
			if w.Write != nil {
				if ans, err = lookupLedger(ctx, c, tenant, w.Write.OpID); err != nil {
					p.end()
					return err
				}
			}
			out = append(out, explainStuck(w, ans, signIn.Refusal))
			p.set(i + 1)
		}
		p.end()
		if a.json {
			return printJSON(a.stdout, out)
		}
		if signIn.User != "" {
			if _, err := fmt.Fprintf(a.stdout, "device of user %s in tenant %s\n", signIn.User, tenant); err != nil {
				return err
			}
		}
		if r := signIn.Refusal; r != nil {
			if _, err := fmt.Fprintf(a.stdout, "STUCK: %s\n", refusedToken(r)); err != nil {
				return err
			}
		}
		return a.printExplanations(out, more)
	}
	return cmd
}

// readSignIn reads what the device's replica recorded of its sign-in:
// from replica when given, else from the queue file when it is a SQLite
// file that holds the replica too; an NDJSON queue without --replica, or a
// SQLite queue without the replica's tables, records nothing.
func readSignIn(ctx context.Context, q *deviceQueue, replica string) (client.SignIn, error) {
	path := replica
	if path == "" {
		if q.format != formatSQLite {
			return client.SignIn{}, nil
		}
		path = q.path
	}
	s, err := client.ReadSignIn(ctx, path)
	if err != nil && replica != "" {
		return client.SignIn{}, failf(exitBadFile, "--replica %s: %v", replica, unwrapAll(err))
	}
	if err != nil {
		return client.SignIn{}, nil // a queue file without the replica's tables
	}
	return s, nil
}

// readQueuedWrites reads up to limit items (0: all), pending ones first,
// and reports whether more were left out.
func readQueuedWrites(ctx context.Context, q offlinequeue.Queue, limit int) ([]queuedWrite, bool, error) {
	items, more, err := collect(&listFlags{limit: limit}, func(after offlinequeue.ID, n int) ([]offlinequeue.Item, error) {
		return q.Peek(ctx, after, n)
	}, func(it offlinequeue.Item) offlinequeue.ID { return it.ID })
	if err != nil {
		return nil, false, err
	}
	var out []queuedWrite
	for _, it := range items {
		out = append(out, queuedOf(it, false, ""))
	}
	if more {
		return out, true, nil
	}
	rest := 0
	if limit > 0 {
		if rest = limit - len(out); rest == 0 {
			st, err := q.Stats(ctx)
			return out, st.DeadLetters > 0, err
		}
	}
	letters, more, err := collect(&listFlags{limit: rest}, func(after offlinequeue.ID, n int) ([]offlinequeue.DeadLetter, error) {
		return q.DeadLetters(ctx, after, n)
	}, func(d offlinequeue.DeadLetter) offlinequeue.ID { return d.ID })
	if err != nil {
		return nil, false, err
	}
	for _, d := range letters {
		out = append(out, queuedOf(d.Item, true, d.Reason))
	}
	return out, more, nil
}

func queuedOf(it offlinequeue.Item, dead bool, reason string) queuedWrite {
	w := queuedWrite{ID: it.ID, Dead: dead, Attempts: it.Attempts, Reason: reason}
	m, err := decodeWrite(it.Payload)
	if err != nil {
		w.Err = err.Error()
	} else {
		w.Write = m
	}
	return w
}

// lookupLedger asks the server what it decided for opID in tenant.
func lookupLedger(ctx context.Context, c *adminClient, tenant, opID string) (*adminapi.LedgerAnswer, error) {
	var ans adminapi.LedgerAnswer
	if err := c.get(ctx, adminapi.LedgerPath(opID), url.Values{"tenant": {tenant}}, &ans, http.StatusNotFound); err != nil {
		return nil, err
	}
	return &ans, nil
}

func (a *app) printExplanations(out []explanation, more bool) error {
	t := newTable(a.stdout, "ID", "QUEUE", "OP ID", "WRITE", "ATTEMPTS", "STATE", "WHY")
	tally := map[itemState]int{}
	for _, e := range out {
		t.row(strconv.FormatUint(uint64(e.ID), 10), e.Queue, e.OpID, e.Write, strconv.FormatUint(uint64(e.Attempts), 10), string(e.State), e.Why)
		tally[e.State]++
	}
	if err := t.flush(); err != nil {
		return err
	}
	states := make([]string, 0, len(tally))
	for s, n := range tally {
		states = append(states, fmt.Sprintf("%s %d", s, n))
	}
	sort.Strings(states)
	summary := count(len(out), "item", "items")
	if len(states) > 0 {
		summary += ": " + strings.Join(states, ", ")
	}
	if _, err := fmt.Fprintln(a.stdout, summary); err != nil {
		return err
	}
	if more {
		fmt.Fprintln(a.stderr, "more items were left out: raise --limit (0 for all)")
	}
	return nil
}
